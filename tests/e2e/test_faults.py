"""Failures within tolerance lose nothing: nodes are SIGKILLed (or paused) while a feed runs,
and the final state still equals plain Python's counts exactly, key by key."""

from __future__ import annotations

import time
from collections.abc import Sequence

import psutil
import pytest

from tests.e2e.conftest import EXAMPLE_BOOKS, SHARED_TEXT, Cluster, word_counts

pytestmark = pytest.mark.e2e

# Small batches and a short window keep the feed running while the faults hit.
FEED_FLAGS = ["--batch-size", "200", "--window", "8"]


def books() -> list[str]:
    """Enough text for a feed that is still running when the faults hit."""
    shared = [SHARED_TEXT / "pg2701_moby_dick.txt", SHARED_TEXT / "pg1342_pride_and_prejudice.txt"]
    if all(p.is_file() for p in shared):
        return [str(p) for p in shared]
    return EXAMPLE_BOOKS


def kill_during_feed(cluster: Cluster, victims: Sequence[str], delay_s: float = 0.5) -> None:
    paths = books()
    pids = {n["id"]: n["pid"] for n in cluster.spec()["nodes"]}
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    time.sleep(delay_s)
    assert feed.poll() is None, "the feed ended before the failure could hit it"
    for victim in victims:
        cluster.smr("fault", "kill", victim, "--cluster", str(cluster.dir))
    cluster.wait_feed(feed)
    for victim in victims:
        pid = pids[victim]
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert cluster.counts() == word_counts(paths)
    # The live nodes own the whole ring, and what they took over were the victims (a victim
    # may have taken over another victim before dying itself).
    live = [row for row in cluster.status().values() if row["state"] == "up"]
    assert len(live) == len(pids) - len(victims)
    assert sum(row["range_share"] for row in live) == pytest.approx(1.0)
    taken = {record["dead"] for row in live for record in row["takeover_records"]}
    assert taken and taken <= set(victims)


def test_one_node_killed_with_r1_loses_nothing(cluster: Cluster) -> None:
    cluster.up(5, "examples.wordcount:job", "--replication", "1")
    kill_during_feed(cluster, ["n2"])


def test_two_non_adjacent_nodes_killed_at_once_with_r1_lose_nothing(cluster: Cluster) -> None:
    cluster.up(5, "examples.wordcount:job", "--replication", "1")
    kill_during_feed(cluster, ["n1", "n3"])


def test_two_adjacent_nodes_killed_at_once_with_r2_lose_nothing(cluster: Cluster) -> None:
    cluster.up(5, "examples.wordcount:job", "--replication", "2")
    kill_during_feed(cluster, ["n1", "n2"])


def test_node_paused_past_the_timeout_is_fenced_and_nothing_is_lost(cluster: Cluster) -> None:
    cluster.up(5, "examples.wordcount:job", "--replication", "1")
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    time.sleep(0.5)
    cluster.smr("fault", "pause", "n2", "--cluster", str(cluster.dir))
    time.sleep(2.0)
    cluster.smr("fault", "resume", "n2", "--cluster", str(cluster.dir))
    cluster.wait_feed(feed)
    assert cluster.counts() == word_counts(paths)
    deadline = time.monotonic() + 10
    while True:
        status = cluster.status()
        if status["n2"].get("fenced") == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status["n2"]["fenced"] == 1
    assert status["n2"]["incarnation"] == 2
    assert status["n2"]["range_share"] == 0.0
    assert sum(row["range_share"] for row in status.values()) == pytest.approx(1.0)


def test_under_replicated_slots_return_to_zero_after_a_takeover(cluster: Cluster) -> None:
    cluster.up(4, "examples.wordcount:job", "--replication", "1")
    cluster.feed(EXAMPLE_BOOKS[0])
    cluster.smr("fault", "kill", "n1", "--cluster", str(cluster.dir))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        status = cluster.status()
        live = [row for row in status.values() if row["state"] == "up"]
        if sum(r.get("takeovers", 0) for r in live) == 1 and all(
            r["under_replicated_slots"] == 0 for r in live
        ):
            break
        time.sleep(0.2)
    assert sum(r["takeovers"] for r in live) == 1
    assert all(r["under_replicated_slots"] == 0 for r in live)
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])
