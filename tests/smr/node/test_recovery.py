"""What the recovery offers the other roles (``smr.node.recovery``): when this node was
fenced, its takeover report, its own health; and the takeover taking the dead node's copies
from the replication by its named method (``Replication.surrender``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from smr.ring.view import Status
from tests.smr.node.secondary import A, B, Secondary


def test_a_fenced_node_says_since_when(tmp_path: Path) -> None:
    node = Secondary(tmp_path)
    core = node.core
    assert core.recovery.fenced_since() is None
    me = core.view.members[A]
    core.set_view(core.view.with_member(replace(me, status=Status.DEAD, version=me.version + 1)))
    assert core.recovery.fenced_since() is not None
    assert core.incarnation == me.incarnation + 1 and core.seat().incarnation == core.incarnation
    assert core.ring.range_of(A) is None


def test_a_takeover_promotes_the_surrendered_copy_and_is_reported(tmp_path: Path) -> None:
    node = Secondary(tmp_path)
    core = node.core
    keys = node.other_keys[:3]
    node.deliver(node.batch_frames(1, [(k, 1) for k in keys]))
    assert core.recovery.report() == {"takeover_records": [], "takeover_seconds": 0.0}
    core.recovery.take_over(B)
    (record,) = core.recovery.report()["takeover_records"]
    assert record["dead"] == B and record["tuples_replayed"] == 3
    assert all(node.state(k) == {"count": 1} for k in keys)
    assert core.replication.copies() == [] and core.recovery.local_health() >= 0
