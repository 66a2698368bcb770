"""The ensemble: the user's own simulator run over a parameter design, many runs inside one MPI job (a task
farm), with retries, time limits and resume; the design's parameters and each run's outcome become the runs
table, which ingest reads as labels.

    sampling.py    space-filling designs in the unit cube, scaled to each parameter
    plan.py        the design, one row per run, a block at a time (pure: `EnsemblePlan`), and a run's
                   command with its values filled in
    fidelity.py    levels of one simulator (simulate.fidelities): a cheap code beside an expensive one, over
                   a nested design, and what each level costs
    farm.py        the runs handed out over the ranks and run by each rank's run worker (`farm`), and the
                   step (`run_ensemble`)
    runs_table.py  the design written first, each rank's outcomes, the table of both
    messages.py    the MPI messages between the ensemble's ranks and the ranks that train online

The design chosen in rounds or online (pipeline/design/loop/, a tier above) runs on this farm.
"""
