"""Fault zones over real node processes: with the owners of each zone spread around the ring,
SIGKILL of every node of one zone during a feed loses nothing, and a node scaled out goes to
the emptiest zone and joins where no range ends up with every copy in one zone."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e.conftest import FEED_FLAGS, Cluster, word_counts
from tests.e2e.conftest import feed_books as books
from tests.e2e.test_moves import settle

pytestmark = pytest.mark.e2e


def ring_zones(cluster: Cluster) -> list[str]:
    """The zones of the serving nodes, clockwise from token 0, as the nodes report them."""
    rows = [row for row in cluster.status().values() if row.get("role") == "serving"]
    return [row["zone"] for row in sorted(rows, key=lambda row: row["token"])]


@pytest.mark.slow
def test_losing_every_node_of_a_zone_during_a_feed_loses_nothing(cluster: Cluster) -> None:
    cluster.up(4, "examples.wordcount:job", "--replication", "1", "--zones", "a,b")
    nodes = cluster.spec()["nodes"]
    assert ring_zones(cluster) == ["a", "b", "a", "b"]
    in_a = [node["pid"] for node in nodes if node["zone"] == "a"]
    assert len(in_a) == 2
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    try:
        time.sleep(0.5)
        assert feed.poll() is None, "the feed ended before the zone was lost"
        # The whole zone at once: two nodes, more than r = 1, but never neighbours.
        for pid in in_a:
            os.kill(pid, signal.SIGKILL)
    finally:
        cluster.wait_feed(feed)
    rows = settle(cluster)
    assert set(rows) == {node["id"] for node in nodes if node["zone"] == "b"}
    assert sum(row["takeovers"] for row in rows.values()) == 2
    assert sum(row["offline_slots"] for row in rows.values()) == 0
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
def test_a_node_scaled_out_keeps_every_range_in_two_zones(cluster: Cluster) -> None:
    cluster.up(4, "examples.wordcount:job", "--replication", "1", "--zones", "a,b,c")
    # Two of zone a, one each of b and c: a b a c keeps neighbours apart.
    assert ring_zones(cluster) == ["a", "b", "a", "c"]
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    try:
        out = cluster.smr("scale", "out", "--cluster", str(cluster.dir)).stdout
    finally:
        cluster.wait_feed(feed)
    assert "n4 on standby at" in out and "in zone b" in out and "done:" in out, out
    settle(cluster)
    zones = ring_zones(cluster)
    assert sorted(zones) == ["a", "a", "b", "b", "c"]
    assert all(zones[i] != zones[(i + 1) % len(zones)] for i in range(len(zones))), zones
    status = cluster.smr("status", "--cluster", str(cluster.dir))
    assert "keep every copy in one zone" not in status.stderr, status.stderr
    assert cluster.counts() == word_counts(paths)


def test_status_warns_of_ranges_whose_copies_share_one_zone(cluster: Cluster) -> None:
    up = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--nodes", "3", "--zones", "a,b",
        "--job", "examples.wordcount:job",
    )  # fmt: skip
    assert "warning: 1 of 3 ranges keep every copy in one zone" in up.stdout, up.stdout
    status = cluster.smr("status", "--cluster", str(cluster.dir))
    assert "smr: 1 ranges keep every copy in one zone" in status.stderr, status.stderr
    assert "(a)" in status.stderr
