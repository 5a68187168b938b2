"""The orphan copies a secondary keeps (``smr.node.orphans``): surrendered to a takeover of
their absorber, by name; superseded once the absorber re-replicated them (the replica goes,
a backup holding batches stays until covered); dropped when their absorber stops being a
predecessor."""

from __future__ import annotations

from smr.checkpoint.replica import PeerReplica
from smr.node.orphans import Orphan, Orphans, moved_name
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import SlotRange

A, B, C = NodeId("a"), NodeId("b"), NodeId("c")
RANGE = SlotRange(Slot(0), 16, 256)


def test_a_takeover_of_the_absorber_gets_its_orphans_by_name_and_no_other() -> None:
    orphans = Orphans()
    orphans.keep(NodeId("z"), Orphan(A, PeerReplica(), None, RANGE))
    orphans.keep(NodeId("y"), Orphan(A, PeerReplica(), None, None))
    orphans.keep(NodeId("x"), Orphan(B, PeerReplica(), None, RANGE))
    assert [o.covered for o in orphans.absorbed_by(A)] == [None, RANGE]  # y, then z
    taken = orphans.surrender(A)
    assert [o.covered for o in taken] == [None, RANGE] and len(orphans) == 1
    assert orphans.surrender(A) == []


def test_a_superseded_orphan_without_batches_goes_and_others_follow_the_predecessors() -> None:
    orphans = Orphans()
    orphans.keep(NodeId("z"), Orphan(A, PeerReplica(), None, RANGE))
    orphans.keep(NodeId("x"), Orphan(B, PeerReplica(), None, RANGE))
    orphans.supersede(A)  # a's snapshot to us ended: no backup to keep, so it goes
    assert orphans.absorbed_by(A) == [] and len(orphans) == 1
    orphans.keep_only_absorbed_by([C])  # b is no longer a predecessor
    assert len(orphans) == 0


def test_a_moved_range_is_kept_under_a_name_no_node_has() -> None:
    name = moved_name(A, B, RANGE)
    assert name == "a>b@0+16" and name not in (A, B, C)
