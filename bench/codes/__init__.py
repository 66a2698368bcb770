"""Real codes nobody here wrote, as a user of sim2dl runs them: a driver script per code that takes a
run's parameters and writes its outputs, in an environment of its own (environment.py)."""
