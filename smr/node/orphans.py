"""The orphan copies a secondary keeps (docs/design/architecture.md#state): copies of a dead
predecessor's range, or of a range that moved, whose new primary (the *absorber*) is another
predecessor of this node still re-replicating it here. Each is promoted if its absorber dies
first, superseded once the absorber's snapshot to this node ends, and dropped once the
absorber's checkpoints cover its backed-up batches.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from smr.checkpoint.backup import HwmFn, TupleBackup
from smr.checkpoint.replica import PeerReplica
from smr.ring.ids import NodeId
from smr.ring.placement import SlotRange


@dataclass(frozen=True)
class Orphan:
    """A copy of a dead node's state and tuples: kept until ``absorber``, which took over its
    range, has re-replicated that range to us, and promoted if ``absorber`` dies first.

    Once ``absorber``'s snapshot to us has ended, the copy is *superseded*: its replica is
    dropped, but its backed-up batches stay until ``absorber``'s checkpoints cover them
    (``Orphans.evict``). Until this node learned of the takeover, it filed the
    batches the mappers sent for ``absorber`` under the dead node; the snapshot may have
    been read before their tuples were applied, and then only this backup holds them."""

    absorber: NodeId
    replica: PeerReplica
    backup: TupleBackup | None
    covered: SlotRange | None
    """The range the replica's last complete snapshot copied (None: none completed)."""
    superseded: bool = False


class Orphans:
    """The orphan copies kept here, each by a name of its own (a dead node's id, or
    ``moved_name`` for a moved range)."""

    def __init__(self) -> None:
        self._by_name: dict[NodeId, Orphan] = {}

    def __len__(self) -> int:
        return len(self._by_name)

    def keep(self, name: NodeId, orphan: Orphan) -> None:
        """Keep ``orphan`` under ``name`` (replacing one of that name)."""
        self._by_name[name] = orphan

    def clear(self) -> None:
        """Drop every orphan copy (fencing)."""
        self._by_name.clear()

    def absorbed_by(self, absorber: NodeId) -> list[Orphan]:
        """The orphan copies ``absorber`` absorbed, by name (the order a takeover promotes
        them in)."""
        return [
            self._by_name[name]
            for name in sorted(self._by_name)
            if self._by_name[name].absorber == absorber
        ]

    def surrender(self, dead: NodeId) -> list[Orphan]:
        """Give up the orphan copies ``dead`` absorbed, by name, for its takeover."""
        absorbed = sorted(name for name, orphan in self._by_name.items() if orphan.absorber == dead)
        return [self._by_name.pop(name) for name in absorbed]

    def replicas(self) -> list[PeerReplica]:
        """The replicas of the orphan copies (status counts their hwm entries)."""
        return [orphan.replica for orphan in self._by_name.values()]

    def keep_only_absorbed_by(self, predecessors: Collection[NodeId]) -> None:
        """Drop the orphan copies whose absorber is no longer one of ``predecessors``."""
        for name in list(self._by_name):
            if self._by_name[name].absorber not in predecessors:
                del self._by_name[name]

    def supersede(self, absorber: NodeId) -> None:
        """``absorber``'s snapshot to us is complete: the state of the orphan copies it
        re-replicated is no longer the only copy we hold. Their replicas go; their backups
        stay, superseded, until ``absorber``'s checkpoints cover them (see ``Orphan``)."""
        for name, orphan in list(self._by_name.items()):
            if orphan.absorber != absorber:
                continue
            if orphan.backup is None or not orphan.backup.batches():
                del self._by_name[name]
            else:
                self._by_name[name] = Orphan(absorber, PeerReplica(), orphan.backup, None, True)

    def evict(self, primary: NodeId, hwm: HwmFn) -> None:
        """Evict against ``hwm`` the superseded orphan copies ``primary`` absorbed; an orphan
        copy whose backup is empty then goes."""
        for name, orphan in list(self._by_name.items()):
            if orphan.absorber != primary or not orphan.superseded:
                continue
            if orphan.backup is not None:
                orphan.backup.evict_covered(hwm)
            if orphan.backup is None or not orphan.backup.batches():
                del self._by_name[name]


def moved_name(giver: NodeId, receiver: NodeId, moved: SlotRange) -> NodeId:
    """The name an orphan copy of a moved range is kept under (never a node's own id)."""
    return NodeId(f"{giver}>{receiver}@{moved.start}+{moved.length}")
