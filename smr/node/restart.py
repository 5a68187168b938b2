"""The exchange of restored views at a restart from disk (docs/design/architecture.md#restart).

A node restored from its disk starts with the view its manifest recorded at its last
checkpoint, older than the ring's if it was down when the cluster stopped. Before it serves
it (1) tells every member of that view its view, (2) merges every view it hears, (3) holds
pings, reads and batches until it heard every other owner (or ``restart_settle_ms``
passed; with no bound if it *crashed*, its disk holding no clean stop, but for the nodes
``up --without`` left out), and (4) fences if the merged view marks it dead, or, crashed
with a possible taker left out, counts what it holds lost (``Takeover.doubt_restored_state``).

Guarantee: a range's state is served after a restart only by the owner the newest view
restored names, never from an older copy; what a crashed node restored is served only once
every owner that could have taken it over was heard, or counted lost if one was left out.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from smr.node.settings import NodeSettings
from smr.ring.ids import NodeId
from smr.ring.view import Status, View

log = logging.getLogger("smr.node")


class RestartExchange:
    """Steps 1 and 3 of the module docstring for one node (none for a node that started
    empty: it has nothing older to serve). The node sends what :meth:`peers_to_tell` names
    and reports every view it hears (:meth:`heard`); this part decides when it has settled.
    """

    def __init__(
        self, node_id: NodeId, settings: NodeSettings, restored: bool, crashed: bool = False
    ) -> None:
        self._node_id = node_id
        self._settle_s = settings.restart_settle_ms / 1000
        self._settled = not restored
        self._crashed = restored and crashed
        self._left_out = frozenset(NodeId(name) for name in settings.restart_left_out)
        self._until: float | None = None
        self._heard: set[NodeId] = set()
        self._restored = restored
        self._settle_told = False
        self._waiting_told = False

    @property
    def settling(self) -> bool:
        """Whether the node still holds pings, reads and batches (step 3)."""
        return not self._settled

    def peers_to_tell(self, now: float, view: View) -> list[NodeId]:
        """Step 1, on the node's first tick: the members of ``view`` (its restored view) to
        send it to, dead ones included; nothing after that, or once settled."""
        if self._settled or self._until is not None:
            return []
        self._until = now + self._settle_s
        return sorted(node_id for node_id in view.members if node_id != self._node_id)

    def heard(self, peer: NodeId, now: float, view: View) -> None:
        """A view from ``peer`` was merged into ``view`` (or equalled it)."""
        if not self._settled:
            self._heard.add(peer)
            self.settle_if_done(now, view)

    def settle_if_done(self, now: float, view: View) -> None:
        """Step 3's end: every other owner of ``view`` not marked dead was heard, or the
        settle time passed."""
        if self._settled or self._until is None:
            return
        awaited = sorted(
            member.node_id
            for member in view.owners()
            if member.node_id != self._node_id
            and member.node_id not in self._heard
            and member.node_id not in self._left_out
            and member.status is not Status.DEAD
        )
        if awaited and now < self._until:
            return
        if awaited and self._crashed:
            if not self._waiting_told:
                self._waiting_told = True
                log.warning(
                    "restart: this node crashed before the stop and may have been taken over "
                    "while it was down: it serves once it heard %s (start them, or restart "
                    "the cluster with --without naming those that cannot come back)",
                    ", ".join(awaited),
                )
            return
        self._settled = True
        if awaited:
            log.warning(
                "restart: serving after %.1f s without word from %s (not started, or slow "
                "to start); the view is the newest the others restored",
                self._settle_s,
                ", ".join(awaited),
            )
        else:
            log.info("restart: the views restored agree (epoch %d); serving", view.epoch)

    def take_settled(self) -> bool:
        """True once, when asked after a restored node settled: its time for step 4's
        doubt and to suspect the owners left out (``left_out_takers``, ``left_out``)."""
        if not self._settled or self._settle_told:
            return False
        self._settle_told = True
        return self._restored

    @property
    def left_out(self) -> frozenset[NodeId]:
        """The nodes the operator left out of the restart: they will not answer, so a
        successor suspects them at once instead of waiting out a first-contact grace."""
        return self._left_out

    def left_out_takers(self, takers: Sequence[NodeId]) -> list[NodeId]:
        """Step 4's doubt: those of ``takers`` (the owners that hold this node's copies,
        and so would have taken it over) left out of the restart, if this node crashed."""
        return sorted(set(takers) & self._left_out) if self._crashed else []
