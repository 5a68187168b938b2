"""A primary's read lease (docs/design/architecture.md#read-lease): how long it may still
answer reads as its slots' primary without any other node having taken them over.

A secondary declares its primary dead only after hearing nothing from it for at least the
failure timeout (``ring.failure``, steps 1-3; a dropped connection, the one faster path,
needs the primary's process gone). So when a secondary echoes heartbeat ``k``, it heard from
the primary after ``k`` was sent, and cannot declare it dead on silence before ``sent(k) +
failure_timeout``. The primary holds the lease until the earliest of those times over its
current secondaries, measured on its own clock; past it, the primary may have been paused or
cut off long enough to be taken over, and answers reads as a non-owner would (the reader asks
again, by a fresher view). The probe and suspicion timeouts that follow the silence are the
margin for clock drift and for the reply in flight.

Pure: no clock, no I/O; the caller passes ``now`` (seconds).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Final

from smr.ring.ids import NodeId

BEATS_KEPT: Final = 256
"""Send times kept, newest first: an echo of an older beat renews nothing (at the default
heartbeat interval, 25 s of beats)."""


class ReadLease:
    """The send times of this node's recent heartbeats and, per secondary, the latest one
    it echoed.

    Guarantee: :meth:`holds` is True at ``now`` only if every node in ``watchers`` echoed a
    beat sent at some ``t`` with ``now < t + duration_s`` (no watchers: always True).
    """

    def __init__(self, duration_s: float) -> None:
        self.duration_s = duration_s
        self._sent_at: OrderedDict[int, float] = OrderedDict()
        self._echoed_at: dict[NodeId, float] = {}

    def sent(self, beat: int, now: float) -> None:
        """Heartbeat ``beat`` (numbers rise) left at ``now``."""
        self._sent_at[beat] = now
        while len(self._sent_at) > BEATS_KEPT:
            self._sent_at.popitem(last=False)

    def echoed(self, peer: NodeId, beat: int) -> None:
        """``peer`` echoed heartbeat ``beat``: its send time counts for ``peer`` if it is
        later than what ``peer`` echoed before (echoes may arrive out of order)."""
        sent_at = self._sent_at.get(beat)
        if sent_at is not None and sent_at > self._echoed_at.get(peer, float("-inf")):
            self._echoed_at[peer] = sent_at

    def forget(self, peers: Iterable[NodeId]) -> None:
        """Drop what ``peers`` echoed (they left this node's secondaries, or the node's
        incarnation changed): a returning one must echo a new beat."""
        for peer in peers:
            self._echoed_at.pop(peer, None)

    def expires_at(self, watchers: Iterable[NodeId]) -> float:
        """When the lease ends: the earliest echoed send time over ``watchers`` plus the
        duration (``-inf`` if one never echoed, ``inf`` if there are none)."""
        return min(
            (self._echoed_at.get(peer, float("-inf")) + self.duration_s for peer in watchers),
            default=float("inf"),
        )

    def holds(self, now: float, watchers: Iterable[NodeId]) -> bool:
        """True while no watcher may have declared this node dead on silence."""
        return now < self.expires_at(watchers)
