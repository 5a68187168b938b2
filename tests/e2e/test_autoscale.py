"""The autoscale controller over real node processes: ``smr autoscale run`` polls the nodes,
decides with a policy and carries the decision out through the provisioner (a node leaves,
then stops), while ``smr autoscale status`` says what it decided and why; every count stays
exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import FEED_FLAGS, REPO, Cluster, word_counts
from tests.e2e.conftest import feed_books as books
from tests.e2e.test_rate_cap import first_words

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_an_idle_ring_is_scaled_in_to_its_minimum_and_loses_nothing(cluster: Cluster) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    paths = books()
    cluster.feed(*paths, extra=[*FEED_FLAGS, "--no-combine"])
    # thresholds: every node under both low thresholds for 3 s releases one node; the
    # 10 s cooldown keeps it to one within the run; min 2 would stop a second anyway.
    run = cluster.smr(
        "autoscale", "run", "--cluster", str(cluster.dir), "--policy", "thresholds",
        "--min", "2", "--max", "3", "--interval-s", "0.5", "--duration-s", "14",
    )  # fmt: skip
    assert "release n2" in run.stderr, run.stderr
    assert [n["id"] for n in cluster.spec()["nodes"]] == ["n0", "n1"]
    status = json.loads(
        cluster.smr("autoscale", "status", "--cluster", str(cluster.dir), "--json").stdout
    )
    assert status["policy"] == "thresholds" and status["serving"] == 2
    (action,) = status["actions"]
    assert action["ok"] and action["action"] == "release n2", action
    text = cluster.smr("autoscale", "status", "--cluster", str(cluster.dir)).stdout
    assert "policy thresholds" in text and "release n2: ok" in text, text
    assert cluster.counts() == word_counts(paths)


def test_autoscale_arguments_are_checked(cluster: Cluster) -> None:
    missing = cluster.smr("autoscale", "status", "--cluster", str(cluster.dir), check=False)
    assert missing.returncode == 2 and "no cluster" in missing.stderr
    cluster.up(1, "examples.wordcount:job")
    never = cluster.smr("autoscale", "status", "--cluster", str(cluster.dir), check=False)
    assert never.returncode == 2 and "no autoscale controller has run" in never.stderr
    bounds = cluster.smr(
        "autoscale", "run", "--cluster", str(cluster.dir), "--min", "3", "--max", "2",
        check=False,
    )  # fmt: skip
    assert bounds.returncode == 2 and "--min 3 is above --max 2" in bounds.stderr
    billing = cluster.smr(
        "autoscale", "run", "--cluster", str(cluster.dir), "--policy", "target-util",
        "--billing-period-s", "60", check=False,
    )  # fmt: skip
    assert billing.returncode == 2 and "capacity policy only" in billing.stderr


@pytest.mark.slow(reason="a whole scale-out and the policy's wait before scale-in: 45-50 s")
def test_a_saturated_capped_ring_scales_out_then_back_in_and_loses_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Two nodes that apply 3000 tuples/s each, fed as fast as they take it: the capacity
    # policy sees a full inbox and a saturated ring and adds nodes; once the feed is over
    # it releases them again. Nothing is lost through the joins and leaves.
    cluster.up(2, "examples.wordcount:job", "--replication", "1", "--rate-cap", "3000")
    source = first_words(tmp_path / "words.txt")
    controller = subprocess.Popen(
        [sys.executable, "-m", "smr", "autoscale", "run", "--cluster", str(cluster.dir),
         "--policy", "capacity", "--min", "2", "--max", "4", "--duration-s", "120"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        cluster.feed(str(source), extra=["--batch-size", "200", "--no-combine"])
        most = max_serving = 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            status = _autoscale_status(cluster)
            if status is not None:
                max_serving = max(max_serving, status["serving"])
                most = max(most, len(cluster.spec()["nodes"]))
                if max_serving > 2 and status["serving"] == 2 and len(status["actions"]) >= 2:
                    break
            time.sleep(0.5)
    finally:
        controller.terminate()
        _, err = controller.communicate(timeout=30)
    assert controller.returncode == 0, err
    assert max_serving > 2, err
    assert status is not None and status["serving"] == 2, status
    actions = status["actions"]
    assert all(action["ok"] for action in actions), actions
    assert [a["action"] for a in actions].count("scale out") == most - 2
    assert len(cluster.spec()["nodes"]) == 2
    assert cluster.counts() == word_counts([str(source)])


def _autoscale_status(cluster: Cluster) -> dict[str, object] | None:
    path = cluster.dir / "autoscale.json"
    if not path.exists():
        return None
    status: dict[str, object] = json.loads(path.read_text())
    return status


def test_cluster_up_starts_the_controller_and_cluster_down_stops_it(cluster: Cluster) -> None:
    cluster.up(2, "examples.wordcount:job", "--autoscale", "capacity", "--min", "2")
    pid = cluster.spec()["extra"]["autoscale_pid"]
    assert psutil.Process(pid).is_running()
    deadline = time.monotonic() + 15
    while _autoscale_status(cluster) is None:
        assert time.monotonic() < deadline, "the controller wrote no status"
        time.sleep(0.2)
    status = _autoscale_status(cluster)
    assert status is not None and status["policy"] == "capacity"
    assert (status["nodes_min"], status["nodes_max"]) == (2, 4)
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    bad = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--job", "examples.wordcount:job",
        "--min", "2", check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "--min and --max go with --autoscale" in bad.stderr


@pytest.mark.slow
def test_a_killed_node_leaves_the_figures_once_taken_over_and_the_ring_still_scales_in(
    cluster: Cluster,
) -> None:
    # Seen in the autoscaling benchmark's kill at peak: the controller kept a killed node's
    # last report for 10 s (no decision meanwhile), and every release after it failed after
    # 60 s waiting for the dead node to answer. Now the node is gone from the figures once
    # the ring's views mark it dead, and a release waits only for the nodes alive.
    cluster.up(4, "examples.wordcount:job", "--replication", "1")
    paths = books()
    cluster.feed(*paths, extra=[*FEED_FLAGS, "--no-combine"])
    controller = subprocess.Popen(
        [sys.executable, "-m", "smr", "autoscale", "run", "--cluster", str(cluster.dir),
         "--policy", "thresholds", "--min", "2", "--max", "4", "--interval-s", "0.5",
         "--duration-s", "16"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while _autoscale_status(cluster) is None:
            assert time.monotonic() < deadline, "the controller wrote no status"
            time.sleep(0.2)
        victim = next(n for n in cluster.spec()["nodes"] if n["id"] == "n1")
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        while (status := _autoscale_status(cluster)) is None or status["serving"] > 3:
            assert time.monotonic() - killed_at < 5, status
            time.sleep(0.1)
        _, err = controller.communicate(timeout=60)
    finally:
        if controller.poll() is None:
            controller.terminate()
            controller.communicate(timeout=30)
    assert controller.returncode == 0, err
    status = _autoscale_status(cluster)
    # Idle, the three nodes left are one too many for thresholds: one release, down to min.
    assert status is not None and len(status["actions"]) == 1, status
    (action,) = status["actions"]
    assert action["ok"] and action["action"].startswith("release"), action
    assert status["serving"] == 2, status
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
def test_the_controller_takes_the_workload_and_lag_from_the_source_when_it_reports(
    cluster: Cluster,
) -> None:
    from smr.autoscale.source import SOURCE_FILE, write_source

    cluster.up(2, "examples.wordcount:job", "--replication", "1")
    run_args = (
        "autoscale", "run", "--cluster", str(cluster.dir), "--policy", "thresholds",
        "--min", "2", "--max", "2", "--interval-s", "0.5", "--duration-s", "2",
    )  # fmt: skip
    write_source(cluster.dir, 1234.0, 5678)
    cluster.smr(*run_args)
    status = json.loads(
        cluster.smr("autoscale", "status", "--cluster", str(cluster.dir), "--json").stdout
    )
    assert status["source"] == {"offered_per_s": 1234.0, "backlog_tuples": 5678}, status
    assert status["workload_per_s"] == 1234.0 and status["backlog_tuples"] >= 5678
    text = cluster.smr("autoscale", "status", "--cluster", str(cluster.dir)).stdout
    assert "the source reports 5,678 of them" in text, text
    # A file that is not a source report: said once, and the nodes' figures are used.
    (cluster.dir / SOURCE_FILE).write_text("{not json")
    run = cluster.smr(*run_args)
    assert run.stderr.count("is not a source report") == 1, run.stderr
    status = json.loads(
        cluster.smr("autoscale", "status", "--cluster", str(cluster.dir), "--json").stdout
    )
    assert status["source"] is None and status["workload_per_s"] < 1234.0
