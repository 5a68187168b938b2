"""The snapshots (``smr.node.snapshots``) alone, through what they receive
(``SnapshotsNode``): a replica still without a complete snapshot is asked for again, once
``SNAPSHOT_RETRY_S`` passed since the last ask, and a complete one is not."""

from __future__ import annotations

from types import SimpleNamespace

from smr.checkpoint.ids import CheckpointNumber
from smr.checkpoint.replica import PeerReplica
from smr.node.snapshots import SNAPSHOT_RETRY_S, Snapshots
from smr.ring.ids import NodeId
from smr.wire.peer import SnapshotRequest
from tests.smr.node.fakes import FakeNode, three_node_view

C = NodeId("c")


def _snapshots(replica: PeerReplica) -> tuple[FakeNode, Snapshots]:
    node = FakeNode(three_node_view())
    node.replication = SimpleNamespace(copies=lambda: [(C, replica)])  # type: ignore[attr-defined]
    return node, Snapshots(node)  # type: ignore[arg-type]


def test_an_incomplete_snapshot_is_asked_for_again_after_the_retry_interval() -> None:
    replica = PeerReplica()
    assert replica.needs_snapshot
    node, snapshots = _snapshots(replica)
    snapshots.rerequest(0.0)
    assert [peer for peer, _ in node.sent_of(SnapshotRequest)] == [C]
    snapshots.rerequest(SNAPSHOT_RETRY_S / 2)
    assert len(node.sent_of(SnapshotRequest)) == 1, "not again before the retry interval"
    snapshots.rerequest(SNAPSHOT_RETRY_S)
    assert len(node.sent_of(SnapshotRequest)) == 2


def test_a_complete_replica_is_not_asked_for_a_snapshot() -> None:
    replica = PeerReplica()
    replica.begin_snapshot(CheckpointNumber(0))
    replica.end_snapshot()
    assert replica.is_complete and not replica.needs_snapshot
    node, snapshots = _snapshots(replica)
    snapshots.rerequest(SNAPSHOT_RETRY_S * 3)
    assert not node.sent
