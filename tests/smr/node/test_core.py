"""The reducer node's logic, driven in-process: channels, ownership, dedup, reducer errors."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr.api import Job
from smr.checkpoint.ids import MapperId
from smr.checkpoint.loss import mark_lost
from smr.checkpoint.store import StateStore
from smr.node.core import NodeCore
from smr.node.turn import MESSAGES_PER_TURN_MAX
from smr.output.files import OutputSink
from smr.ring.hashing import slot_of
from smr.ring.ids import Epoch, NodeId, Slot, Token
from smr.ring.placement import Ring, Role
from smr.ring.view import Member, Status, View
from smr.wire.batch_body import encode_batch_body
from smr.wire.codec import decode, encode, pack_body, unpack_body
from smr.wire.kinds import ChannelNumber, RequestId, StreamId
from smr.wire.messages import Ack, Batch, Error, Message, Nack, NotOwner
from smr.wire.reads import (
    DumpReply,
    DumpRequest,
    HistoryReply,
    HistoryRequest,
    QueryReply,
    QueryRequest,
)
from tests.smr.links import CallbackLinks

SLOT_BITS = 8
PEER = b"peer-1"


def _count(key: Any, value: Any, state: dict[str, Any], emit: Any) -> None:
    if value == "boom":
        state["count"] = -1000  # mutated, then raises: must leave no trace
        emit(key, "never")
        raise RuntimeError("poison value")
    state["count"] = state.get("count", 0) + value
    if state["count"] == 3:
        emit(key, "reached 3")


JOB = Job("test", map=lambda record, emit: None, reduce=_count)


class Harness:
    """A NodeCore for node a of a two-node view, with its replies captured."""

    def __init__(self, tmp_path: Path) -> None:
        self.view = View(
            [
                Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1),
                Member(NodeId("b"), 1, "tcp://b", Token(128), "", Status.UP, 1),
            ]
        )
        self.replies: list[tuple[bytes, Message]] = []
        self.published: list[Sequence[bytes]] = []
        self.output_path = tmp_path / "a.jsonl"
        output = OutputSink("a", self.output_path, self.published.append)
        self.core = NodeCore(
            NodeId("a"), JOB, self.view, SLOT_BITS, CallbackLinks(self._reply), output
        )
        ring = Ring(self.view, SLOT_BITS)
        self.own_keys = [
            k for k in (f"k{i}" for i in range(500)) if ring.primary(slot_of(k, SLOT_BITS)) == "a"
        ]
        self.other_keys = [
            k for k in (f"k{i}" for i in range(500)) if ring.primary(slot_of(k, SLOT_BITS)) == "b"
        ]
        self.seqs: dict[int, int] = {}

    def _reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        self.replies.append((identity, decode(frames)))
        return True

    def replies_to(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        """Keep an answer of the node's (links for another core of this harness)."""
        return self._reply(identity, frames)

    def batch_frames(
        self,
        chan: int,
        pairs: list[tuple[str, Any]],
        base: int = 1,
        mapper: str = "m",
        seqs: list[int] | None = None,
        stream: str | None = None,
    ) -> list[bytes]:
        slots = [slot_of(k, SLOT_BITS) for k, _ in pairs]
        if seqs is None:
            seqs = []
            for slot in slots:
                self.seqs[slot] = self.seqs.get(slot, 0) + 1
                seqs.append(self.seqs[slot])
        body = encode_batch_body(
            slots, seqs, [k for k, _ in pairs], [v for _, v in pairs], [0.0] * len(pairs)
        )
        return encode(
            Batch(
                StreamId(stream or f"stream-of-{mapper}"),
                MapperId(mapper),
                ChannelNumber(chan),
                ChannelNumber(base),
                Epoch(1),
                self.core.replicas_wire,
                len(pairs),
                body,
            )
        )

    def deliver(self, frames: list[bytes]) -> list[Message]:
        self.replies.clear()
        self.core.on_frames(PEER, frames)
        self.core.ingest.apply_inbox()
        self.core.ingest.send_acks()
        return [m for _, m in self.replies]

    def state(self, key: str) -> dict[str, Any] | None:
        return self.core.store.get(slot_of(key, SLOT_BITS), key)


