"""A restart from disk of a local cluster (``smr.cluster.local.up``), decided before any node
starts: a node whose folder holds no state while the others hold theirs is refused, naming
it, unless ``without`` leaves it out; ``without`` must name nodes of the cluster, leave one
to start, and is refused for a cluster with no state on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.checkpoint.store import StateStore
from smr.cluster import local as local_cluster
from smr.cluster.ports import plan_cluster
from smr.node.disk import DiskState
from smr.ring.ids import Slot
from smr.ring.placement import SlotRange
from smr.spec.model import DATA_DIR_KEY, ClusterError
from smr.spec.parse import write_spec

JOB = "examples.wordcount:job"


def stopped_cluster_with_state(tmp_path: Path, having: list[str]) -> Path:
    """A stopped cluster of 3 nodes whose data directory holds state for ``having``."""
    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    spec = plan_cluster(3, 1, JOB, 8, 1000, [])
    data_dir = tmp_path / "data"
    spec.extra[DATA_DIR_KEY] = str(data_dir)
    write_spec(cluster_dir, spec)
    for node_id in having:
        disk = DiskState(data_dir / node_id, spec.incarnation)
        disk.write_snapshot(StateStore(), spec.initial_view(), SlotRange(Slot(0), 256, 256))
        disk.close()
    return cluster_dir


def test_a_node_without_state_among_nodes_with_state_is_refused_by_name(tmp_path: Path) -> None:
    cluster_dir = stopped_cluster_with_state(tmp_path, ["n0", "n2"])
    assert local_cluster.state_missing(local_cluster.read_spec(cluster_dir)) == {
        "n1": (
            f"n1: {tmp_path / 'data' / 'n1'} holds no state, though n0, n2 hold theirs "
            "(removed, or moved aside?); refusing to restore in part: put its files back"
        )
    }
    with pytest.raises(ClusterError, match=r"^n1: .*data/n1 holds no state"):
        local_cluster.up(cluster_dir, 3, 1, JOB)


@pytest.mark.parametrize(
    ("without", "said"),
    [
        (["n9"], "--without n9: no such node in this cluster"),
        (["n0", "n1", "n2"], "--without leaves no node to start"),
    ],
)
def test_without_names_nodes_of_the_cluster_and_leaves_one(
    tmp_path: Path, without: list[str], said: str
) -> None:
    cluster_dir = stopped_cluster_with_state(tmp_path, ["n0", "n2"])
    with pytest.raises(ClusterError, match=f"^{said}$"):
        local_cluster.up(cluster_dir, 3, 1, JOB, without=without)


def test_without_is_refused_for_a_cluster_with_no_state_on_disk(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="--without leaves nodes out of a restart from disk"):
        local_cluster.up(tmp_path / "new", 3, 1, JOB, without=["n1"])
    assert not (tmp_path / "new").exists()


def test_a_damaged_node_is_refused_by_name_before_any_node_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster_dir = stopped_cluster_with_state(tmp_path, ["n0", "n1", "n2"])
    (tmp_path / "data" / "n1" / "log-1.smr").unlink()
    (tmp_path / "data" / "n1" / "snapshot-1.smr").unlink()
    started: list[str] = []
    monkeypatch.setattr(local_cluster, "spawn_node", lambda _dir, node: started.append(node))
    with pytest.raises(ClusterError, match=r"^n1: .*data/n1/snapshot-1.smr is missing"):
        local_cluster.up(cluster_dir, 3, 1, JOB)
    assert started == []


def test_the_nodes_left_out_are_written_for_the_nodes_before_any_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster_dir = stopped_cluster_with_state(tmp_path, ["n0", "n1", "n2"])
    seen: list[frozenset[str]] = []

    def start(cluster: Path, node: str) -> None:
        seen.append(local_cluster.read_spec(cluster).restart_left_out())
        raise ClusterError("stop here")

    monkeypatch.setattr(local_cluster, "spawn_node", start)
    with pytest.raises(ClusterError, match="stop here"):
        local_cluster.up(cluster_dir, 3, 1, JOB, without=["n2"])
    assert seen == [frozenset({"n2"})]
    with pytest.raises(ClusterError, match="stop here"):
        local_cluster.up(cluster_dir, 3, 1, JOB)  # all of them: none left out any more
    assert seen[-1] == frozenset()
