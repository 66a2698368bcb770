"""Watching a run while it runs: a real `tensorboard` server on loopback over a finished and a running
training, its Time Series page loaded in a real headless browser (Debian's chromium) with both runs listed,
the running one's points growing as its epochs end, and `sim2dl status` on it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from .browser import Browser
from .conftest import BIN, REPO, SLOW, kill_tree, run_cli, start_cli, unavailable, write_config


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if shutil.which("chromium") is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            unavailable("no chromium (Debian's package) to load TensorBoard's page in")
        subprocess.run(
            [str(REPO / "scripts" / "apt_ensure.sh"), "chromium=chromium"], check=True, timeout=1800
        )
    opened = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield opened
    opened.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@SLOW
def test_tensorboard_shows_a_finished_and_a_running_training_while_it_runs(tmp_path, staged, browser):
    _, config = staged
    finished, running = tmp_path / "finished", tmp_path / "running"
    # one rank each: what is watched is the same on any number
    path = write_config(tmp_path, {**config, "train": {**config["train"], "epochs": 1}})
    run_cli(["train", "--config", str(path), "--out", str(finished / "train")], ranks=1, timeout=600)
    running.mkdir()
    long = write_config(running, {**config, "train": {**config["train"], "epochs": 60}})
    job = start_cli(["train", "--config", str(long), "--out", str(running / "train")], 1)
    port = free_port()
    server = subprocess.Popen(
        [
            str(BIN / "tensorboard"),
            "--logdir",
            str(tmp_path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--reload_interval",
            "1",
            "--load_fast",
            "false",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        metrics = running / "train" / "metrics.json"
        wait_for(
            lambda: metrics.exists() and json.loads(metrics.read_text()), 300, "the running job's first epoch"
        )
        base = f"http://127.0.0.1:{port}"
        runs = ["finished/train/tensorboard/train", "running/train/tensorboard/train"]

        def listed():
            try:
                return set(runs) <= set(get_json(f"{base}/data/runs"))
            except OSError:  # the server is still starting
                return False

        wait_for(listed, 60, "tensorboard to list both runs")
        text = browser.page_text(f"{base}/#timeseries", [*runs, "val_loss"])
        assert all(run in text for run in runs) and "val_loss" in text, text[:2000]

        def points() -> int:
            query = urllib.parse.urlencode({"run": runs[1], "tag": "val_loss"})
            return len(get_json(f"{base}/data/plugin/scalars/scalars?{query}"))

        seen = wait_for(points, 30, "the running job's validation loss in tensorboard")
        wait_for(lambda: points() > seen, 120, "a later epoch of the running job to appear")
        status = json.loads(run_cli(["status", str(running), "--json"], ranks=None).stdout)
        train = status["steps"][-1]
        assert (
            train["state"] == "running" and train["of"] == 60 and 1 <= train["at"] < 60 and train["eta_s"] > 0
        )
    finally:
        kill_tree(job)
        server.terminate()
        server.wait(timeout=30)
    assert Path(finished / "train" / "summary.json").exists()
