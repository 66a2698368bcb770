"""The design run under MPI over the ensemble's farm: in rounds (rounds.py, simulate.adaptive) and online,
chosen by the trainers as the runs complete (online.py, train.online)."""