@pytest.fixture
def node(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_accepted_batch_is_applied_then_acked_cumulatively(node: Harness) -> None:
    k = node.own_keys[0]
    (reply,) = node.deliver(node.batch_frames(1, [(k, 1), (k, 2)]))
    assert isinstance(reply, Ack) and reply.through == 1
    assert node.state(k) == {"count": 3}
    assert node.core.counters.tuples_applied == 2


def test_resent_batch_is_acked_again_and_applied_once(node: Harness) -> None:
    k = node.own_keys[0]
    frames = node.batch_frames(1, [(k, 5)])
    node.deliver(frames)
    (reply,) = node.deliver(frames)
    assert isinstance(reply, Ack) and reply.through == 1
    assert node.state(k) == {"count": 5}


def test_same_tuples_on_a_new_channel_number_are_dropped_by_hwm(node: Harness) -> None:
    k = node.own_keys[0]
    node.deliver(node.batch_frames(1, [(k, 5)], seqs=[1]))
    (reply,) = node.deliver(node.batch_frames(2, [(k, 5)], seqs=[1]))
    assert isinstance(reply, Ack) and reply.through == 2
    assert node.state(k) == {"count": 5}
    assert node.core.counters.tuples_duplicate == 1


def test_a_retried_mapper_on_a_new_stream_starts_a_fresh_channel_and_dedups(
    node: Harness,
) -> None:
    # A retried task: the same mapper id and seqs, from a new emitter (a new stream) whose
    # batch numbers start at 1 again while the first stream's channel is at 3.
    k = node.own_keys[0]
    j = next(x for x in node.own_keys if slot_of(x, SLOT_BITS) != slot_of(k, SLOT_BITS))
    node.deliver(node.batch_frames(1, [(k, 1)], seqs=[1], stream="first"))
    node.deliver(node.batch_frames(2, [(k, 1)], seqs=[2], stream="first"))
    (reply,) = node.deliver(node.batch_frames(1, [(k, 1), (j, 1)], seqs=[1, 1], stream="retry"))
    assert isinstance(reply, Ack) and reply.through == 1
    assert isinstance(reply, Ack) and reply.stream == "retry"
    (reply,) = node.deliver(node.batch_frames(2, [(k, 1), (k, 1)], seqs=[2, 3], stream="retry"))
    assert isinstance(reply, Ack) and reply.through == 2
    # k: seqs 1, 2 applied once each, then 3; j: seq 1 (new slot stream) applied.
    assert node.state(k) == {"count": 3}
    assert node.state(j) == {"count": 1}
    assert node.core.counters.tuples_duplicate == 2


def test_gap_is_answered_with_resend_from_the_expected_batch(node: Harness) -> None:
    k = node.own_keys[0]
    node.deliver(node.batch_frames(1, [(k, 1)]))
    (reply,) = node.deliver(node.batch_frames(3, [(k, 1)]))
    assert isinstance(reply, Nack) and reply.expect == 2
    assert node.state(k) == {"count": 1}


def test_base_past_the_expected_number_rebases_the_channel(node: Harness) -> None:
    k = node.own_keys[0]
    (reply,) = node.deliver(node.batch_frames(40, [(k, 1)], base=40))
    assert isinstance(reply, Ack) and reply.through == 40


def test_batch_with_a_foreign_slot_is_refused_whole_with_the_view(node: Harness) -> None:
    mine, theirs = node.own_keys[0], node.other_keys[0]
    (reply,) = node.deliver(node.batch_frames(1, [(mine, 1), (theirs, 1)]))
    assert isinstance(reply, NotOwner) and reply.chan == 1
    assert View.from_wire(unpack_body(reply.body)) == node.view
    assert node.state(mine) is None
    # The channel did not advance: batch 1 is still the expected one.
    (reply,) = node.deliver(node.batch_frames(1, [(mine, 1)]))
    assert isinstance(reply, Ack) and node.state(mine) == {"count": 1}


def test_reducer_that_raises_leaves_no_trace_and_is_counted(node: Harness) -> None:
    k = node.own_keys[0]
    (reply,) = node.deliver(node.batch_frames(1, [(k, 1), (k, "boom"), (k, 2)]))
    assert isinstance(reply, Ack)
    assert node.state(k) == {"count": 3}
    assert node.core.counters.tuples_failed == 1
    node.core.tick()
    lines = node.output_path.read_text().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert (record["node"], record["key"], record["value"]) == ("a", k, "reached 3")
    # Named by the tuple that emitted it: the third of mapper m's batch, its first emit.
    mapper, _slot, seq, index = record["origin"]
    assert (mapper, seq, index) == ("m", 3, 0)
    assert len(node.published) == 1


def test_malformed_batch_body_is_answered_with_error_and_not_accepted(node: Harness) -> None:
    frames = node.batch_frames(1, [(node.own_keys[0], 1)])
    frames[0] = frames[0][:-3]
    (reply,) = node.deliver(frames)
    assert isinstance(reply, Error)
    assert node.core.counters.bad_frames == 1
    assert node.core.store.key_count() == 0


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=40), min_size=0, max_size=4))
def test_random_frames_never_raise_or_change_state(
    tmp_path_factory: Any, frames: list[bytes]
) -> None:
    harness = Harness(tmp_path_factory.mktemp("n"))
    harness.core.on_frames(PEER, frames)
    harness.core.ingest.apply_inbox()
    assert harness.core.store.key_count() == 0


