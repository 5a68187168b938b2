"""The retirement of finished mappers alone (``smr.node.retirement``), through what it
receives: the seat, the peers, the clock, the lease, the store and the moves' ``busy``. The
node-level behaviour (intake answering a finished mapper) is in test_node_retirement."""

from __future__ import annotations

import pytest

from smr.checkpoint.ids import MapperId, Seq
from smr.checkpoint.store import StateStore
from smr.node.retirement import Retirement
from smr.node.settings import NodeSettings
from smr.wire.kinds import RequestId
from smr.wire.messages import MapperDone, Pong
from tests.smr.node.fakes import FakeMoves, FakePeers, two_node_seat

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
