"""The retirement of finished mappers (``smr.node.retirement``): alone, through what it
receives (the seat, the peers, the clock, the lease, the store and the moves' ``busy``);
then on one node driven in process: the notice is answered, the lease holds the hwms, intake
acks a finished mapper's resends and refuses a seq past its last, and the retirement leaves
one entry where there were one per slot."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.checkpoint.ids import MapperId, Seq
from smr.checkpoint.store import StateStore
from smr.node.core import NodeCore
from smr.node.retirement import Retirement
from smr.node.settings import NodeSettings
from smr.output.files import OutputSink
from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId
from smr.wire.codec import encode
from smr.wire.kinds import RequestId
from smr.wire.messages import Ack, Error, MapperDone, Pong
from tests.smr.links import CallbackLinks
from tests.smr.node.fakes import FakeMoves, FakePeers, two_node_seat
from tests.smr.node.test_core import JOB, SLOT_BITS, Harness

LEASE_S = 10.0


class Parts:
    """A retirement with its parts at hand: the clock is ``now``."""

    def __init__(self) -> None:
        self.now = 100.0
        self.peers = FakePeers()
        self.moves = FakeMoves()
        self.store = StateStore()
        seat = two_node_seat()
        self.retirement = Retirement(
            lambda: seat,
            self.peers,
            lambda: self.now,
            NodeSettings(mapper_lease_ms=round(LEASE_S * 1000)),
            lambda: self.store,
            self.moves,
        )

    def write(self, mapper: str, slots: list[int], seq: int = 1) -> None:
        """``mapper`` wrote a tuple at ``seq`` to each of ``slots``."""
        self.store.apply_batch(
            MapperId(mapper),
            slots,
            [seq] * len(slots),
            [f"k{slot}" for slot in slots],
            [1] * len(slots),
            lambda key, value, state: state.update(n=value),
        )


@pytest.fixture
def parts() -> Parts:
    return Parts()


def test_a_notice_is_answered_with_pong_by_this_node(parts: Parts) -> None:
    parts.retirement.on_mapper_done(b"m", MapperDone(RequestId(7), MapperId("m"), 4))
    ((identity, pong),) = parts.peers.replies
    assert identity == b"m" and isinstance(pong, Pong) and pong.req == 7 and pong.node == "a"
    assert parts.retirement.last_of(MapperId("m")) == 4


def test_a_negative_last_seq_is_a_bad_frame_and_starts_no_lease(parts: Parts) -> None:
    parts.retirement.on_mapper_done(b"m", MapperDone(RequestId(7), MapperId("m"), -1))
    assert parts.peers.replies == [] and len(parts.peers.bad_frames) == 1
    assert parts.retirement.pending == 0


def test_the_lease_runs_from_the_clock_then_the_store_keeps_one_entry(parts: Parts) -> None:
    parts.write("m", [1, 2, 3])
    parts.retirement.on_done(MapperId("m"), Seq(1))
    parts.retirement.tick(parts.now + LEASE_S - 0.5)
    assert parts.store.hwm_entries() == 3 and parts.retirement.pending == 1
    parts.retirement.tick(parts.now + LEASE_S + 1)
    assert parts.store.hwm_entries() == 0 and dict(parts.store.retired) == {"m": 1}
    report = parts.retirement.report()
    assert report["mappers_retired_total"] == 1 and report["retired_hwms_dropped"] == 3
    assert report["mappers_retired"] == 1 and report["mappers_finishing"] == 0


def test_nothing_is_retired_while_the_moves_are_busy(parts: Parts) -> None:
    parts.write("m", [1, 2])
    parts.retirement.on_done(MapperId("m"), Seq(1))
    parts.moves.busy = True
    parts.retirement.tick(parts.now + LEASE_S * 3)
    assert parts.store.hwm_entries() == 2 and parts.retirement.pending == 1
    parts.moves.busy = False
    parts.retirement.tick(parts.now + LEASE_S * 3)
    assert parts.store.hwm_entries() == 0


def test_the_store_is_asked_afresh_each_time(parts: Parts) -> None:
    """A fenced node replaces its store; the retirement follows the one the core holds."""
    parts.write("m", [1])
    parts.retirement.on_done(MapperId("m"), Seq(1))
    parts.retirement.tick(parts.now + LEASE_S + 1)
    assert parts.retirement.last_of(MapperId("m")) == 1
    parts.store = StateStore()
    assert parts.retirement.last_of(MapperId("m")) is None


def test_admit_answers_repeats_refuses_a_seq_past_the_last_and_counts_both(parts: Parts) -> None:
    retirement = parts.retirement
    assert retirement.admit(MapperId("m"), [1, 2]) is None  # still running
    retirement.on_done(MapperId("m"), Seq(5))
    assert retirement.admit(MapperId("m"), []) is None
    repeat = retirement.admit(MapperId("m"), [3, 5])
    assert repeat is not None and repeat.refusal is None
    refused = retirement.admit(MapperId("m"), [5, 6])
    assert refused is not None and refused.refusal is not None
    assert "finished at seq 5" in refused.refusal and "seq 6" in refused.refusal
    report = retirement.report()
    assert report["batches_of_finished_mappers"] == 1 and report["batches_refused_finished"] == 1


def test_notices_past_the_bound_are_ignored_and_counted(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("smr.node.retirement.PENDING_MAPPERS_MAX", 2)
    for name in ("m1", "m2", "m3"):
        parts.retirement.on_done(MapperId(name), Seq(1))
    assert parts.retirement.pending == 2
    assert parts.retirement.report()["mapper_notices_ignored"] == 1


# -- on a whole node (in process) --


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
