"""Finished mappers on one node, driven in-process (``smr.node.retirement``): the notice is
answered, the lease holds the hwms, intake acks a finished mapper's resends and refuses a seq
past its last, and the retirement leaves one entry where there were one per slot."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.checkpoint.ids import MapperId, Seq
from smr.node import NodeCore
from smr.node.settings import NodeSettings
from smr.output.files import OutputSink
from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId
from smr.wire.codec import encode
from smr.wire.kinds import RequestId
from smr.wire.messages import Ack, Error, MapperDone, Pong
from tests.smr.links import CallbackLinks
from tests.smr.test_node_core import JOB, SLOT_BITS, Harness

LEASE_S = 10.0


class RetiringNode(Harness):
    """The harness's node a, with a clock the test moves and a lease of ``LEASE_S``."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.now = 100.0
        output = OutputSink("a", tmp_path / "a2.jsonl", self.published.append)
        self.core = NodeCore(
            NodeId("a"),
            JOB,
            self.view,
            SLOT_BITS,
            CallbackLinks(self._reply),
            output,
            clock=lambda: self.now,
            settings=NodeSettings(mapper_lease_ms=round(LEASE_S * 1000)),
        )

    def done(self, mapper: str, last: int) -> list[object]:
        self.replies.clear()
        self.core.on_frames(b"mapper", encode(MapperDone(RequestId(7), MapperId(mapper), last)))
        return [message for _, message in self.replies]

    def tick_at(self, now: float) -> None:
        self.now = now
        self.core.retirement.tick(now)


@pytest.fixture
def node(tmp_path: Path) -> RetiringNode:
    return RetiringNode(tmp_path)


def test_a_finished_mapper_keeps_its_hwms_for_the_lease_then_leaves_one_entry(
    node: RetiringNode,
) -> None:
    keys = node.own_keys[:5]
    (ack,) = node.deliver(node.batch_frames(1, [(k, 1) for k in keys], mapper="m"))
    assert isinstance(ack, Ack)
    entries = node.core.store.hwm_entries()
    assert entries == len({slot_of(k, SLOT_BITS) for k in keys})
    (pong,) = node.done("m", 1)
    assert isinstance(pong, Pong) and pong.req == 7
    assert node.core.retirement.pending == 1
    node.tick_at(node.now + LEASE_S - 1)
    assert node.core.store.hwm_entries() == entries
    node.tick_at(node.now + 2)
    assert node.core.store.hwm_entries() == 0
    assert dict(node.core.store.retired) == {"m": 1}
    assert node.core.retirement.pending == 0
    assert node.core.status()["retired_hwms_dropped"] == entries
    assert all(node.state(k) == {"count": 1} for k in keys)


@pytest.mark.parametrize("retired", [False, True], ids=["lease running", "retired"])
def test_intake_acks_a_finished_mappers_resend_and_refuses_a_seq_past_its_last(
    node: RetiringNode, retired: bool
) -> None:
    key = node.own_keys[0]
    frames = node.batch_frames(1, [(key, 1), (key, 1)], mapper="m", seqs=[1, 2])
    node.deliver(frames)
    node.done("m", 2)
    if retired:
        node.tick_at(node.now + LEASE_S + 1)
    # The same batch again, on a new stream (a rerun): acked, not applied.
    again = node.batch_frames(1, [(key, 1), (key, 1)], mapper="m", seqs=[1, 2], stream="rerun")
    (ack,) = node.deliver(again)
    assert isinstance(ack, Ack) and ack.through == 1
    assert node.state(key) == {"count": 2}
    assert node.core.retirement.batches_answered == 1
    # One seq past the last: refused aloud, nothing applied, the channel does not move.
    more = node.batch_frames(2, [(key, 1), (key, 5)], mapper="m", seqs=[2, 3], stream="rerun")
    (error,) = node.deliver(more)
    assert isinstance(error, Error) and "finished at seq 2" in error.message
    assert node.state(key) == {"count": 2}
    assert node.core.status()["batches_refused_finished"] == 1


def test_a_repeated_notice_keeps_the_first_lease_and_a_negative_seq_is_a_bad_frame(
    node: RetiringNode,
) -> None:
    node.deliver(node.batch_frames(1, [(node.own_keys[0], 1)], mapper="m", seqs=[1]))
    node.done("m", 5)
    node.now += LEASE_S / 2
    node.done("m", 9)
    node.tick_at(node.now + LEASE_S / 2 + 0.1)
    assert dict(node.core.store.retired) == {"m": 9}
    assert node.done("n", -1) == []
    assert node.core.counters.bad_frames == 1
    assert node.core.retirement.last_of(MapperId("n")) is None
    assert node.core.retirement.last_of(MapperId("m")) == Seq(9)


def test_a_mapper_that_never_wrote_here_leaves_no_entry(node: RetiringNode) -> None:
    node.done("elsewhere", 40)
    assert node.core.retirement.last_of(MapperId("elsewhere")) == Seq(40)
    node.tick_at(node.now + LEASE_S + 1)
    assert dict(node.core.store.retired) == {}
    assert node.core.retirement.pending == 0


def test_no_retirement_while_a_move_is_under_way(
    node: RetiringNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = node.own_keys[0]
    node.deliver(node.batch_frames(1, [(key, 1)], mapper="m", seqs=[1]))
    node.done("m", 1)
    monkeypatch.setattr(type(node.core.moves), "busy", property(lambda self: True))
    node.tick_at(node.now + LEASE_S + 1)
    assert node.core.store.hwm_entries() == 1
    monkeypatch.undo()
    node.tick_at(node.now + 2)
    assert node.core.store.hwm_entries() == 0


def test_the_output_of_a_finished_mappers_tuples_is_in_the_file_before_the_answer(
    node: RetiringNode, tmp_path: Path
) -> None:
    # A feed exits once every node answered its notice: the records its tuples emitted must
    # be in the node's file by then, not a tick later.
    key = node.own_keys[0]
    (ack,) = node.deliver(node.batch_frames(1, [(key, 1)] * 3, mapper="m"))
    assert isinstance(ack, Ack)
    path = tmp_path / "a2.jsonl"
    assert "reached 3" not in path.read_text()
    (pong,) = node.done("m", 3)
    assert isinstance(pong, Pong)
    assert "reached 3" in path.read_text()
