"""Handing state back after a false verdict (docs/design/architecture.md#failures: a node told it is
dead while alive never just drops its state).

A takeover that finds slots with no copy (more adjacent failures than ``r``) marks them lost
and refuses their tuples (``checkpoint.loss``). If one of those failures was a live node
declared dead (paused, or cut off, past the failure timeout), that node still holds the
state: it is handed to the taker, and the slots serve again with nothing lost.

1. Fencing, a node keeps the store it served as a *fenced copy* for ``FENCED_COPY_KEEP_S``,
   serving nothing from it (``keep``).
2. A node that takes over a range and marks slots of it lost remembers whose they were: the
   dead node and its incarnation (``note_lost``).
3. Once that node is back in the view as a later incarnation, the taker asks it, every
   ``ASK_INTERVAL_S``, for the slots still lost, a page at a time (``ask``, STATE_REQUEST).
4. The fenced node answers from its fenced copy with whole slots, up to
   ``snapshot_chunk_keys`` keys, naming the incarnation the copy is of (``on_request``,
   STATE_REPLY).
5. The taker checks that the copy is of the incarnation it took over, restores the slots
   still lost from it (``checkpoint.loss.restore_lost``: state and hwm vectors, so the
   tuples the copy holds are duplicates when mappers resend them), and sends its
   secondaries a new snapshot of its range (``on_reply``). It asks for the next page at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from smr.checkpoint.delta import DeltaError, decode_delta, encode_delta
from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.ports import Clock, Peers, SeatFn, SecondaryFollowing
from smr.node.settings import NodeCounters, NodeSettings
from smr.ring.ids import Incarnation, NodeId, Slot
from smr.ring.view import Status
from smr.wire.codec import pack_body, unpack_body
from smr.wire.kinds import FrameError, RequestId
from smr.wire.peer import StateReply, StateRequest

log = logging.getLogger("smr.node")

# How long a fenced node keeps the state it served: its taker asks within a second or two of
# seeing it back, so this only bounds the memory held for a taker that never asks.
FENCED_COPY_KEEP_S: Final = 300.0
ASK_INTERVAL_S: Final = 1.0
# Slots named in one request, at most (the answer holds fewer when they hold many keys).
SLOTS_PER_REQUEST_MAX: Final = 1024


@dataclass
class _LostRange:
    """Slots a takeover found lost, of the dead node ``incarnation`` of their owner."""

    incarnation: Incarnation
    slots: set[Slot]


class Handoff:
    """The fenced copy a node keeps, and the lost slots it asks back (module doc).

    Guarantees: a slot is restored only from a copy of the incarnation whose range was taken
    over, and only while it is still lost (never over state that serves); a copy that was
    itself lost restores nothing.
    """

    def __init__(
        self,
        seat: SeatFn,
        peers: Peers,
        clock: Clock,
        settings: NodeSettings,
        store: Callable[[], StateStore],
        ledger: LossLedger,
        counters: NodeCounters,
        snapshots: SecondaryFollowing,
    ) -> None:
        """``store``: the node's store as of now (a fence replaces it); ``ledger``: its slots
        lost beyond tolerance; ``snapshots``: re-replicates restored slots."""
        self._seat = seat
        self._peers = peers
        self._clock = clock
        self._settings = settings
        self._store = store
        self._ledger = ledger
        self._counters = counters
        self._snapshots = snapshots
        self._copy: StateStore | None = None
        self._copy_of = Incarnation(0)
        self._copy_until = 0.0
        self.lost_from: dict[NodeId, _LostRange] = {}
        self._asked_at = -1e9
        self._req = 0

    @property
    def holds_copy(self) -> bool:
        """Whether this node keeps a fenced copy."""
        return self._copy is not None

    def keep(self, store: StateStore, incarnation: Incarnation) -> None:
        """1. Keep ``store``, served as ``incarnation`` until fenced now."""
        self._copy = store
        self._copy_of = incarnation
        self._copy_until = self._clock() + FENCED_COPY_KEEP_S

    def note_lost(self, dead: NodeId, incarnation: Incarnation, slots: set[Slot]) -> None:
        """2. A takeover of ``dead`` (``incarnation``) found ``slots`` lost."""
        entry = self.lost_from.get(dead)
        if entry is None or entry.incarnation != incarnation:
            self.lost_from[dead] = _LostRange(incarnation, set(slots))
        else:
            entry.slots |= slots

    def ask(self, now: float) -> None:
        """3. Ask each node back in the view for the slots of it still lost here (on a
        tick); forget a fenced copy past its time."""
        if self._copy is not None and now >= self._copy_until:
            self._copy = None
        if not self.lost_from or now - self._asked_at < ASK_INTERVAL_S:
            return
        for dead, slots in self.awaited().items():
            self._asked_at = now
            self._req += 1
            page = sorted(slots)[:SLOTS_PER_REQUEST_MAX]
            stamp = self._seat().stamp
            self._peers.send(dead, StateRequest(*stamp, RequestId(self._req), pack_body(page)))

    def awaited(self) -> dict[NodeId, set[Slot]]:
        """The slots still lost here that a node back in the view may hold, by that node."""
        view = self._seat().view
        offline = self._ledger.slots
        awaited: dict[NodeId, set[Slot]] = {}
        for dead, entry in list(self.lost_from.items()):
            entry.slots &= offline
            if not entry.slots:
                del self.lost_from[dead]
                continue
            member = view.get(dead)
            back = member is not None and member.status is not Status.DEAD
            if back and member is not None and member.incarnation > entry.incarnation:
                awaited[dead] = entry.slots
        return awaited

    def on_request(self, identity: bytes, message: StateRequest) -> None:
        """4. Answer from the fenced copy, if this node keeps one."""
        taker = self._peers.is_live(message)
        copy = self._copy
        if taker is None or copy is None:
            return
        asked = unpack_body(message.body)
        seat = self._seat()
        slot_count = seat.ring.slot_count
        if not isinstance(asked, tuple) or not all(
            type(slot) is int and 0 <= slot < slot_count for slot in asked
        ):
            raise FrameError(f"a state request must list slots below {slot_count}")
        page: list[Slot] = []
        keys = 0
        for slot in asked[:SLOTS_PER_REQUEST_MAX]:
            page.append(Slot(slot))
            keys += sum(1 for _ in copy.items([Slot(slot)]))
            if keys >= self._settings.snapshot_chunk_keys:
                break
        body = pack_body({"slots": page, "delta": encode_delta(copy.snapshot(page))})
        self._peers.send(taker, StateReply(*seat.stamp, message.req, self._copy_of, body))
        log.warning(
            "handed %d keys of %d slots, from the state served as incarnation %d, to %s",
            keys,
            len(page),
            self._copy_of,
            taker,
        )

    def on_reply(self, identity: bytes, message: StateReply) -> None:
        """5. Restore the slots answered that are still lost; ask for the next page."""
        sender = self._peers.is_live(message)
        entry = self.lost_from.get(sender) if sender is not None else None
        if sender is None or entry is None or message.copy_of != entry.incarnation:
            return
        answer = unpack_body(message.body)
        try:
            slots = {Slot(slot) for slot in answer["slots"] if type(slot) is int}
            copy = decode_delta(answer["delta"])
        except (TypeError, KeyError, DeltaError) as error:
            raise FrameError(f"malformed state reply from {sender}: {error}") from None
        answered = slots & entry.slots
        entry.slots -= answered
        restored = self._ledger.restore(self._store(), copy, answered)
        if restored:
            self._counters.slots_restored += len(restored)
            # The secondaries hold nothing of the restored slots: re-replicate the range.
            self._snapshots.follow_secondaries(self._seat().secondaries, changed_range=True)
            log.warning(
                "restored %d lost slots from the state %s kept when it was fenced; %d still lost",
                len(restored),
                sender,
                self._ledger.count(),
            )
        self._asked_at = -1e9
