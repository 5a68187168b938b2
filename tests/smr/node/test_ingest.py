"""What the intake offers the other roles (``smr.node.ingest``): its backlog, its position,
whether a batch of some slots waits; and its admission asking the moves and the retirement
(``Moves.admission``, ``Retirement.admit``) rather than reading their state."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.checkpoint.ids import MapperId, Seq
from smr.protocol import Ack, Error, NotOwner
from smr.ring.hashing import slot_of
from smr.ring.ids import Slot
from smr.ring.placement import SlotRange
from tests.smr.test_node_core import SLOT_BITS, Harness


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
