"""`pytest --cpu-durations=N`: the N tests that used the most CPU, beside their wall time.

The suite runs on 2 cores with both busy nearly all the time, so its length is the CPU its tests use, not
their wall time: a test that waits (on Slurm, a registry, a sleep) costs the other worker little, a test
whose ranks train costs both. Each test's CPU is its worker's own and that of every process it started and
waited for (rusage of the worker and of its reaped children, setup to teardown). Daemons a fixture keeps
running (the virtual cluster's slurmd and the jobs under it, a registry) are reaped by no test, so a test
whose work runs under them shows its wall time only. Memory and time: one number per test.
"""

from __future__ import annotations

import resource
from typing import Any

import pytest

_STARTED: dict[str, float] = {}


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-durations",
        type=int,
        default=None,
        metavar="N",
        help="show the N tests that used the most CPU (their own and their waited-for processes')",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _STARTED[item.nodeid] = cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if call.when == "teardown" and item.nodeid in _STARTED:
        report.user_properties.append(("cpu_seconds", cpu_seconds() - _STARTED.pop(item.nodeid)))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    count = config.getoption("--cpu-durations")
    if count is None:
        return
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            wall[report.nodeid] = wall.get(report.nodeid, 0.0) + report.duration
            for key, value in report.user_properties:
                if key == "cpu_seconds":
                    cpu[report.nodeid] = value
    terminalreporter.write_sep("=", f"most CPU {count} (CPU s, wall s, test)")
    for nodeid in sorted(cpu, key=cpu.__getitem__, reverse=True)[:count]:
        terminalreporter.write_line(f"{cpu[nodeid]:8.1f} {wall[nodeid]:8.1f}  {nodeid}")
    total_wall = sum(wall[nodeid] for nodeid in cpu)  # over the same tests as the CPU
    terminalreporter.write_line(f"{sum(cpu.values()):8.1f} {total_wall:8.1f}  all {len(cpu)} tests")
