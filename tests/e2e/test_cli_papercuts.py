"""The command line over real nodes as a new user meets it: a job file found from any
directory, Ctrl-C in ``smr top`` and ``smr tail``, a cluster that is down, an unreachable
node's logs. Each message is checked as the exact line, with its exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster

pytestmark = pytest.mark.e2e


def smr_in(cwd: Path, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "smr", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout_s,
    )


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project `smr init` wrote, with a cluster of its job started from inside it
    (`--job job.py:job`, relative), stopped after the test."""
    done = smr_in(tmp_path, "init", "myjob")
    assert done.returncode == 0, done.stderr
    where = tmp_path / "myjob"
    up = smr_in(
        where, "cluster", "up", "--cluster", "cluster", "--nodes", "2", "--job", "job.py:job"
    )
    assert up.returncode == 0, up.stderr
    try:
        yield where
    finally:
        Cluster(where / "cluster").stop()


def test_a_relative_job_file_is_found_from_another_directory(project: Path) -> None:
    spec = json.loads((project / "cluster" / "cluster.json").read_text())
    assert spec["job"] == f"{project.resolve() / 'job.py'}:job"
    fed = smr_in(project.parent, "feed", "--cluster", "myjob/cluster", "myjob/sample.txt")
    assert fed.returncode == 0, fed.stderr
    query = smr_in(project.parent, "query", "--cluster", "myjob/cluster", "whale")
    assert query.returncode == 0, query.stderr
    sample = (project / "sample.txt").read_text().lower()
    assert json.loads(query.stdout)["state"] == {"count": sample.split().count("whale")}


@pytest.mark.parametrize("command", ["top", "tail"])
def test_ctrl_c_ends_top_and_tail_quietly_with_exit_0(project: Path, command: str) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "smr", command, "--cluster", "cluster"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As at a terminal: a suite started as a background job ignores SIGINT, and a
        # child would inherit that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        time.sleep(3.0)  # past its start: the loop that Ctrl-C ends
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert (process.returncode, err) == (0, "")


def test_a_cluster_that_is_down_is_said_once_with_what_to_do(project: Path) -> None:
    spec = json.loads((project / "cluster" / "cluster.json").read_text())
    down = smr_in(project, "cluster", "down", "--cluster", "cluster")
    assert down.returncode == 0, down.stderr
    addrs = ", ".join(node["addr"] for node in spec["nodes"])
    keys = Path("cluster") / "keys"
    expected = (
        f"smr: error: no node of the cluster answers ({addrs}: accepts no connection (nothing "
        f"listens there; or it refused this process's keys, from {keys})); is it running? "
        "'smr cluster up' starts it, 'smr status' shows its nodes"
    )
    for args in (
        ["query", "--cluster", "cluster", "whale"],
        ["feed", "--cluster", "cluster", "sample.txt"],
    ):
        done = smr_in(project, *args)
        assert (done.returncode, done.stderr.splitlines()) == (2, [expected]), done.stderr


def test_status_points_at_the_clusters_own_logs(project: Path) -> None:
    killed = smr_in(project, "fault", "kill", "n1", "--cluster", "cluster")
    assert killed.returncode == 0, killed.stderr
    status = smr_in(project, "status", "--cluster", "cluster")
    assert status.returncode == 1
    addr = json.loads((project / "cluster" / "cluster.json").read_text())["nodes"][1]["addr"]
    assert status.stderr.splitlines()[-1] == (
        f"smr: 1 of 2 nodes unreachable: n1 ({addr}); see their logs in cluster/logs/, or "
        "'smr status --json' for each reason"
    )
    assert os.path.isfile(project / "cluster" / "logs" / "n1.log")
