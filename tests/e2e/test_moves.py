"""Moves, leaves and joins over real node processes while a feed runs: ``smr move`` hands
the top of a range to the clockwise neighbour, ``smr scale in`` makes a node leave, ``smr
scale out`` adds nodes, a node is killed in the middle of a move or of its join, a fenced
node joins again by itself; every dump equals plain Python's counts, key by key."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psutil
import pytest

from smr.client.control import Client
from tests.e2e.conftest import FEED_FLAGS, Cluster, word_counts
from tests.e2e.conftest import feed_books as books

pytestmark = pytest.mark.e2e


def move(cluster: Cluster, *args: str, attempts: int = 20) -> str:
    """Run ``smr move`` (or ``smr scale in``) until it is done; a refusal because a replica
    is still being rebuilt after the previous move is retried (the reason says so)."""
    for _ in range(attempts):
        result = cluster.smr(*args, "--cluster", str(cluster.dir), check=False)
        if result.returncode == 0:
            return result.stdout
        assert result.returncode == 1, result.stderr
        retryable = ("not complete yet", "already takes part", "views differ")
        assert any(reason in result.stderr for reason in retryable), result.stderr
        time.sleep(0.3)
    raise AssertionError(f"smr {' '.join(args)} never got done")


def settle(cluster: Cluster, timeout_s: float = 20) -> dict[str, dict[str, Any]]:
    """Wait until no move is under way and every slot has its copies; the status rows."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = {n: r for n, r in cluster.status().items() if r["state"] == "up"}
        if all(
            not r["moves"]["under_way"] and r["under_replicated_slots"] == 0 for r in rows.values()
        ):
            return rows
        assert time.monotonic() < deadline, f"not settled: {rows}"
        time.sleep(0.2)