def test_a_flood_of_bad_frames_cannot_hold_a_turn_open(node: Harness) -> None:
    # A batch waits behind more junk than one turn reads: the turn ends after
    # MESSAGES_PER_TURN_MAX messages, applies and acks what it has, and the next turns
    # reach the batch, though no junk ever fills the inbox.
    k = node.own_keys[0]
    waiting = [(PEER, [b"junk"])] * (MESSAGES_PER_TURN_MAX + 10)
    waiting.insert(MESSAGES_PER_TURN_MAX // 2, (PEER, node.batch_frames(1, [(k, 1)])))
    waiting += [(PEER, [b"junk"])] * (3 * MESSAGES_PER_TURN_MAX)

    def receive() -> tuple[bytes, list[bytes]] | None:
        return waiting.pop(0) if waiting else None

    node.core.receive_turn(receive)
    assert node.core.counters.bad_frames == MESSAGES_PER_TURN_MAX - 1
    assert node.state(k) == {"count": 1}
    assert any(isinstance(m, Ack) for _, m in node.replies)
    turns = 1
    while waiting:
        node.core.receive_turn(receive)
        turns += 1
    assert turns == 5
    assert node.core.counters.bad_frames == 4 * MESSAGES_PER_TURN_MAX + 10


def test_dump_pages_cover_every_owned_key_once_and_stop_at_a_slot_not_owned(
    node: Harness,
) -> None:
    pairs = [(k, 1) for k in node.own_keys]
    node.deliver(node.batch_frames(1, pairs))
    slot_count = 1 << SLOT_BITS
    seen: list[str] = []
    start = 0
    while start < slot_count:
        node.replies.clear()
        request = DumpRequest(RequestId(1), Slot(start), Slot(slot_count), 7)
        node.core.on_frames(PEER, encode(request))
        ((_, reply),) = node.replies
        assert isinstance(reply, DumpReply)
        entries = unpack_body(reply.body)
        end = slot_count if reply.next_start is None else reply.next_start
        # Every slot served lies in [start, end), and the node is primary of each.
        assert all(start <= slot < end for slot, _key, _state in entries)
        assert all(node.core.roles[s] == Role.PRIMARY for s in range(start, end))
        if reply.next_start == start:
            assert entries == () and node.core.roles[start] != Role.PRIMARY
            end = start + 1
        seen.extend(key for _slot, key, _state in entries)
        start = end
    assert sorted(seen) == sorted(node.own_keys)


def test_lost_slots_are_never_read_as_empty_but_named(node: Harness) -> None:
    pairs = [(k, 1) for k in node.own_keys]
    node.deliver(node.batch_frames(1, pairs))
    lost_key, kept_key = node.own_keys[0], node.own_keys[1]
    lost_slot = slot_of(lost_key, SLOT_BITS)
    assert slot_of(kept_key, SLOT_BITS) != lost_slot
    node.core.ledger.mark(node.core.store, {lost_slot, Slot(lost_slot + 1)})
    node.replies.clear()
    node.core.on_frames(PEER, encode(QueryRequest(RequestId(1), pack_body([lost_key, kept_key]))))
    ((_, reply),) = node.replies
    assert isinstance(reply, QueryReply)
    lost_answer, kept_answer = unpack_body(reply.body)
    assert lost_answer == {"owner": True, "slot": lost_slot, "state": None, "lost": True}
    assert kept_answer["state"] == {"count": 1} and not kept_answer["lost"]
    # A dump page stops at the lost slot and names the run of lost slots there.
    node.replies.clear()
    node.core.on_frames(PEER, encode(DumpRequest(RequestId(2), Slot(0), Slot(128), 10_000)))
    ((_, reply),) = node.replies
    assert isinstance(reply, DumpReply)
    assert reply.next_start == lost_slot and reply.lost_until == lost_slot + 2
    assert all(slot < lost_slot for slot, _key, _state in unpack_body(reply.body))


def test_a_restored_store_brings_its_losses_into_the_ledger(tmp_path: Path) -> None:
    store = StateStore()
    mark_lost(store, {Slot(5), Slot(6)})
    view = Harness(tmp_path).view
    output = OutputSink("a", tmp_path / "restored.jsonl", lambda frames: None)
    core = NodeCore(
        NodeId("a"), JOB, view, SLOT_BITS, CallbackLinks(lambda i, f: True), output, store=store
    )
    assert core.ledger.slots == {Slot(5), Slot(6)}
    assert core.control.status()["offline_slots"] == 2


def test_checkpoint_keeps_state_readable(node: Harness) -> None:
    k = node.own_keys[0]
    node.deliver(node.batch_frames(1, [(k, 1)]))
    node.core.checkpoints.checkpoint()
    node.deliver(node.batch_frames(2, [(k, 1)]))
    node.core.checkpoints.checkpoint()
    assert node.state(k) == {"count": 2}
    assert node.core.store.active == {} or all(not v for v in node.core.store.active.values())


def _history(node: Harness, mapper: str) -> HistoryReply:
    node.replies.clear()
    node.core.on_frames(PEER, encode(HistoryRequest(RequestId(9), MapperId(mapper))))
    ((_, reply),) = node.replies
    assert isinstance(reply, HistoryReply)
    return reply


def test_history_tells_what_a_mapper_delivered_in_the_slots_the_node_is_primary_of(
    node: Harness,
) -> None:
    assert _history(node, "m") == HistoryReply(
        RequestId(9), Slot(0), 128, slots=0, seq_max=0, last=None, lost=0
    )
    pairs = [(k, 1) for k in node.own_keys[:40]]
    node.deliver(node.batch_frames(1, pairs, mapper="m", seqs=list(range(1, 41))))
    slots = {slot_of(k, SLOT_BITS) for k, _ in pairs}
    # The hwms of slots this node is not primary of (a copy it holds) are not its to tell.
    node.core.store.raise_hwm(MapperId("m"), Slot(200), 500)
    assert _history(node, "m") == HistoryReply(
        RequestId(9), Slot(0), 128, slots=len(slots), seq_max=40, last=None, lost=0
    )
    node.core.retirement.on_done(MapperId("m"), 40)
    node.core.ledger.mark(node.core.store, {Slot(3), Slot(130)})
    assert _history(node, "m").last == 40
    assert _history(node, "m").lost == 1
    assert _history(node, "other").slots == 0
