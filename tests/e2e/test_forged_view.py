"""A forged view cannot make a live node lose its state: a view that marks a live node dead
with no takeover (any local process can send one today) is refused by every node it reaches,
and the ring goes on exactly as before."""

from __future__ import annotations

import time

import pytest

from smr.client.control import Client
from smr.ring.ids import NodeId
from smr.transport.zeromq import Outbox
from smr.wire.codec import encode, pack_body
from smr.wire.kinds import RequestId
from smr.wire.messages import ViewReply
from tests.e2e.conftest import EXAMPLE_BOOKS, JOB, Cluster, word_counts

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_a_forged_view_marking_a_live_node_dead_is_refused_and_nothing_is_lost(
    cluster: Cluster,
) -> None:
    cluster.up(3, JOB, "--replication", "1")
    cluster.feed(EXAMPLE_BOOKS[0])
    addrs = {node["id"]: node["addr"] for node in cluster.spec()["nodes"]}
    client = Client(timeout_ms=2000)
    try:
        view = client.view(addrs["n0"])
    finally:
        client.close()
    forged = view.mark_dead(NodeId("n1"))
    push = encode(ViewReply(RequestId(0), forged.epoch, pack_body(forged.to_wire())))
    for target in ("n0", "n2"):
        outbox = Outbox(addrs[target])
        try:
            deadline = time.monotonic() + 5
            while not outbox.send(push) and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            time.sleep(0.2)
            outbox.close()
    time.sleep(1.0)
    status = cluster.status()
    assert all(row["state"] == "up" and row["fenced"] == 0 for row in status.values())
    assert status["n0"]["views_refused"] >= 1 and status["n2"]["views_refused"] >= 1
    assert status["n1"]["range_share"] > 0
    cluster.feed(EXAMPLE_BOOKS[1])
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:2])
