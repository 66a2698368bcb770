"""The messages between the ranks that run the ensemble (producers) and the ranks that train (training ranks)
in one online-training job: MPI point-to-point on the job's communicator, nothing on the file system.

- SAMPLE: (run, number, validation, arrays) to the training rank that owns it: `owner(run, number,
  training_ranks)`, fixed by the sample alone, so that which training rank trains on what does not depend on
  timing;
- DONE: a producer has no more runs: its per-run counts (read, refused) and its refusals' reasons;
- HANDED: (run, point) from the producers' first rank to the first training rank as it hands a run out
  (online choosing, pipeline.design.loop.online), its point in the unit cube;
- CHOICES: (points, values), the trainers' next choices, from the first training rank to the producers' first
  rank; None: no more (its last message).

A standard-mode send of a large message waits until the training rank receives it, and training ranks receive
between steps: a producer is never more than a step ahead of the slowest training rank that owns its samples,
and nothing queues without bound (the training rank's replay buffer is the only store).
"""

from __future__ import annotations

SAMPLE, DONE, HANDED, CHOICES = 81, 82, 83, 84


def owner(run: int, number: int, training_ranks: int) -> int:
    """The training rank (0..training_ranks-1) a run's sample goes to: consecutive samples of a run to
    consecutive training ranks, each run starting one further along (so short runs spread evenly too)."""
    return (run + number) % training_ranks


def is_validation(run: int, every: int) -> bool:
    """Whether a run is held out for validation: every `every`-th run (the last of each group of every)."""
    return every > 0 and run % every == every - 1
