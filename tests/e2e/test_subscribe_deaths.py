"""A subscription across node deaths, over real node processes: a job that emits a record per
tuple, nodes SIGKILLed at several points of a feed, and a subscriber that lags behind the
files. Whatever the timing, the subscription returns every record ``smr output`` reads from
the files (each origin once), and names no node as unread: a local cluster's output files
can be read through any live node."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from typing import Any

import pytest

import smr
from smr.client.control import Client, NodeUnreachable
from smr.cluster.local import signal_node
from smr.connection import OutputRecord, Subscription
from smr.spec.parse import read_spec
from tests.e2e.conftest import EXAMPLE_BOOKS, FEED_FLAGS, Cluster, word_counts

pytestmark = pytest.mark.e2e

COUNTED = "examples.wordcount:counted"


def output_origins(cluster: Cluster) -> set[tuple[Any, ...]]:
    """The origins of every record ``smr output`` reads from the cluster's files."""
    result = cluster.smr("output", "--cluster", str(cluster.dir))
    return {tuple(json.loads(line)["origin"]) for line in result.stdout.splitlines()}


def kill_during_feed(
    cluster: Cluster, feed: subprocess.Popen[str], kills: tuple[tuple[str, float], ...]
) -> None:
    """SIGKILL each node of ``kills`` once the live nodes have applied that share of the
    feed's tuples (the dead ones' counts no longer add: a later point comes later still)."""
    total = sum(word_counts(EXAMPLE_BOOKS).values())
    spec = read_spec(cluster.dir)
    alive = {node.id: node.addr for node in spec.nodes}
    client = Client(timeout_ms=1000)
    try:
        for node, share in kills:
            while applied(client, list(alive.values())) < share * total:
                assert feed.poll() is None, "the feed ended before the kills: give it more text"
                time.sleep(0.02)
            signal_node(spec, node, signal.SIGKILL)
            del alive[node]
    finally:
        client.close()


def applied(client: Client, addrs: list[str]) -> int:
    rows = client.status_each(addrs).values()
    return sum(row.get("tuples_applied", 0) for row in rows if not isinstance(row, NodeUnreachable))


def follow(subscription: Subscription, records: list[OutputRecord]) -> None:
    """Read the subscription to its end, slowly: a pause every 2,000 records keeps the
    reader behind the files, so a node dies with records written that it has not read."""
    for record in subscription:
        records.append(record)
        if len(records) % 2000 == 0:
            time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kills", "by_seeds"),
    [
        ((("n1", 0.1), ("n3", 0.35), ("n5", 0.6)), False),
        ((("n1", 0.2), ("n3", 0.45), ("n5", 0.7)), True),
    ],
)
def test_a_subscription_across_kills_returns_every_record_the_files_hold(
    cluster: Cluster, kills: tuple[tuple[str, float], ...], by_seeds: bool
) -> None:
    # Six nodes, r = 1: three non-adjacent nodes killed one after the other, each taken over
    # by its clockwise neighbour, which replays the tuples past its last checkpoint.
    cluster.up(6, COUNTED, "--replication", "1")
    spec = read_spec(cluster.dir)
    target = ",".join(node.addr.removeprefix("tcp://") for node in spec.nodes[:2])
    records: list[OutputRecord] = []
    with smr.connect(target if by_seeds else cluster.dir) as connection:
        subscription = connection.subscribe("start", idle_timeout_s=4)
        reader = threading.Thread(target=follow, args=(subscription, records), daemon=True)
        reader.start()
        feed = cluster.feed_in_background(*EXAMPLE_BOOKS, job=COUNTED, extra=FEED_FLAGS)
        kill_during_feed(cluster, feed, kills)
        cluster.wait_feed(feed)
        reader.join(timeout=120)
        assert not reader.is_alive(), "the subscription did not end"
    expected = output_origins(cluster)
    delivered = [record.origin for record in records]
    assert len(delivered) == len(set(delivered)), "an origin was returned twice"
    missing = expected - set(delivered)
    assert not missing, f"{len(missing)} of {len(expected)} records never returned"
    assert set(delivered) == expected
    assert subscription.unread_of_dead == {}
    assert subscription.repeats.repeats > 0  # the takers' replays were read, and dropped
