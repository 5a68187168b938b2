"""The emitter keeps seq order per slot across a re-route left open: with combine, a batch
closed from the combined tuples takes along the re-routed rows still open for its node
(older seqs of the same slots), instead of going out before them (seed 904751 of the
default sweep lost 4 acked tuples so: the node's hwm dropped the older ones as duplicates)."""

from __future__ import annotations

import pytest

from smr.checkpoint.ids import MapperId
from smr.mapper.emitter import Emitter
from smr.ring.hashing import even_tokens
from smr.ring.ids import NodeId
from smr.ring.view import Member, Status, View
from smr.wire.batch_body import decode_batch_body
from smr.wire.messages import Batch
from tests.smr.links import RecordingTransport

SLOT_BITS = 8


def test_a_combined_batch_takes_the_rerouted_rows_left_open_for_its_node_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = View(
        Member(NodeId(f"n{i}"), 1, f"sim://n{i}", token, "", Status.UP, 1)
        for i, token in enumerate(even_tokens(2, SLOT_BITS))
    )
    transport = RecordingTransport()
    emitter = Emitter(
        view,
        SLOT_BITS,
        MapperId("m"),
        replication=0,
        combine=lambda a, b: a + b,
        batch_size=1,
        transport=transport,
    )
    emitter.emit("w", 1)  # batch 1: seq 1 of w's slot, in flight
    (channel,) = [c for c in emitter._channels.all() if c.unacked]
    node = channel.node
    in_flight = list(channel.unacked.values())
    # A re-route deep in nested pumps leaves its rows open for the next send.
    with monkeypatch.context() as deep:
        deep.setattr("smr.mapper.router.REROUTE_DEPTH_MAX", -1)
        emitter._router.reroute(in_flight)
    emitter.emit("w", 1)  # seq 2 of the same slot, closed at once (batch_size 1)
    emitter.flush()
    sent = [m for m in transport.ends[f"sim://{node}"].sent if isinstance(m, Batch)]
    seqs = [
        seq for batch in sent for seq in decode_batch_body(batch.body, batch.n, 1 << SLOT_BITS).seqs
    ]
    # Seq 1 went out, then again after the re-route, before seq 2: never 2 before 1.
    assert seqs == [1, 1, 2], seqs
