"""`pytest --cpu-durations`: a test's CPU counts the processes it waited for, and a test that only waits
shows its wall time with little CPU."""

import subprocess
import sys

from .conftest import REPO, env

TESTS = """
import subprocess, sys, time

def test_burns_in_a_child():
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 1.5\\n"
                    "while time.process_time() < end: pass"], check=True)

def test_waits():
    time.sleep(1.5)
"""


def test_cpu_durations_count_waited_for_children_and_not_sleep(tmp_path):
    (tmp_path / "test_two.py").write_text(TESTS)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.cpu_seconds",
            "--cpu-durations=2",
            "-p",
            "no:cacheprovider",
            str(tmp_path / "test_two.py"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**env(), "PYTHONPATH": str(REPO)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = proc.stdout[proc.stdout.index("most CPU 2") :].splitlines()[1:4]
    figures = {
        row.split()[2].rsplit("::", 1)[-1]: (float(row.split()[0]), float(row.split()[1])) for row in rows[:2]
    }
    burnt, waited = figures["test_burns_in_a_child"], figures["test_waits"]
    assert burnt[0] >= 1.5 and waited[1] >= 1.5 and waited[0] < 0.5, rows
    assert rows[2].split()[-2:] == ["2", "tests"], rows
