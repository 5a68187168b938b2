"""Slow is not dead: a reduce call that holds a node's loop for seconds (far past the 700 ms
after which a silent node is declared dead) delays only that node's slots; its heartbeats go
on from their own thread, nobody takes it over, and every count stays exact."""

from __future__ import annotations

import time

import pytest

from smr.client import status
from smr.client.control import Client
from smr.spec.parse import read_spec
from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts
from tests.e2e.jobs import SLOW_CALL_S

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_a_reduce_call_of_seconds_gets_no_node_declared_dead_and_loses_nothing(
    cluster: Cluster,
) -> None:
    job = "tests.e2e.jobs:one_slow_call"
    cluster.up(4, job, "--replication", "1")
    cluster.feed(EXAMPLE_BOOKS[0], job=job)
    status = cluster.status()
    assert all(row["state"] == "up" for row in status.values())
    assert sum(row["takeovers"] for row in status.values()) == 0
    assert sum(row["fenced"] for row in status.values()) == 0
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])
    assert SLOW_CALL_S >= 3 * 0.7  # the call is far past the failure timeout and probe


@pytest.mark.slow
def test_status_shows_a_node_held_by_a_slow_reduce_call_as_busy_not_unreachable(
    cluster: Cluster,
) -> None:
    job = "tests.e2e.jobs:one_slow_call"
    cluster.up(4, job, "--replication", "1")
    feed = cluster.feed_in_background(EXAMPLE_BOOKS[0], job=job)
    spec = read_spec(cluster.dir)
    client = Client(timeout_ms=300)
    seen: set[str] = set()
    try:
        # Poll while the feed runs: the node whose loop the slow call holds does not answer,
        # but its peers have its heartbeats, which say it is busy.
        while feed.poll() is None and "busy" not in seen:
            seen |= {row["state"] for row in status.collect(spec, client)}
            time.sleep(0.05)
    finally:
        client.close()
        Cluster.wait_feed(feed)
    # (For the first 200 ms of the call its thread has not beaten yet: then the node may
    # show unreachable, before it shows busy.)
    assert "busy" in seen, f"states seen during the slow call: {sorted(seen)}"
    assert all(row["state"] == "up" for row in cluster.status().values())
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])
