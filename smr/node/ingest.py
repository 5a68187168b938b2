"""Intake: the channels from the emitters, the bounded inbox, dedup and apply, the acks.

Receiving a tuple batch on the channel of emitter stream ``S``
(docs/design/architecture.md#data-path; the batch's mapper id is the tuples' identity for dedup, the
stream names the channel):

1. Re-base: if the batch's ``base`` (the oldest batch the emitter still holds for this
   channel) is past the number the node expects, expect ``base``: everything below was
   acked or re-routed by the emitter.
2. A batch numbered below the expected one is a resend: ack cumulatively again, apply nothing.
3. A batch numbered above it means a gap: answer ``NACK expect=k`` (resend from ``k``).
4. The expected batch is decoded and validated; a malformed body is answered with ``ERROR``
   and not accepted (the mapper stops with that message instead of resending forever).
5. If any of its slots is not this node's as primary, or is being handed over in a move
   (``smr.node.moves``, step 4), or the batch does not go to every node of this node's
   replica set (the feeder does not know of a new secondary yet), the whole batch is
   refused with ``NOT_OWNER`` and the node's view, and the channel does not advance: the
   mapper re-routes (or, when the view brings it nothing new, waits for the move to end).
   A batch whose slots are all backed up here, for one primary, goes to the tuple backup
   (:meth:`smr.node.replication.Replication.back_up`) and is acked in channel order; one
   whose slots belong to two primaries in this node's view is refused the same way (the
   mapper's view and ours differ; a backup filed under one primary would hold the other's
   tuples where no checkpoint of the first ever evicts them, nor a takeover of the second
   replays them).
   A batch with a slot whose state was lost beyond tolerance and not accepted yet
   (``checkpoint.loss``) is refused with ``ERROR``: the mapper stops and says why.
   Before all this (5a), a batch of a mapper that said it finished
   (``smr.node.retirement``) is acked as duplicates if every seq is at or below its last
   one, and refused with ``ERROR`` otherwise.
6. Otherwise the batch joins the bounded inbox and the channel advances. The inbox is
   bounded in time as well as in batches: once it holds ``admit_ms`` of work at the node's
   apply rate (its cap, else the rate it measured), or ``INBOX_BATCHES_MAX`` batches, the
   node stops reading its socket, so the socket queue and then TCP push back on the
   mappers: backpressure, never a drop. A saturated node thus holds a fraction of a second
   of work, and a move never waits long for it.
   While the inbox is full the node goes on reading its socket for the messages of its
   peers (views, checkpoints, moves, probes: a busy node must not answer them late), and
   keeps the batches it reads meanwhile as they came, unaccepted and unacked
   (``Ingest.deferred``, at most ``DEFERRED_BATCHES_MAX``; then it stops reading), to be
   taken in that order, before any batch read later, as the inbox makes room.
6a. A move's freeze hands back what is queued for the moving slots (:meth:`Ingest.hand_back`):
   on each channel with a queued batch holding a moving slot, that batch and the later ones
   leave the inbox unapplied and unacked, and the mapper is refused from that batch on,
   as if the freeze had come before it (``NOT_OWNER`` naming the moving range): it holds
   the moving slots' tuples back until the move ends, then sends them to the new owner,
   and sends the rest again at once.
7. Applying a batch skips tuples with ``seq <= hwm`` (already applied) and reduces the rest:
   per tuple, per batch (``reduce_batch``), or, with aggregators, the batches of one turn
   together (``smr.node.reducer.Reducer.apply``); only then is the batch acked (a slow node
   acks slowly).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from smr.checkpoint.bulk import Columns
from smr.checkpoint.ids import MapperId
from smr.checkpoint.loss import RESERVED_MAPPER_PREFIX
from smr.node.rate_cap import ApplyRateCap
from smr.ring.ids import Slot
from smr.ring.invariants import InvariantViolation
from smr.ring.placement import Role
from smr.wire.batch_body import BatchColumns, decode_batch_body, decode_batch_ids
from smr.wire.codec import encode, pack_body
from smr.wire.kinds import ChannelNumber, FrameError, StreamId
from smr.wire.messages import Ack, Batch, Error, Nack, NotOwner

if TYPE_CHECKING:
    from smr.checkpoint.store import BatchOutcome
    from smr.node.core import NodeCore

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
    """A batch accepted into the inbox, waiting to be applied and acked. A backed-up batch
    (``batch`` None) is already stored; it waits only so that acks keep channel order."""

    identity: bytes
    stream: StreamId
    mapper: MapperId
    chan: ChannelNumber
    batch: BatchColumns | None


class Ingest:
    """The channels, the inbox and the acks of one node (the protocol in the module doc).

    Guarantees: a batch is acked only after all its tuples were applied (or found to be
    duplicates, or failed in the reducer and were logged); a tuple is applied at most once
    per slot state (hwm); acks on a channel carry only numbers processed in channel order.
    """

    def __init__(self, node: NodeCore) -> None:
        self._node = node
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
        cap = node.settings.apply_rate_cap_per_s
        self.rate_cap = ApplyRateCap(cap, node.clock) if cap is not None else None

    @property
    def capped_wait_s(self) -> float | None:
        """How long until the rate cap lets batches that wait be applied (None when none
        waits, or the node has no cap); while the output table holds too many records
        uncommitted, a short wait, until a checkpoint's commit takes them."""
        if not self.inbox:
            return None
        if self._node.reducer.output.held:
            return OUTPUT_HELD_RETRY_S
        if self.rate_cap is None:
            return None
        return self.rate_cap.wait_s()

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
        node = self._node
        admit_ms = node.settings.admit_ms
        if admit_ms is None:
            return None
        if self.rate_cap is not None:
            rate_per_s = self.rate_cap.rate_per_s
        else:
            us_per_tuple = node.load.apply_us_per_tuple
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

    def _sent_to_all(self, replicas: str) -> bool:
        """Whether a batch sent to ``replicas`` (``Batch.replicas``) went to every node of
        this primary's replica set: a feeder that does not know of a new secondary yet
        (a joiner) must learn of it before this node applies its tuples."""
        node = self._node
        mine = node.replicas_wire
        if replicas == mine:
            return True
        return set(mine.split(",")) <= set(replicas.split(","))

    def expected(self, stream: StreamId) -> ChannelNumber:
        """The number of the next batch this node expects on ``stream``'s channel."""
        return self._expected.get(stream, ChannelNumber(0))

    def on_batch(self, identity: bytes, message: Batch) -> None:
        """Steps 1-6 of the module doc for one received batch."""
        node = self._node
        stream = message.stream
        mapper = message.mapper
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
            node.counters.batches_resent_to_us += 1
            self._acks.add((identity, stream))
            return
        # 3. A gap.
        if chan > expected:
            node.counters.gaps += 1
            node.reply(identity, encode(Nack(stream, expected, False)))
            return
        # 4. Decode and validate (the slot and seq columns first: a secondary needs no more).
        if mapper.startswith(RESERVED_MAPPER_PREFIX):
            text = f"mapper ids starting with {RESERVED_MAPPER_PREFIX!r} are reserved: {mapper!r}"
            node.reply(identity, encode(Error(None, text)))
            return
        try:
            ids = slots, seqs = decode_batch_ids(message.body, message.n, node.ring.slot_count)
            # Seqs rise per slot within a batch: this is each slot's highest (a backup's
            # eviction key), and its keys are the batch's slots.
            last_seq_by_slot = dict(zip(slots, seqs, strict=True))
            slot_set = last_seq_by_slot.keys()
            # C-level passes: a set of per-slot lookups costs a Python loop per slot otherwise.
            slot_roles = set(map(node.roles.__getitem__, slot_set))
            batch = None
            if slot_roles == {Role.PRIMARY}:
                batch = decode_batch_body(message.body, message.n, node.ring.slot_count, ids)
        except FrameError as error:
            node.bad_frame(identity, f"batch {chan} from {mapper} on {stream}: {error}")
            node.reply(identity, encode(Error(None, str(error))))
            return
        # 5a. A finished mapper (smr.node.retirement, step 4): tuples it already delivered
        #     are acked as duplicates; one past its last seq is refused, never applied.
        last = node.retirement.last_of(mapper)
        if last is not None and seqs:
            if max(seqs) > last:
                node.retirement.batches_refused += 1
                text = (
                    f"mapper {mapper!r} said it had finished at seq {last}, and this batch "
                    f"has seq {max(seqs)}: a mapper id is never used again for other tuples; "
                    "give this feed another mapper id"
                )
                node.reply(identity, encode(Error(None, text)))
                return
            node.retirement.batches_answered += 1
            node.counters.tuples_duplicate += len(seqs)
            self._expected[stream] = ChannelNumber(chan + 1)
            self.inbox.append(Pending(identity, stream, mapper, chan, None))
            return
        # 5. Ownership: primary of every slot, or secondary of every slot under one primary
        #    (the backup is filed and evicted by that primary's checkpoints: a batch that
        #    straddled two primaries would never be evicted whole), or refuse.
        primary_of = node.ring.primary_index_by_slot
        if slot_roles == {Role.SECONDARY} and len(set(map(primary_of.__getitem__, slot_set))) == 1:
            if node.replication.back_up(mapper, message.body, len(slots), last_seq_by_slot):
                self._expected[stream] = ChannelNumber(chan + 1)
                # Acked in channel order, after any primary batch of this channel still queued.
                self.inbox.append(Pending(identity, stream, mapper, chan, None))
            return
        frozen = node.moves.frozen
        short = batch is not None and not self._sent_to_all(message.replicas)
        if batch is None or short or (frozen and not frozen.isdisjoint(slot_set)):
            frozen_start = frozen_length = 0
            if batch is None or short:
                node.counters.not_owner += 1
            else:
                # A slot of the range this node is handing over (smr.node.moves, step 4):
                # the mapper holds back that range's tuples until the move ends either way,
                # and sends the rest again at once.
                node.counters.batches_refused_moving += 1
                node.moves.refused_frozen(identity, stream)
                frozen_range = node.moves.frozen_range
                if frozen_range is not None:
                    frozen_start, frozen_length = frozen_range.start, frozen_range.length
            refusal = NotOwner(
                stream,
                chan,
                node.view.epoch,
                frozen_start,
                frozen_length,
                pack_body(node.view.to_wire()),
            )
            node.reply(identity, encode(refusal))
            return
        lost = sorted(node.ledger.lost_among(slot_set))
        if lost:
            # Loss beyond tolerance is refused, never folded into empty state
            # (docs/design/architecture.md#failures).
            node.counters.batches_refused_offline += 1
            text = (
                f"the state of slot {lost[0]} (and {len(lost) - 1} more in this batch) was lost: "
                f"its node and its {node.settings.replication} backups failed. Tuples for it "
                "are refused until an operator runs 'smr recover --cluster DIR --accept-loss', "
                "which brings those slots back empty"
            )
            node.reply(identity, encode(Error(None, text)))
            return
        # 6. Accept.
        self.accepted_total += 1
        self.inbox.append(Pending(identity, stream, mapper, chan, batch))
        self.inbox_tuples += len(batch)
        self.inbox_peak = max(self.inbox_peak, len(self.inbox))
        self.inbox_tuples_peak = max(self.inbox_tuples_peak, self.inbox_tuples)
        self._expected[stream] = ChannelNumber(chan + 1)

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
        self._node.counters.batches_handed_back += len(first)
        return [(identity, stream) for stream, (identity, _chan) in first.items()]

    def apply_inbox(self, tuples_max: int = APPLY_TUPLES_PER_TURN) -> None:
        """7. Apply accepted batches in order, about ``tuples_max`` tuples and
        ``APPLY_SECONDS_PER_TURN`` at most (so that heartbeats and probes are never held up
        for long: one batch is the smallest slice), and no more than the apply rate cap
        allows, if the node has one; mark their channels for a cumulative ack."""
        node = self._node
        counters = node.counters
        reducer = node.reducer
        budget = tuples_max
        if reducer.output.held:
            return
        rate_cap = self.rate_cap
        if rate_cap is not None:
            budget = min(budget, rate_cap.allowance())
        clock = node.clock
        started = clock()
        stop_at = started + APPLY_SECONDS_PER_TURN
        load = node.load
        store = node.store
        applied = 0
        # Aggregators apply the turn's batches together (each key written once per turn).
        together: list[Columns] | None = [] if reducer.in_bulk else None
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
            columns = (pending.mapper, batch.slots, batch.seqs, batch.keys, batch.values)
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
        counters = self._node.counters
        counters.tuples_applied += outcome.applied
        counters.tuples_duplicate += outcome.duplicates
        if outcome.failed:
            counters.tuples_failed += outcome.failed
            self._node.reducer.note_failures(outcome.failed, outcome.failures)

    def send_acks(self) -> None:
        """Send one cumulative ack per channel that advanced since the last call."""
        if not self._acks:
            return
        node = self._node
        epoch = node.view.epoch
        for identity, stream in self._acks:
            through = self._processed.get(stream)
            if not through:
                continue
            node.reply(identity, encode(Ack(stream, through, epoch)))
        self._acks.clear()
