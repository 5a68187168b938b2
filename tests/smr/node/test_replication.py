"""What the replication offers the other roles (``smr.node.replication``), asked through its
named methods: the takeover's ``surrender``, the move's ``split_off`` and the checks of a
complete replica, the snapshots' coverage. Node a backs up b (r = 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.checkpoint.ids import CheckpointNumber
from smr.ring.ids import Slot
from tests.smr.node.secondary import A, B, Secondary


@pytest.fixture
def node(tmp_path: Path) -> Secondary:
    return Secondary(tmp_path)


def test_a_replica_complete_from_the_start_covers_its_primarys_range(node: Secondary) -> None:
    replication = node.core.replication
    assert node.core.predecessors == (B,)
    assert replication.has_complete_replica(B)
    assert replication.has_complete_replica(B, node.b_range)
    assert not replication.has_complete_replica(B, node.core.ring.range_of(A))
    assert not replication.has_complete_replica(A)
    assert replication.caught_up_with((B,)) and not replication.caught_up_with((A, B))
    assert replication.last_checkpoint_of(B) == CheckpointNumber(0)
    assert replication.replica_checkpoint(A) is None


def test_surrender_gives_up_the_replica_backup_and_coverage_of_the_dead(node: Secondary) -> None:
    node.deliver(node.batch_frames(1, [(k, 1) for k in node.other_keys[:3]]))
    replication = node.core.replication
    assert replication.backup_bytes > 0
    (copy,) = replication.surrender(B)
    assert copy.absorber == B and copy.covered == node.b_range
    assert copy.backup is not None and copy.backup.batch_count == 1
    assert replication.backup_bytes == 0 and replication.copies() == []
    assert not replication.has_complete_replica(B)
    (empty,) = replication.surrender(B)  # nothing left: an empty copy covering nothing
    assert empty.covered is None and empty.backup is None


def test_split_off_takes_the_moving_slots_out_of_the_replica_and_backup(node: Secondary) -> None:
    keys = node.other_keys[:6]
    node.deliver(node.batch_frames(1, [(k, 1) for k in keys[:1]]))
    replication = node.core.replication
    moving = {Slot(s) for s in node.b_range.slots()}
    moved = replication.split_off(B, moving)
    assert moved.backup is not None and moved.backup.batch_count == 1
    assert replication.backup_bytes == 0


def test_coverage_is_forgotten_and_noted_by_the_snapshots_calls(node: Secondary) -> None:
    replication = node.core.replication
    replication.forget_coverage(B)
    assert replication.has_complete_replica(B) and not replication.has_complete_replica(
        B, node.b_range
    )
    replication.note_covered(B, node.b_range)
    assert replication.has_complete_replica(B, node.b_range)
    assert replication.snapshot_target(B, predecessor=True) is replication.copies()[0][1]
    assert replication.snapshot_target(A, predecessor=False) is None
    assert replication.incoming_copy(B) is None
    assert node.core.checkpoints.last_checkpoint_number() == CheckpointNumber(0)
