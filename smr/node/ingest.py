"""Intake: the channels from the emitters, the bounded inbox, dedup and apply, the acks.

The protocol's steps 1-7 (re-base, resend, gap, decode, admission, the bounded inbox, apply)
are in docs/design/architecture.md#admission; the code marks them. Each admission check is
asked of its owner: a finished mapper of the retirement (``Retirement.admit``), a frozen
slot of the moves (``Moves.admission``), a lost slot of the loss ledger; intake keeps the
channel numbering and the inbox.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from smr.checkpoint.bulk import AnyBatch
from smr.checkpoint.ids import MapperId
from smr.checkpoint.loss import RESERVED_MAPPER_PREFIX, LossLedger
from smr.checkpoint.store import StateStore
from smr.node.load import LoadMeter
from smr.node.ports import (
    Backlog,
    Clock,
    FinishedMappers,
    MoveAdmission,
    Peers,
    Seat,
    SeatFn,
    TupleBackup,
)
from smr.node.rate_cap import ApplyRateCap
from smr.node.reducer import Reducer
from smr.node.settings import NodeCounters, NodeSettings
from smr.output.files import OutputSink
from smr.ring.ids import Slot
from smr.ring.invariants import InvariantViolation
from smr.ring.placement import Role
from smr.wire.batch_body import BatchColumns, EncodedBatch, decode_batch_ids, decode_primary_batch
from smr.wire.codec import encode, pack_body
from smr.wire.kinds import ChannelNumber, FrameError, StreamId
from smr.wire.messages import Ack, Batch, Error, Nack, NotOwner

if TYPE_CHECKING:
    from smr.checkpoint.store import BatchOutcome

# Decoded batches waiting to be applied. At 1000 tuples a batch this is at most 256k tuples
# (a few tens of MB); past it the node stops reading and the mappers block.
INBOX_BATCHES_MAX: Final = 256
# Tuples applied per event-loop turn before timers get a chance to run: about 20-40 ms of
# work, well under the heartbeat interval, so a busy node never looks dead to its watchers.
APPLY_TUPLES_PER_TURN: Final = 20_000
# And at most this long per turn, whatever the tuples cost: a reducer slower than expected
# (or a starved CPU) delays its own batches, not the node's timers, probes and acks.
APPLY_SECONDS_PER_TURN: Final = 0.05
# The time bound never admits fewer tuples than this (a few batches), so that a slow node
# still reads batches of the usual sizes whole and its apply turns stay full.
ADMIT_TUPLES_MIN: Final = 200
# Batches read while the inbox is full, kept unaccepted (step 6) so that the messages of
# peers behind them are read on time; past this many the node stops reading its socket.
DEFERRED_BATCHES_MAX: Final = 64
# While the output table holds too many records uncommitted: how often to look again.
OUTPUT_HELD_RETRY_S: Final = 0.05


@dataclass(frozen=True)
class Pending:
    """A batch accepted into the inbox, waiting to be applied and acked, decoded or (for a
    fold that reads them) in its wire bytes. A backed-up batch (``batch`` None) is already
    stored; it waits only so that acks keep channel order."""

    identity: bytes
    stream: StreamId
    mapper: MapperId
    chan: ChannelNumber
    batch: BatchColumns | EncodedBatch | None


class Ingest:
    """The channels, the inbox and the acks of one node (docs/design/architecture.md#admission).

    Guarantees: a batch is acked only after all its tuples were applied (or found to be
    duplicates, or failed in the reducer and were logged); a tuple is applied at most once
    per slot state (hwm); acks on a channel carry only numbers processed in channel order.
    """

    def __init__(
        self,
        seat: SeatFn,
        peers: Peers,
        clock: Clock,
        settings: NodeSettings,
        counters: NodeCounters,
        store: Callable[[], StateStore],
        ledger: LossLedger,
        reducer: Reducer,
        load: LoadMeter,
        output: OutputSink,
        *,
        moves: MoveAdmission,
        retirement: FinishedMappers,
        replication: TupleBackup,
    ) -> None:
        """``store``: the node's as of now (a fence replaces it); ``ledger``: its slots lost
        beyond tolerance; ``moves``, ``retirement``, ``replication``: the admission checks
        of step 5 and the tuple backup."""
        self._seat = seat
        self._peers = peers
        self._clock = clock
        self._settings = settings
        self._counters = counters
        self._store = store
        self._ledger = ledger
        self._reducer = reducer
        self._load = load
        self._output = output
        self._moves = moves
        self._retirement = retirement
        self._replication = replication
        self.inbox: deque[Pending] = deque()
        # Batches read while the inbox was full, in the order they came (step 6).
        self.deferred: deque[tuple[bytes, Batch]] = deque()
        self.inbox_peak = 0
        # Tuples in the inbox's batches, and whether the last apply stopped with batches
        # left (its budget spent): the load a heartbeat reports.
        self.inbox_tuples = 0
        # The most tuples the inbox has held (what the time bound of step 6 keeps small).
        self.inbox_tuples_peak = 0
        # The longest time from an apply turn that left batches waiting to the next one that
        # applied some, since `stall_s_max` was last reset (a move measures its own).
        self.stall_s_max = 0.0
        self._left_waiting_at: float | None = None
        self.behind = False
        self._expected: dict[StreamId, ChannelNumber] = {}
        # Channels owed a cumulative ack, and per stream the last batch number processed
        # (applied or backed up) in channel order: the only number an ack may carry.
        self._acks: set[tuple[bytes, StreamId]] = set()
        self._processed: dict[StreamId, ChannelNumber] = {}
        # Batches accepted into the inbox, and taken out of it, since the start: a snapshot
        # waits until every batch accepted before it began has been applied.
        self.accepted_total = 0
        self.taken_total = 0
        cap = settings.apply_rate_cap_per_s
        self.rate_cap = ApplyRateCap(cap, clock) if cap is not None else None

    # -- what other roles ask ------------------------------------------------------------

    def backlog(self) -> Backlog:
        """The inbox's tuples and whether applying is behind."""
        return Backlog(self.inbox_tuples, self.behind)

    def position(self) -> tuple[int, int]:
        """Batches accepted into the inbox, and taken out of it, since the start."""
        return self.accepted_total, self.taken_total

    def queued_for(self, slots: frozenset[Slot]) -> bool:
        """Whether an accepted batch with a slot of ``slots`` waits in the inbox."""
        return any(p.batch is not None and not slots.isdisjoint(p.batch.slots) for p in self.inbox)

    def restart_stall_record(self) -> None:
        self.stall_s_max = 0.0

    def stall_record_s(self) -> float:
        """The longest apply stall (``stall_s_max``) since ``restart_stall_record``."""
        return self.stall_s_max

    def report(self) -> dict[str, int | None]:
        """What ``smr status`` shows of the inbox."""
        return {
            "inbox_peak": self.inbox_peak,
            "inbox_tuples_peak": self.inbox_tuples_peak,
            "inbox_admits_tuples": self.admit_tuples(),
        }

    @property
    def capped_wait_s(self) -> float | None:
        """How long until the rate cap lets batches that wait be applied (None when none
        waits, or the node has no cap); while the output table holds too many records
        uncommitted, a short wait, until a checkpoint's commit takes them."""
        if not self.inbox:
            return None
        if self._output.held:
            return OUTPUT_HELD_RETRY_S
        if self.rate_cap is None:
            return None
        return self.rate_cap.wait_s()

    @property
    def can_apply_now(self) -> bool:
        """True while batches wait to be applied and the rate cap, if any, lets them."""
        return bool(self.inbox) and not self.capped_wait_s

    @property
    def inbox_full(self) -> bool:
        """True when the node must stop reading its socket (backpressure): the inbox holds
        ``INBOX_BATCHES_MAX`` batches, or ``admit_ms`` of work at the node's apply rate."""
        if len(self.inbox) >= INBOX_BATCHES_MAX:
            return True
        admit_tuples = self.admit_tuples()
        return admit_tuples is not None and self.inbox_tuples >= admit_tuples

    def admit_tuples(self) -> int | None:
        """How many tuples the inbox admits (step 6): ``admit_ms`` at the node's apply rate,
        its cap when it has one, else the rate its apply turns measured (None before any
        was measured, or without a time bound: the batch bound alone holds)."""
        admit_ms = self._settings.admit_ms
        if admit_ms is None:
            return None
        if self.rate_cap is not None:
            rate_per_s = self.rate_cap.rate_per_s
        else:
            us_per_tuple = self._load.apply_cost_us()
            if us_per_tuple <= 0:
                return None
            rate_per_s = 1e6 / us_per_tuple
        return max(ADMIT_TUPLES_MIN, round(rate_per_s * admit_ms / 1000))

    @property
    def reading_paused(self) -> bool:
        """True when the node must stop reading its socket: the inbox is full and so is the
        queue of batches read meanwhile (backpressure)."""
        return len(self.deferred) >= DEFERRED_BATCHES_MAX

    def receive(self, identity: bytes, message: Batch) -> None:
        """A batch read from the socket: handled now (``on_batch``), or kept in ``deferred``
        while the inbox is full or batches read before it wait there (step 6)."""
        if self.deferred or self.inbox_full:
            self.deferred.append((identity, message))
            return
        self.on_batch(identity, message)

    def take_deferred(self) -> None:
        """Handle the batches kept while the inbox was full, in order, as it makes room."""
        deferred = self.deferred
        while deferred and not self.inbox_full:
            self.on_batch(*deferred.popleft())

    def reset(self) -> None:
        """Forget every channel and pending batch (fencing: the mappers resend to the owners)."""
        self.inbox.clear()
        self.deferred.clear()
        self.inbox_tuples = 0
        self.behind = False
        self._expected.clear()
        self._acks.clear()
        self._processed.clear()
        self.taken_total = self.accepted_total

    def expected(self, stream: StreamId) -> ChannelNumber:
        """The number of the next batch this node expects on ``stream``'s channel."""
        return self._expected.get(stream, ChannelNumber(0))

    def on_batch(self, identity: bytes, message: Batch) -> None:
        """Steps 1-6 (docs/design/architecture.md#admission) for one received batch."""
        reply = self._peers.reply
        stream = message.stream
        mapper = message.mapper
        chan = message.chan
        # 1-3.
        if not self._is_next(identity, message):
            return
        # 4. Decode and validate (the slot and seq columns first: a secondary needs no more).
        if mapper.startswith(RESERVED_MAPPER_PREFIX):
            text = f"mapper ids starting with {RESERVED_MAPPER_PREFIX!r} are reserved: {mapper!r}"
            reply(identity, encode(Error(None, text)))
            return
        seat = self._seat()
        ring = seat.ring
        try:
            ids = slots, seqs = decode_batch_ids(message.body, message.n, ring.slot_count)
            # Seqs rise per slot within a batch: this is each slot's highest (a backup's
            # eviction key), and its keys are the batch's slots.
            last_seq_by_slot = dict(zip(slots, seqs, strict=True))
            slot_set = last_seq_by_slot.keys()
            # C-level passes: a set of per-slot lookups costs a Python loop per slot otherwise.
            slot_roles = set(map(seat.roles.__getitem__, slot_set))
            batch: BatchColumns | EncodedBatch | None = None
            if slot_roles == {Role.PRIMARY}:
                keep_bytes = self._reducer.folds_bodies
                batch = decode_primary_batch(
                    message.body, message.n, ring.slot_count, ids, keep_bytes
                )
        except FrameError as error:
            self._peers.bad_frame(identity, f"batch {chan} from {mapper} on {stream}: {error}")
            reply(identity, encode(Error(None, str(error))))
            return
        # 5a. A finished mapper (smr.node.retirement, step 4): tuples it already delivered
        #     are acked as duplicates; one past its last seq is refused, never applied.
        finished = self._retirement.admit(mapper, seqs)
        if finished is not None:
            if finished.refusal is not None:
                reply(identity, encode(Error(None, finished.refusal)))
                return
            self._counters.tuples_duplicate += len(seqs)
            self._expected[stream] = ChannelNumber(chan + 1)
            self.inbox.append(Pending(identity, stream, mapper, chan, None))
            return
        # 5. Ownership: primary of every slot, or secondary of every slot under one primary
        #    (the backup is filed and evicted by that primary's checkpoints: a batch that
        #    straddled two primaries would never be evicted whole), or refuse.
        primary_of = ring.primary_index_by_slot
        if slot_roles == {Role.SECONDARY} and len(set(map(primary_of.__getitem__, slot_set))) == 1:
            if self._replication.back_up(mapper, message.body, len(slots), last_seq_by_slot):
                self._expected[stream] = ChannelNumber(chan + 1)
                # Acked in channel order, after any primary batch of this channel still queued.
                self.inbox.append(Pending(identity, stream, mapper, chan, None))
            return
        short = batch is not None and not seat.sent_to_all(message.replicas)
        frozen = None
        if batch is not None and not short:
            # The move's admission check (smr.node.moves, step 4).
            frozen = self._moves.admission(identity, stream, slot_set)
        if batch is None or short or frozen is not None:
            self._refuse_not_owner(identity, stream, chan, frozen, seat)
            return
        if self._refuse_lost(identity, slot_set):
            return
        # 6. Accept.
        self.accepted_total += 1
        self.inbox.append(Pending(identity, stream, mapper, chan, batch))
        self.inbox_tuples += len(batch)
        self.inbox_peak = max(self.inbox_peak, len(self.inbox))
        self.inbox_tuples_peak = max(self.inbox_tuples_peak, self.inbox_tuples)
        self._expected[stream] = ChannelNumber(chan + 1)

    def _is_next(self, identity: bytes, message: Batch) -> bool:
        """Steps 1-3 for ``message``: whether it is the batch its channel expects next (a
        resend is marked for an ack of what is processed, a gap is answered with NACK)."""
        stream = message.stream
        chan = message.chan
        # 1. Re-base.
        expected = self._expected.get(stream, ChannelNumber(0))
        if message.base > expected:
            expected = message.base
            # Everything below base is resolved for the stream; once nothing of this
            # channel waits in the inbox, acks may say so.
            if not any(p.stream == stream for p in self.inbox):
                self._processed[stream] = ChannelNumber(
                    max(self._processed.get(stream, 0), expected - 1)
                )
        self._expected[stream] = expected
        # 2. A resend of something already accepted: ack what is processed so far.
        if chan < expected:
            self._counters.batches_resent_to_us += 1
            self._acks.add((identity, stream))
            return False
        # 3. A gap.
        if chan > expected:
            self._counters.gaps += 1
            self._peers.reply(identity, encode(Nack(stream, expected, False)))
            return False
        return True

    def _refuse_not_owner(
        self,
        identity: bytes,
        stream: StreamId,
        chan: ChannelNumber,
        frozen: tuple[int, int] | None,
        seat: Seat,
    ) -> None:
        """Step 5's refusal, with the view: not this node's slots (or not sent to its whole
        replica set), or a slot of the range it hands over (``frozen``: first slot, length)."""
        if frozen is None:
            self._counters.not_owner += 1
        else:
            self._counters.batches_refused_moving += 1
        view = seat.view
        refusal = NotOwner(stream, chan, view.epoch, *(frozen or (0, 0)), pack_body(view.to_wire()))
        self._peers.reply(identity, encode(refusal))

    def _refuse_lost(self, identity: bytes, slots: Collection[int]) -> bool:
        """Refuse a batch with a slot lost beyond tolerance (never folded into empty state,
        docs/design/architecture.md#failures); whether it was refused."""
        lost = sorted(self._ledger.lost_among(slots))
        if not lost:
            return False
        self._counters.batches_refused_offline += 1
        text = (
            f"the state of slot {lost[0]} (and {len(lost) - 1} more in this batch) was lost: "
            f"its node and its {self._settings.replication} backups failed. Tuples for it "
            "are refused until an operator runs 'smr recover --cluster DIR --accept-loss', "
            "which brings those slots back empty"
        )
        self._peers.reply(identity, encode(Error(None, text)))
        return True

    def hand_back(self, moving: frozenset[Slot]) -> list[tuple[bytes, StreamId]]:
        """6a: take out of the inbox, unapplied and unacked, every batch from the first one
        per channel holding a slot of ``moving`` on, and expect that batch again on the
        channel; returns the channels handed back (the caller refuses them with its view
        and the moving range, so that their mappers send the moving slots' tuples to the
        new owner once the move ends, and the rest again at once).

        Guarantees: no tuple of ``moving`` is left to apply here; every batch taken out was
        never acked (acks carry only numbers processed), so its mapper still holds it."""
        first: dict[StreamId, tuple[bytes, ChannelNumber]] = {}
        for pending in self.inbox:
            batch = pending.batch
            if pending.stream in first or batch is None or moving.isdisjoint(batch.slots):
                continue
            first[pending.stream] = (pending.identity, pending.chan)
        if not first:
            return []
        kept: deque[Pending] = deque()
        for pending in self.inbox:
            handed = pending.stream in first and pending.chan >= first[pending.stream][1]
            if not handed:
                kept.append(pending)
            elif pending.batch is not None:
                self.inbox_tuples -= len(pending.batch)
                # Never applied here: a snapshot waiting for it (Snapshots, step 0) need not.
                self.taken_total += 1
        self.inbox = kept
        for stream, (_identity, chan) in first.items():
            self._expected[stream] = chan
        self._counters.batches_handed_back += len(first)
        return [(identity, stream) for stream, (identity, _chan) in first.items()]

    def apply_inbox(self, tuples_max: int = APPLY_TUPLES_PER_TURN) -> None:
        """7. Apply accepted batches in order, about ``tuples_max`` tuples and
        ``APPLY_SECONDS_PER_TURN`` at most (so that heartbeats and probes are never held up
        for long: one batch is the smallest slice), and no more than the apply rate cap
        allows, if the node has one; mark their channels for a cumulative ack."""
        counters = self._counters
        reducer = self._reducer
        budget = tuples_max
        if self._output.held:
            return
        rate_cap = self.rate_cap
        if rate_cap is not None:
            budget = min(budget, rate_cap.allowance())
        clock = self._clock
        started = clock()
        stop_at = started + APPLY_SECONDS_PER_TURN
        load = self._load
        store = self._store()
        applied = 0
        # Aggregators apply the turn's batches together (each key written once per turn).
        together: list[AnyBatch] | None = [] if reducer.in_bulk else None
        while self.inbox and budget > 0 and clock() < stop_at:
            pending = self.inbox.popleft()
            if pending.batch is not None:
                self.taken_total += 1
            if pending.chan <= self._processed.get(pending.stream, -1):
                # An ack may only move forward: acking a number twice could release a batch
                # the emitter must still hold.
                raise InvariantViolation(
                    f"batch {pending.chan} of {pending.stream} processed after batch "
                    f"{self._processed[pending.stream]}"
                )
            self._processed[pending.stream] = pending.chan
            self._acks.add((pending.identity, pending.stream))
            batch = pending.batch
            if batch is None:
                continue
            budget -= len(batch)
            self.inbox_tuples -= len(batch)
            columns = batch.applied_as(pending.mapper)
            counters.batches += 1
            applied += len(batch)
            load.note_batch(batch.slots)
            if together is not None:
                together.append(columns)
            else:
                self._count(reducer.apply(store, [columns]))
        if together:
            self._count(reducer.apply(store, together))
        self.behind = bool(self.inbox)
        if applied:
            ended = clock()
            load.note_apply(applied, ended - started)
            if rate_cap is not None:
                rate_cap.spend(applied)
            if self._left_waiting_at is not None:
                self.stall_s_max = max(self.stall_s_max, started - self._left_waiting_at)
            self._left_waiting_at = ended if self.behind else None
        reducer.flush_emits()

    def _count(self, outcome: BatchOutcome) -> None:
        counters = self._counters
        counters.tuples_applied += outcome.applied
        counters.tuples_duplicate += outcome.duplicates
        if outcome.failed:
            counters.tuples_failed += outcome.failed
            self._reducer.note_failures(outcome.failed, outcome.failures)

    def send_acks(self) -> None:
        """Send one cumulative ack per channel that advanced since the last call."""
        if not self._acks:
            return
        reply = self._peers.reply
        epoch = self._seat().view.epoch
        for identity, stream in self._acks:
            through = self._processed.get(stream)
            if not through:
                continue
            reply(identity, encode(Ack(stream, through, epoch)))
        self._acks.clear()
