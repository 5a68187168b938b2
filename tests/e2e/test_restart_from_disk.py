"""Restarting the whole cluster from its state on disk (``--data-dir``), over real node
processes: ``smr cluster down`` then ``up`` on the same directory restores every key, a rerun
of a feed resumes exactly (nothing new), a takeover after the restart is exact, a node that
was dead at the stop comes back fenced, and a damaged state file stops the restart with one
line naming it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts

pytestmark = pytest.mark.e2e


def up_with_disk(cluster: Cluster) -> Path:
    data_dir = cluster.dir.parent / "data"
    cluster.up(3, "examples.wordcount:job", "--replication", "1", "--data-dir", str(data_dir))
    return data_dir


def restart(cluster: Cluster) -> str:
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    result = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--job", "examples.wordcount:job"
    )
    return result.stdout


def wait_until(cluster: Cluster, done: Any, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not done(rows := cluster.status()):
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)


@pytest.mark.slow
def test_down_then_up_restores_every_key_and_a_rerun_resumes(cluster: Cluster) -> None:
    up_with_disk(cluster)
    cluster.feed(EXAMPLE_BOOKS[0], extra=["--no-combine"])
    expected = word_counts(EXAMPLE_BOOKS[:1])
    assert cluster.counts() == expected
    said = restart(cluster)
    assert "state restored from" in said
    assert cluster.counts() == expected
    # The same cluster life (its incarnation is kept): a rerun finds everything there.
    rerun = cluster.feed(EXAMPLE_BOOKS[0], extra=["--no-combine"])
    assert "nothing new" in rerun.stdout + rerun.stderr
    cluster.feed(*EXAMPLE_BOOKS[1:], extra=["--no-combine"])
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS)
    # The copies were rebuilt from the restored primaries: every slot has its copy again.
    wait_until(
        cluster, lambda rows: all(row["under_replicated_slots"] == 0 for row in rows.values())
    )
    victim = cluster.spec()["nodes"][0]
    os.kill(victim["pid"], signal.SIGKILL)
    wait_until(
        cluster,
        lambda rows: (
            sum(row.get("slots_owned", 0) for row in rows.values()) == 2**14
            and sum(row.get("takeovers", 0) for row in rows.values()) >= 1
        ),
    )
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS)


@pytest.mark.slow
def test_a_node_dead_at_the_stop_comes_back_fenced_and_nothing_is_lost(cluster: Cluster) -> None:
    up_with_disk(cluster)
    cluster.feed(*EXAMPLE_BOOKS, extra=["--no-combine"])
    victim = cluster.spec()["nodes"][1]
    os.kill(victim["pid"], signal.SIGKILL)
    wait_until(cluster, lambda rows: sum(row.get("takeovers", 0) for row in rows.values()) >= 1)
    # Let the taker write the range it took to disk (the next checkpoint) before the stop.
    time.sleep(1.5)
    restart(cluster)
    # Its own files are older than the ring's view, which marks it dead: it fences itself.
    wait_until(cluster, lambda rows: rows[victim["id"]].get("role") == "fenced")
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS)


@pytest.mark.parametrize(
    "damage", ["flipped byte", pytest.param("cut short", marks=pytest.mark.slow)]
)
def test_a_damaged_state_file_stops_the_restart_with_one_line(
    cluster: Cluster, damage: str
) -> None:
    data_dir = up_with_disk(cluster)
    cluster.feed(EXAMPLE_BOOKS[0], extra=["--no-combine"])
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    (log,) = (data_dir / "n1").glob("log-*.smr")
    data = log.read_bytes()
    assert len(data) > 100
    if damage == "flipped byte":
        middle = len(data) // 2
        log.write_bytes(data[:middle] + bytes([data[middle] ^ 0x40]) + data[middle + 1 :])
    else:
        log.write_bytes(data[: len(data) - 7])
    result = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--job", "examples.wordcount:job", check=False
    )
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert "n1" in said and str(log) in said and "damaged" in said
    reason = "checksum mismatch" if damage == "flipped byte" else "cut short"
    assert reason in said
    # No node was left running.
    assert all(row.get("role") != "serving" for row in cluster.status().values())


def test_a_new_cluster_refuses_a_data_directory_that_holds_state(cluster: Cluster) -> None:
    data_dir = up_with_disk(cluster)
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    assert any(data_dir.iterdir())
    other = cluster.dir.parent / "other"
    result = cluster.smr(
        "cluster",
        "up",
        "--dir",
        str(other),
        "--job",
        "examples.wordcount:job",
        "--data-dir",
        str(data_dir),
        check=False,
    )
    assert result.returncode == 2
    assert f"--data-dir {data_dir} is not empty" in result.stderr
    assert not (other / "cluster.json").exists()
