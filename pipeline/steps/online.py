"""online: the ensemble and training at the same time, in one MPI job (train.online): the first
`train.online.producers` ranks run the user's simulator over the design (simulate.command, the task farm
of pipeline.ensemble, with its retries and time limits) and send each run's samples to the
other ranks, which train on them as they arrive (pipeline.online). Nothing between simulation and
training is written to the file system: no ingest, convert, merge or stage (source: runs reads each run's
own output files once, when the run completes; source: stream reads the simulator's ADIOS2 SST stream).

One allocation, not two jobs that find each other: the producers and the training ranks are ranks of one MPI
job, so they start and end together, a failure of either ends both (no training rank left waiting for a
simulation job that died, no simulation job left running for nobody), Slurm places them with one request
(srun's ranks fill the nodes in order: producers first), and the samples move by MPI over the job's
interconnect rather than through a rendezvous service.

Plan (pure): the roles (`roles`), the converted fields' shapes and dtypes (`arrivals.held_fields`) and
every config check, before any run starts. Outputs as train's: {workdir}/train/summary.json (with an
`online` record), the model, metrics.json, learning curves, the validation figure; plus
online_runs.parquet (per run: samples sent, refused, buffered, dropped, times trained) and refused.csv;
the ensemble's runs table in {raw}/runs.parquet as always.

The step is one call: the job (pipeline/online/job.py: the roles, the checks, the producers' farm and the
training ranks' campaign). Memory and time: see pipeline.online.producer and
pipeline.online.training_rank.
"""

from __future__ import annotations

from pipeline.online.job import online_job as online

__all__ = ["online"]