@pytest.mark.slow
def test_moves_around_the_ring_during_a_feed_lose_nothing(cluster: Cluster) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    try:
        for node in ("n0", "n1", "n2", "n0"):
            out = move(cluster, "move", node, "--fraction", "0.4")
            assert out.startswith("started:") and "done:" in out, out
    finally:
        cluster.wait_feed(feed)
    rows = settle(cluster)
    assert sum(r["moves_given"] for r in rows.values()) == 4
    assert sum(r["moves_received"] for r in rows.values()) == 4
    assert sum(r["takeovers"] for r in rows.values()) == 0
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
def test_a_node_that_leaves_during_a_feed_hands_its_range_over_and_stops(
    cluster: Cluster,
) -> None:
    cluster.up(4, "examples.wordcount:job", "--replication", "1")
    leaver_pid = next(n["pid"] for n in cluster.spec()["nodes"] if n["id"] == "n1")
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    try:
        out = move(cluster, "scale", "in", "n1")
        assert "n1 stopped and removed" in out, out
    finally:
        cluster.wait_feed(feed)
    assert [n["id"] for n in cluster.spec()["nodes"]] == ["n0", "n2", "n3"]
    assert not psutil.pid_exists(leaver_pid) or psutil.Process(leaver_pid).status() == "zombie"
    rows = settle(cluster)
    assert set(rows) == {"n0", "n2", "n3"}
    assert sum(r["range_share"] for r in rows.values()) == pytest.approx(1.0)
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["giver", "receiver"])
def test_a_node_killed_during_a_move_loses_nothing(cluster: Cluster, victim: str) -> None:
    cluster.up(4, "examples.wordcount:job", "--replication", "1")
    nodes = {n["id"]: n for n in cluster.spec()["nodes"]}
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    client = Client()
    try:
        time.sleep(1.0)  # the feed is under way
        reply = client.move(nodes["n1"]["addr"], 0.5)
        assert reply.started, reply.text
        killed = "n1" if victim == "giver" else "n2"
        # Soon enough to land in the middle of the move (it takes a few to tens of ms): a
        # signal from here, not from a command whose start alone can take longer.
        time.sleep(0.005)
        os.kill(nodes[killed]["pid"], signal.SIGKILL)
    finally:
        client.close()
        cluster.wait_feed(feed)
    # The feed may end before the watchers have declared the node dead: wait for the
    # takeover (one, of the killed node's range) before comparing.
    deadline = time.monotonic() + 20
    while sum(r["takeovers"] for r in settle(cluster).values()) == 0:
        assert time.monotonic() < deadline, "nobody took the killed node's range over"
        time.sleep(0.2)
    rows = settle(cluster)
    assert killed not in rows
    assert sum(r["takeovers"] for r in rows.values()) == 1
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
def test_two_nodes_scaled_out_during_a_feed_join_side_by_side_and_lose_nothing(
    cluster: Cluster,
) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    try:
        out = cluster.smr("scale", "out", "--cluster", str(cluster.dir), "--count", "2").stdout
    finally:
        cluster.wait_feed(feed)
    assert out.count("done:") == 2, out
    rows = settle(cluster)
    assert set(rows) == {"n0", "n1", "n2", "n3", "n4"}
    # The two joins ran at once, beside two different givers: each giver's record of its
    # join spans the time the other one was under way.
    joins = {
        giver: record
        for giver, row in rows.items()
        for record in row["moves"]["recent"]
        if record["role"] == "giver" and record["receiver"] in ("n3", "n4")
    }
    assert len(joins) == 2, joins
    spans = [(j["at_unix_s"] - j["total_ms"] / 1000, j["at_unix_s"]) for j in joins.values()]
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans
    assert all(row["role"] == "serving" for row in rows.values())
    assert sum(r["range_share"] for r in rows.values()) == pytest.approx(1.0)
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
def test_a_joiner_killed_while_it_catches_up_is_dropped_and_nothing_is_lost(
    cluster: Cluster,
) -> None:
    from smr.cluster import local as local_cluster

    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    nodes = {n["id"]: n for n in cluster.spec()["nodes"]}
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    client = Client()
    try:
        joiner = local_cluster.add_node(cluster.dir)
        deadline = time.monotonic() + 10
        while not (reply := client.join(joiner.addr, "n1")).started:
            assert time.monotonic() < deadline, reply.text
            time.sleep(0.1)
        time.sleep(0.02)  # joining: an extra secondary of n1, catching up
        cluster.smr("fault", "kill", joiner.id, "--cluster", str(cluster.dir))
    finally:
        client.close()
        cluster.wait_feed(feed)
    deadline = time.monotonic() + 20
    while True:
        rows = {n: r for n, r in cluster.status().items() if r["state"] == "up"}
        if set(rows) == set(nodes) and all(
            not r["moves"]["under_way"] and r["under_replicated_slots"] == 0 for r in rows.values()
        ):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
def test_a_node_fenced_after_a_long_pause_joins_again_by_itself(cluster: Cluster) -> None:
    cluster.up(4, "examples.wordcount:job", "--replication", "1", "--rejoin-after-fence-s", "1")
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    try:
        time.sleep(0.5)
        cluster.smr("fault", "pause", "n1", "--cluster", str(cluster.dir))
        time.sleep(2.0)  # past the failure timeout: n2 takes n1 over
        cluster.smr("fault", "resume", "n1", "--cluster", str(cluster.dir))
    finally:
        cluster.wait_feed(feed)
    deadline = time.monotonic() + 30
    while True:
        rows = {n: r for n, r in cluster.status().items() if r["state"] == "up"}
        n1 = rows.get("n1")
        if (
            n1 is not None
            and n1["fenced"] == 1
            and n1["status_in_view"] == "up"
            and all(not r["moves"]["under_way"] for r in rows.values())
            and all(r["under_replicated_slots"] == 0 for r in rows.values())
        ):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    assert n1["incarnation"] == 2 and n1["keys"] > 0
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
def test_a_node_added_after_one_left_gets_a_new_id_and_joins(cluster: Cluster) -> None:
    # The node that left stays in the others' views: a new node under its id would be
    # taken for it (its join went unanswered).
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    move(cluster, "scale", "in", "n2")
    out = cluster.smr("scale", "out", "--cluster", str(cluster.dir)).stdout
    assert "n3 on standby" in out and "done: n3 serves" in out, out
    assert [n["id"] for n in cluster.spec()["nodes"]] == ["n0", "n1", "n3"]
    paths = books()
    cluster.feed(*paths, extra=FEED_FLAGS)
    assert cluster.counts() == word_counts(paths)
