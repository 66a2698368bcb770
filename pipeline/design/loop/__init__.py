"""The design run under MPI over the ensemble's farm: in rounds (rounds.py, simulate.adaptive; over the levels
of simulate.fidelities, levels.py and level_round.py) and online, chosen by the trainers as the runs
complete (online.py, train.online); the rounds' runs tables and outputs read back (history.py)."""
