"""Retiring finished mappers, so that dedup memory does not grow with every feed ever run
(why, and why a lease: docs/design/node-protocols.md#retirement). A finished mapper sends
``MapperDone(mapper, last)``: no tuple of it will ever have a seq above ``last``. On a node:

1. On ``MapperDone``: remember ``last``, start the lease, answer.
2. When the lease has run out and no move is under way, retire the mapper in the own store
   (its hwms go, its last seq stays); checkpoints and snapshots carry the retirement.
3. Every tick, no move under way, hwms of retired mappers that came back are dropped again.
4. Intake: a batch of a finished mapper with every seq at or below ``last`` is acked as
   duplicates; one with a seq above it is refused with ERROR.

Guarantee: a node that never hears ``MapperDone`` only keeps the hwms longer: more memory,
never a wrong count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from smr.checkpoint.ids import MapperId, Seq
from smr.checkpoint.store import StateStore
from smr.node.ports import Clock, MoveState, Peers, SeatFn, Verdict
from smr.node.settings import NodeSettings
from smr.wire.codec import encode
from smr.wire.messages import MapperDone, Pong

TICK_S: Final = 1.0
"""How often steps 2 and 3 run: each walks the store's mappers once."""

PENDING_MAPPERS_MAX: Final = 200_000
"""Finished mappers whose lease is running, at most: a notice past it is ignored (counted),
which costs memory only (the mapper's hwms stay), never a count."""


class Retirement:
    """Finished mappers on this node: their leases, and what intake needs to answer them.

    Guarantees: ``last_of(mapper)`` is the mapper's last seq from the moment its notice
    arrived (or its retirement arrived with state) for as long as this node's store holds a
    hwm or the retirement of it, and through the lease; a mapper is retired in the own
    store only after its lease ran out and while no move is under way here.
    """

    def __init__(
        self,
        seat: SeatFn,
        peers: Peers,
        clock: Clock,
        settings: NodeSettings,
        store: Callable[[], StateStore],
        moves: MoveState,
    ) -> None:
        self._seat = seat
        self._peers = peers
        self._clock = clock
        self._lease_s = settings.mapper_lease_ms / 1000
        self._store = store
        self._moves = moves
        # mapper -> (last seq, when the lease ends): in notice order, which is lease order.
        self._pending: dict[MapperId, tuple[Seq, float]] = {}
        self.notices = 0
        """``MapperDone`` notices received (repeats included)."""
        self.notices_ignored = 0
        """Notices ignored because ``PENDING_MAPPERS_MAX`` leases were running."""
        self.retired_total = 0
        """Mappers retired in the own store after their lease."""
        self.hwms_dropped = 0
        """Hwm entries dropped by retirements in the own store, steps 2 and 3."""
        self.batches_answered = 0
        """Batches of finished mappers acked as duplicates at intake (step 4)."""
        self.batches_refused = 0
        """Batches of finished mappers refused at intake: a seq past the last (step 4)."""
        self._next_tick_at = 0.0

    @property
    def pending(self) -> int:
        """Finished mappers whose lease is still running here."""
        return len(self._pending)

    def last_of(self, mapper: MapperId) -> Seq | None:
        """The last seq of ``mapper`` if it finished (step 1) or was retired here (its
        retirement reached the own store with state); None for a mapper still running."""
        pending = self._pending.get(mapper)
        if pending is not None:
            return pending[0]
        return self._store().retired_last(mapper)

    def admit(self, mapper: MapperId, seqs: Sequence[int]) -> Verdict | None:
        """Step 4 for a batch of ``mapper`` with ``seqs``: None if the mapper has not finished
        (or the batch is empty), intake goes on; else the verdict, counted."""
        last = self.last_of(mapper)
        if last is None or not seqs:
            return None
        seq_max = max(seqs)
        if seq_max > last:
            self.batches_refused += 1
            return Verdict(
                f"mapper {mapper!r} said it had finished at seq {last}, and this batch "
                f"has seq {seq_max}: a mapper id is never used again for other tuples; "
                "give this feed another mapper id"
            )
        self.batches_answered += 1
        return Verdict()

    def report(self) -> dict[str, int]:
        """What ``smr status`` shows of finished mappers (``Control.status``)."""
        return {
            # Leases running, retired here, and batches answered at intake; notices past
            # PENDING_MAPPERS_MAX (those mappers keep their hwms: memory only).
            "mappers_finishing": self.pending,
            "mapper_notices_ignored": self.notices_ignored,
            "mappers_retired": len(self._store().retired),
            "mappers_retired_total": self.retired_total,
            "retired_hwms_dropped": self.hwms_dropped,
            "batches_of_finished_mappers": self.batches_answered,
            "batches_refused_finished": self.batches_refused,
        }

    def on_mapper_done(self, identity: bytes, message: MapperDone) -> bool:
        """Step 1 for a ``MapperDone`` notice: answer PONG (the emitter waits for it), or
        count a bad frame for a negative seq; whether the notice was taken."""
        peers = self._peers
        if message.last < 0 or type(message.last) is not int:
            peers.bad_frame(identity, f"mapper-done of {message.mapper} with seq {message.last}")
            return False
        self.on_done(message.mapper, Seq(message.last))
        peers.reply(identity, encode(Pong(message.req, self._seat().node_id)))
        return True

    def on_done(self, mapper: MapperId, last: Seq) -> None:
        """Step 1: ``mapper`` finished at ``last``; its lease starts now (a repeat keeps the
        first lease and the higher last seq)."""
        self.notices += 1
        if self._store().retired_last(mapper) is not None:
            return
        pending = self._pending.get(mapper)
        if pending is not None:
            self._pending[mapper] = (max(pending[0], last), pending[1])
            return
        if len(self._pending) >= PENDING_MAPPERS_MAX:
            self.notices_ignored += 1
            return
        self._pending[mapper] = (last, self._clock() + self._lease_s)

    def tick(self, now: float) -> None:
        """Steps 2 and 3, unless a move is under way here (its replay may need the hwms)."""
        if now < self._next_tick_at or self._moves.busy:
            return
        self._next_tick_at = now + TICK_S
        store = self._store()
        # 2.
        while self._pending:
            mapper, (last, lease_end) = next(iter(self._pending.items()))
            if lease_end > now:
                break
            del self._pending[mapper]
            if store.hwms_of(mapper):
                # One that never wrote here leaves nothing to let go of, and needs no entry:
                # slots it wrote that come here later bring its hwms or its retirement.
                self.hwms_dropped += store.retire(mapper, last)
                self.retired_total += 1
        # 3.
        self.hwms_dropped += store.forget_retired_hwms()
