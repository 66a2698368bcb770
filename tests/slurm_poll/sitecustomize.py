"""On PYTHONPATH of the tests' Snakemake runs under the Slurm executor (tests/test_cluster.py): caps the
executor's wait between two job-status checks at SIM2DL_TEST_SLURM_POLL_S seconds.

snakemake-executor-plugin-slurm 2.8 waits 10 s longer after every check that finds no job finished, up to
180 s (hard-coded; the right choice on a shared cluster). A workflow of sequential jobs then spends up to a
third of its time waiting for the next `squeue`, which made the Slurm tests the slowest in the suite.
The checks themselves, the jobs and Slurm are unchanged; only the sleep between checks is bounded. Any
other Python process (the jobs' own, which inherit the environment) is left alone: the patch is applied
when, and only if, the Slurm executor plugin is imported.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import os
import sys

PLUGIN = "snakemake_executor_plugin_slurm"


def cap_poll_interval(executor_class: type, cap_s: float) -> None:
    async def sleep(self) -> None:
        await asyncio.sleep(min(self.next_seconds_between_status_checks, cap_s))

    executor_class.sleep = sleep


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the plugin's loader so the patch follows its import."""

    def __init__(self, cap_s: float) -> None:
        self.cap_s = cap_s

    def find_spec(self, fullname, path, target=None):
        if fullname != PLUGIN:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module
        cap_s = self.cap_s

        def exec_and_patch(module) -> None:
            exec_module(module)
            cap_poll_interval(module.Executor, cap_s)

        spec.loader.exec_module = exec_and_patch
        return spec


if os.environ.get("SIM2DL_TEST_SLURM_POLL_S"):
    sys.meta_path.insert(0, PatchOnImport(float(os.environ["SIM2DL_TEST_SLURM_POLL_S"])))
