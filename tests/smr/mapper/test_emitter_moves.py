"""The emitter during a move: a node that refuses a batch because some of its slots are being
handed over names them; the emitter holds back only those slots' tuples and sends the rest
again at once, so the slots that do not move never wait for the move. The held tuples go out,
in seq order per slot, when the move ends (a new view, a NACK) or a resend interval passes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from smr.checkpoint.ids import MapperId
from smr.mapper.channels import DeliveryError
from smr.mapper.emitter import Emitter
from smr.ring.hashing import even_tokens, slot_of
from smr.ring.ids import NodeId, Slot
from smr.ring.moves import moved_view, plan_move
from smr.ring.placement import Ring
from smr.ring.view import Member, Status, View
from smr.wire.batch_body import decode_batch_body
from smr.wire.codec import encode, pack_body
from smr.wire.kinds import RequestId
from smr.wire.messages import Ack, Batch, Nack, NotOwner, ViewReply
from tests.smr.links import RecordingTransport

SLOT_BITS = 8
SLOTS = 1 << SLOT_BITS


class Setup:
    """Three nodes on even tokens, r = 1; n0 moves the top quarter of the ring's first third
    (its range's top) to n1."""

    def __init__(self) -> None:
        self.view = View(
            Member(NodeId(f"n{i}"), 1, f"sim://n{i}", token, "", Status.UP, 1)
            for i, token in enumerate(even_tokens(3, SLOT_BITS))
        )
        ring = Ring(self.view, SLOT_BITS)
        self.plan = plan_move(ring, NodeId("n0"), 1, Slot(40))
        self.moving = self.plan.moving
        self.now = [0.0]
        self.clock: Callable[[], float] = lambda: self.now[0]
        self.transport = RecordingTransport()
        self.emitter = Emitter(
            self.view,
            SLOT_BITS,
            MapperId("m"),
            replication=1,
            batch_size=1_000_000,
            clock=lambda: self.clock(),
            transport=self.transport,
        )
        words = [f"w{i}" for i in range(2000)]
        self.moving_words = [w for w in words if self.moving.contains(slot_of(w, SLOT_BITS))][:5]
        self.kept_words = [
            w
            for w in words
            if ring.primary(slot_of(w, SLOT_BITS)) == "n0"
            and not self.moving.contains(slot_of(w, SLOT_BITS))
        ][:5]

    def batches_to(self, node: str) -> list[Batch]:
        return [m for m in self.transport.ends[f"sim://{node}"].sent if isinstance(m, Batch)]

    def rows(self, batch: Batch) -> list[tuple[int, int]]:
        columns = decode_batch_body(batch.body, batch.n, SLOTS)
        return list(zip(columns.slots, columns.seqs, strict=True))

    def refuse(self, batch: Batch) -> None:
        """n0 refuses ``batch``: it holds a slot n0 is handing over."""
        refusal = NotOwner(
            self.emitter.stream_id,
            batch.chan,
            self.view.epoch,
            self.moving.start,
            self.moving.length,
            pack_body(self.view.to_wire()),
        )
        self.emitter._on_reply(self.emitter._channels.get(NodeId("n0")), encode(refusal))


def _emit_all(setup: Setup, words: list[str]) -> None:
    for word in words:
        setup.emitter.emit(word, 1)
    setup.emitter.flush()


def _held_after_a_refusal() -> tuple[Setup, Batch]:
    """Tuples of moving slots only, sent and refused: all of them held."""
    setup = Setup()
    _emit_all(setup, setup.moving_words)
    (first,) = setup.batches_to("n0")
    setup.refuse(first)
    assert setup.emitter._router.held_rows == len(setup.moving_words)
    return setup, first


def test_a_refusal_naming_moving_slots_holds_back_only_their_tuples() -> None:
    setup = Setup()
    assert setup.moving_words and setup.kept_words
    _emit_all(setup, setup.moving_words + setup.kept_words)
    (first,) = setup.batches_to("n0")
    setup.refuse(first)
    # The kept slots' tuples went out again at once, in a new batch; the moving ones wait.
    (_, again) = setup.batches_to("n0")
    kept_slots = {slot_of(w, SLOT_BITS) for w in setup.kept_words}
    assert {slot for slot, _ in setup.rows(again)} == kept_slots
    assert setup.emitter._router.held_rows == len(setup.moving_words)
    # New tuples of moving slots are held too; the others flow.
    _emit_all(setup, setup.moving_words + setup.kept_words)
    third = setup.batches_to("n0")[-1]
    assert {slot for slot, _ in setup.rows(third)} == kept_slots
    assert setup.emitter._router.held_rows == 2 * len(setup.moving_words)
    # The move ends: n1 serves the moved slots. The held tuples go to n1, in seq order.
    before = len(setup.batches_to("n1"))
    after_view = moved_view(setup.view, setup.plan)
    setup.emitter._on_reply(
        setup.emitter._channels.get(NodeId("n0")),
        encode(ViewReply(RequestId(0), after_view.epoch, pack_body(after_view.to_wire()))),
    )
    assert setup.emitter._router.held_rows == 0
    released = setup.batches_to("n1")[before:]
    rows = [row for batch in released for row in setup.rows(batch)]
    moving_rows = [row for row in rows if setup.moving.contains(row[0])]
    assert len(moving_rows) == 2 * len(setup.moving_words)
    for slot in {slot for slot, _ in moving_rows}:
        seqs = [seq for s, seq in moving_rows if s == slot]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_a_nack_from_the_moving_node_ends_the_hold() -> None:
    setup, _ = _held_after_a_refusal()
    # The move was called off: n0 NACKs; the held tuples go to n0 again.
    channel = setup.emitter._channels.get(NodeId("n0"))
    setup.emitter._on_reply(channel, encode(Nack(setup.emitter.stream_id, channel.next_chan, True)))
    assert setup.emitter._router.held_rows == 0
    resent = setup.batches_to("n0")[-1]
    assert {slot for slot, _ in setup.rows(resent)} == {
        slot_of(w, SLOT_BITS) for w in setup.moving_words
    }


def test_a_hold_with_no_word_from_the_node_ends_after_a_resend_interval() -> None:
    setup, first = _held_after_a_refusal()
    setup.emitter.pump(0)
    assert setup.emitter._router.held_rows  # not yet
    setup.now[0] += setup.emitter.resend_after_s
    setup.emitter.pump(0)
    assert setup.emitter._router.held_rows == 0
    # Sent again to n0 in a new batch (and resent on the stalled channel with it).
    again = setup.batches_to("n0")[1:]
    assert again and all(batch.chan > first.chan for batch in again)
    assert {slot for slot, _ in setup.rows(again[0])} == {
        slot_of(w, SLOT_BITS) for w in setup.moving_words
    }


def test_held_tuples_keep_drain_waiting() -> None:
    setup, _ = _held_after_a_refusal()
    # Nothing is unacked on any channel but the held tuples: drain must not return.
    n1_channel = setup.emitter._channels.get(NodeId("n1"))
    for chan in list(n1_channel.unacked):
        setup.emitter._on_reply(
            n1_channel, encode(Ack(setup.emitter.stream_id, chan, setup.view.epoch))
        )
    assert setup.emitter.unacked_batches == 0 and setup.emitter._router.held_rows
    ticks = iter(range(1_000_000))
    setup.clock = lambda: next(ticks) / 1000  # a millisecond a reading
    with pytest.raises(DeliveryError, match=f"{len(setup.moving_words)} tuples of moving slots"):
        setup.emitter.drain(timeout_s=0.05)


def test_batches_sent_after_a_refusal_let_the_node_skip_the_hole_the_reroute_left() -> None:
    setup = Setup()
    _emit_all(setup, setup.kept_words)  # batch 1: taken by n0, not acked yet
    _emit_all(setup, setup.moving_words + setup.kept_words)  # batch 2: refused
    first, refused = setup.batches_to("n0")
    setup.refuse(refused)
    again = setup.batches_to("n0")[-1]
    assert again.chan == refused.chan + 1
    # n0 expected batch 2, so it took batch 1: the base skips both, and n0 need not wait
    # for the refused batch (its rows went out again in this one, or are held).
    assert again.base == again.chan
    assert first.chan in setup.emitter._channels.get(NodeId("n0")).unacked


def test_held_tuples_are_bounded_by_a_windows_worth_and_the_feeder_waits() -> None:
    setup = Setup()
    setup.emitter._router._held_rows_max = 3
    ticks = iter(range(1_000_000))
    setup.clock = lambda: next(ticks) / 1000  # a millisecond a reading
    _emit_all(setup, setup.moving_words)
    (first,) = setup.batches_to("n0")
    setup.refuse(first)
    # Five tuples held, over the bound of three: the emitter waited (reading replies) until
    # the hold went stale, then sent them again; never more than the bound stays held.
    assert setup.emitter._router.held_rows <= 3
    again = setup.batches_to("n0")[-1]
    assert again.chan > first.chan
    assert {slot for slot, _ in setup.rows(again)} == {
        slot_of(w, SLOT_BITS) for w in setup.moving_words
    }


class _RefusingOnWait(RecordingTransport):
    """Records what is sent; on the first wait for replies, n0 refuses its first batch (as
    a node does whose window is full while it hands a range over)."""

    def __init__(self, setup: Setup) -> None:
        super().__init__()
        self._setup = setup
        self.refused = False

    def wait_any(self, ends: Sequence[Any], timeout_ms: int) -> list[Any]:
        if not self.refused:
            self.refused = True
            self._setup.refuse(self._setup.batches_to("n0")[0])
        return []


def test_a_refusal_reroutes_every_batch_sent_after_a_rerouted_one_on_any_channel() -> None:
    # n0 is n2's secondary (r = 1). With a window of two batches: R (moving slots of n0),
    # then A (n2's slots) fill n0's window; B (n2's slots again, later seqs) goes on n2's
    # channel and waits for room on n0's. n0 then refuses R: R and A, the batch after it on
    # n0's channel, are re-routed. B sits after A on n2's channel: left there, n2 would
    # apply B's later seqs before A's rows sent again, and its hwm would drop those.
    setup = Setup()
    transport = _RefusingOnWait(setup)
    setup.transport = transport
    setup.emitter = Emitter(
        setup.view,
        SLOT_BITS,
        MapperId("m"),
        replication=1,
        batch_size=1_000_000,
        window_batches=2,
        clock=lambda: setup.now[0],
        transport=transport,
    )
    ring = Ring(setup.view, SLOT_BITS)
    n2_words = [
        w for w in (f"v{i}" for i in range(2000)) if ring.primary(slot_of(w, SLOT_BITS)) == "n2"
    ][:5]
    _emit_all(setup, setup.moving_words)  # R: n0 and n1
    _emit_all(setup, n2_words)  # A: n2 and n0 (n0's window is full now)
    _emit_all(setup, n2_words)  # B: n2, then waits for room on n0: the refusal comes
    assert transport.refused
    emitter = setup.emitter
    for channel in emitter._channels.all():
        node = channel.node
        rows = [row for batch in channel.unacked.values() for row in batch.rows]
        for slot in {row[0] for row in rows}:
            seqs = [row[1] for row in rows if row[0] == slot]
            assert seqs == sorted(seqs), f"{node} would get slot {slot}'s seqs as {seqs}"
    # Nothing lost on the way: every tuple of n2's slots is unacked on n2's channel, once.
    n2_rows = [
        row for batch in emitter._channels.get(NodeId("n2")).unacked.values() for row in batch.rows
    ]
    assert len(n2_rows) == len({row[1] for row in n2_rows}) == 2 * len(n2_words)


class _Scripted(RecordingTransport):
    """Records what is sent; each wait for replies runs the next step of ``script`` (a
    function that hands the emitter replies), or once it ran out, acks every batch sent,
    as healthy nodes do."""

    def __init__(self) -> None:
        super().__init__()
        self.script: list[Callable[[], None]] = []
        self.emitter: Emitter | None = None

    def wait_any(self, ends: Sequence[Any], timeout_ms: int) -> list[Any]:
        if self.script:
            self.script.pop(0)()
        elif self.emitter is not None:
            emitter = self.emitter
            for channel in emitter._channels.all():
                if channel.unacked:
                    through = max(channel.unacked)
                    ack = Ack(emitter.stream_id, through, emitter.view.epoch)
                    emitter._on_reply(channel, encode(ack))
        return []


def test_a_part_of_a_send_after_a_part_re_routed_while_it_waited_goes_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Held rows released in a move's end go out cut in parts of a batch's size. The first
    # part waits for room on n1's channel; meanwhile n0 refuses it (a move again): it is
    # re-routed and its rows left open (as a re-route deep in nested waits leaves them),
    # then that move ends too. The second part holds later seqs of the same slot: sent
    # then, it would reach n0 ahead of the first part's rows, and n0's hwm would drop them.
    monkeypatch.setattr("smr.mapper.router.REROUTE_DEPTH_MAX", 0)
    setup = Setup()
    transport = _Scripted()
    emitter = Emitter(
        setup.view,
        SLOT_BITS,
        MapperId("m"),
        replication=1,
        batch_size=2,
        window_batches=1,
        clock=lambda: setup.now[0],
        transport=transport,
    )
    emitter._router._held_rows_max = 100  # the clock stands still: no wait for a hold to go stale
    setup.emitter = transport.emitter = emitter
    setup.transport = transport
    n0, n1 = NodeId("n0"), NodeId("n1")
    word, kept = setup.moving_words[0], setup.kept_words[0]

    def ack(node: NodeId, chan: int) -> None:
        emitter._on_reply(
            emitter._channels.get(node), encode(Ack(emitter.stream_id, chan, setup.view.epoch))
        )

    def move_ended() -> None:
        channel = emitter._channels.get(n0)
        emitter._on_reply(channel, encode(Nack(emitter.stream_id, channel.next_chan, True)))

    _emit_all(setup, [word, word])  # seqs 1, 2: refused, held
    setup.refuse(setup.batches_to("n0")[-1])
    _emit_all(setup, [word, word])  # seqs 3, 4: held too
    _emit_all(setup, [kept, kept])  # a batch of a slot that stays: n1's window is full
    ack(n0, setup.batches_to("n0")[-1].chan)
    # The move ends: seqs 1-4 go out in two parts; the first waits for room on n1.
    refused: list[int] = []

    def refuse_the_last() -> None:
        batch = setup.batches_to("n0")[-1]
        refused.append(batch.chan)
        setup.refuse(batch)

    transport.script = [
        refuse_the_last,
        lambda: (move_ended(), ack(n1, setup.batches_to("n1")[-1].chan)),
    ]
    move_ended()
    emitter.flush()
    assert refused and not transport.script
    seqs = [
        seq
        for batch in setup.batches_to("n0")
        if batch.chan > refused[-1]
        for slot, seq in setup.rows(batch)
        if slot == slot_of(word, SLOT_BITS)
    ]
    assert seqs == [1, 2, 3, 4]
