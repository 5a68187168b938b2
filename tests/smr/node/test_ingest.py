"""What the intake offers the other roles (``smr.node.ingest``): its backlog, its position,
whether a batch of some slots waits; and its admission asking the moves and the retirement
(``Moves.admission``, ``Retirement.admit``) rather than reading their state."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from smr import agg
from smr.api import Job
from smr.checkpoint.ids import MapperId, Seq
from smr.checkpoint.kernels import IN_FORCE
from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.ingest import Ingest
from smr.node.load import LoadMeter
from smr.node.ports import Verdict
from smr.node.reducer import Reducer
from smr.node.settings import NodeCounters, NodeSettings
from smr.output.files import OutputSink
from smr.ring.hashing import slot_of
from smr.ring.ids import Slot
from smr.ring.placement import SlotRange
from smr.wire.batch_body import BatchColumns, EncodedBatch
from smr.wire.codec import decode
from smr.wire.kinds import StreamId
from smr.wire.messages import Ack, Batch, Error, NotOwner
from tests.smr.node.fakes import FakePeers, two_node_seat
from tests.smr.node.test_core import JOB, SLOT_BITS, Harness


@pytest.fixture
def node(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_backlog_position_and_queued_for_follow_the_inbox(node: Harness) -> None:
    ingest = node.core.ingest
    keys = node.own_keys[:4]
    slots = frozenset(Slot(slot_of(k, SLOT_BITS)) for k in keys)
    assert ingest.position() == (0, 0) and not ingest.queued_for(slots)
    node.core.on_frames(b"p", node.batch_frames(1, [(k, 1) for k in keys]))
    assert ingest.position() == (1, 0)
    assert ingest.backlog().tuples == 4
    assert ingest.queued_for(slots) and not ingest.queued_for(frozenset({Slot(255)}) - slots)
    ingest.apply_inbox()
    assert ingest.position() == (1, 1) and ingest.backlog().tuples == 0
    assert not ingest.queued_for(slots)
    assert ingest.report()["inbox_peak"] == 1 and ingest.report()["inbox_tuples_peak"] == 4


def test_a_batch_of_a_frozen_slot_is_refused_with_the_frozen_range(node: Harness) -> None:
    key = node.own_keys[0]
    slot = slot_of(key, SLOT_BITS)
    frozen = SlotRange(slot, 1, 1 << SLOT_BITS)
    node.core.moves.freeze(frozen)
    (refusal,) = node.deliver(node.batch_frames(1, [(key, 1)]))
    assert isinstance(refusal, NotOwner)
    assert (refusal.frozen_start, refusal.frozen_length) == (slot, 1)
    assert node.core.counters.batches_refused_moving == 1
    assert node.core.moves.admission(b"p", refusal.stream, [Slot(slot)]) == (slot, 1)
    node.core.moves.freeze(None)
    assert node.core.moves.admission(b"p", refusal.stream, [Slot(slot)]) is None
    (ack,) = node.deliver(node.batch_frames(1, [(key, 1)], seqs=[1]))
    assert isinstance(ack, Ack)


def test_a_finished_mappers_batch_is_answered_by_the_retirements_verdict(node: Harness) -> None:
    keys = node.own_keys[:2]
    node.core.retirement.on_done(MapperId("m"), Seq(2))
    (ack,) = node.deliver(node.batch_frames(1, [(k, 1) for k in keys], seqs=[1, 2]))
    assert isinstance(ack, Ack) and node.core.counters.tuples_duplicate == 2
    assert all(node.state(k) is None for k in keys)
    (error,) = node.deliver(node.batch_frames(2, [(keys[0], 1)], seqs=[3]))
    assert isinstance(error, Error) and "finished at seq 2" in error.message
    report = node.core.retirement.report()
    assert report["batches_of_finished_mappers"] == 1 and report["batches_refused_finished"] == 1


class Admissions:
    """The moves, the retirement and the replication as intake asks them: a frozen range,
    a verdict, and the batches backed up, set by the test."""

    def __init__(self) -> None:
        self.frozen: tuple[int, int] | None = None
        self.verdict: Verdict | None = None
        self.backed_up: list[MapperId] = []

    def admission(
        self, identity: bytes, stream: StreamId, slots: Collection[int]
    ) -> tuple[int, int] | None:
        return self.frozen

    def admit(self, mapper: MapperId, seqs: Sequence[int]) -> Verdict | None:
        return self.verdict

    def back_up(
        self, mapper: MapperId, body: bytes, tuple_count: int, last_seq_by_slot: dict[int, int]
    ) -> bool:
        self.backed_up.append(mapper)
        return True


class Alone:
    """An intake alone, with stand-ins for the rest of the node (r = 0: node a is primary
    of its range and nothing else)."""

    def __init__(self, tmp_path: Path, job: Job = JOB) -> None:
        self.peers = FakePeers()
        self.asked = Admissions()
        self.store = StateStore()
        self.ingest = Ingest(
            lambda: two_node_seat("a"),
            self.peers,
            time.monotonic,
            NodeSettings(),
            NodeCounters(),
            lambda: self.store,
            LossLedger(),
            Reducer(
                job, OutputSink("a", tmp_path / "a.jsonl", lambda frames: None), time.monotonic
            ),
            LoadMeter(time.monotonic),
            OutputSink("a", tmp_path / "b.jsonl", lambda frames: None),
            moves=self.asked,
            retirement=self.asked,
            replication=self.asked,
        )
        self.harness = Harness(tmp_path)  # for its batches (node a's keys, its encoding)

    def deliver(
        self, chan: int, keys: list[str], seqs: list[int], values: list[Any] | None = None
    ) -> list[object]:
        self.receive(chan, keys, seqs, values)
        self.ingest.apply_inbox()
        self.ingest.send_acks()
        return [reply for _, reply in self.peers.replies]

    def receive(
        self, chan: int, keys: list[str], seqs: list[int], values: list[Any] | None = None
    ) -> None:
        self.peers.replies.clear()
        pairs = list(zip(keys, values or [1] * len(keys), strict=True))
        frames = self.harness.batch_frames(chan, pairs, seqs=seqs)
        message = decode(frames)
        assert isinstance(message, Batch)
        self.ingest.receive(b"p", message)


def test_intake_alone_applies_and_acks_or_refuses_as_the_admissions_say(tmp_path: Path) -> None:
    alone = Alone(tmp_path)
    key = alone.harness.own_keys[0]
    slot = slot_of(key, SLOT_BITS)
    (ack,) = alone.deliver(1, [key], [1])
    assert isinstance(ack, Ack) and ack.through == 1
    assert alone.store.get(Slot(slot), key) == {"count": 1}
    alone.asked.frozen = (slot, 1)
    (refusal,) = alone.deliver(2, [key], [2])
    assert isinstance(refusal, NotOwner) and (refusal.frozen_start, refusal.frozen_length) == (
        slot,
        1,
    )
    alone.asked.frozen = None
    alone.asked.verdict = Verdict("finished before")
    (error,) = alone.deliver(2, [key], [2])
    assert isinstance(error, Error) and error.message == "finished before"
    alone.asked.verdict = Verdict()
    (repeat,) = alone.deliver(2, [key], [2])
    assert isinstance(repeat, Ack) and repeat.through == 2
    assert alone.store.get(Slot(slot), key) == {"count": 1}
    alone.asked.verdict = None
    (not_mine,) = alone.deliver(3, [alone.harness.other_keys[0]], [1])
    assert isinstance(not_mine, NotOwner) and not_mine.frozen_length == 0
    assert alone.asked.backed_up == []


@pytest.mark.skipif(IN_FORCE.fold_turn_bodies is None, reason="smr._native is not in force")
def test_a_counts_batches_wait_in_their_bytes_and_fold_as_decoded_ones_do(tmp_path: Path) -> None:
    """A lone count's batch waits in the inbox in its wire bytes and is folded from them; a
    body the compiled fold does not read whole (a float value) waits decoded; duplicates
    are cut across both; a malformed body is refused at intake as before."""
    alone = Alone(tmp_path, Job("fast", map=lambda record, emit: None, reduce=agg.count()))
    first, second = alone.harness.own_keys[:2]
    alone.receive(1, [first, first, second], [1, 2, 1], [1, 2**40, -3])
    (waiting,) = alone.ingest.inbox
    assert isinstance(waiting.batch, EncodedBatch) and len(waiting.batch) == 3
    alone.receive(2, [first, second], [2, 2], [5, 0.5])
    assert isinstance(alone.ingest.inbox[-1].batch, BatchColumns)
    alone.ingest.apply_inbox()
    assert alone.store.get(Slot(slot_of(first, SLOT_BITS)), first) == {"count": 1 + 2**40}
    assert alone.store.get(Slot(slot_of(second, SLOT_BITS)), second) == {"count": -2.5}
    alone.receive(3, [first], [3], [1])
    alone.ingest.apply_inbox()
    assert alone.store.get(Slot(slot_of(first, SLOT_BITS)), first) == {"count": 2 + 2**40}
    frames = alone.harness.batch_frames(4, [(first, 1)], seqs=[4])
    broken = decode(frames)
    assert isinstance(broken, Batch)
    alone.ingest.receive(b"p", replace(broken, body=broken.body[:-1]))
    ((_, error),) = alone.peers.replies
    assert isinstance(error, Error) and "malformed batch body" in error.message
