"""The exchange of restored views at a restart from disk (docs/design/architecture.md#restart).

Each node restored from its disk (``smr.node.disk``) starts with the view its manifest
recorded at its last checkpoint; a node that was dead when the cluster stopped holds an older
one than the nodes that took it over. Before it serves, it learns the ring's newest view from
the nodes that came back with it:

1. On its first tick it sends its restored view to every member of it but itself, dead ones
   included (a node that took it over, or that it took over, may be among them); each peer
   merges it and, if its own view is newer, answers with it (``Membership.on_gossip``).
2. It merges every view it hears; until it has settled, a merge it would refuse as forged in
   a running ring (a range grown past a live neighbour's with no takeover) is taken: a view
   restored from another disk is a descendant of its own, which may have missed a join or a
   move of the last checkpoint interval.
3. It holds every ping, read and batch (unanswered: clients retry, emitters resend) until it
   has heard the view of every other owner of its view, or ``restart_settle_ms`` passed (an
   owner that did not come back never answers). ``smr cluster up`` waits for every node's
   ping, so it returns once the nodes agree. A node that *crashed* (its disk holds no clean
   stop, ``Manifest.stopped``) may have been taken over while it was down, by an owner that
   alone knows it: it waits for every owner without a bound, but for those the operator
   left out of the restart (``up --without``, ``restart_left_out``).
4. A node the merged view marks dead at its restored incarnation was taken over while it was
   down: it fences (its generation kept in ``fenced-I/``, ``DiskState.keep_fenced``) and
   serves nothing of its older state; an owner that did not come back is taken over by its
   successor as a dead node, and the slots no copy on disk covers go to the loss ledger
   (``checkpoint.loss``), loudly. A crashed node whose possible takers (the owners that
   hold its copies) include one left out cannot know whether its state was superseded: it
   marks every slot it holds lost and drops its copies (kept, not served: the left-out node
   back, or ``smr recover --accept-loss``, decides), never serving it as current.

Guarantee: a node restored from disk serves no read and applies no batch by a view older
than the newest view of the owners of its view that came back (within ``restart_settle_ms``);
so a range's state is served only by the owner the newest view names, never from an older
copy. A node that crashed serves nothing it restored until every owner that could have
taken it over was heard, and counts it lost if one of them was left out.
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
