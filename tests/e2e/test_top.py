"""smr top over real nodes: every node's row in 80 columns, the lines below the table, and
the autoscaler's line only where a cluster directory can hold one."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_top_shows_every_node_within_80_columns(cluster: Cluster) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    cluster.feed(EXAMPLE_BOOKS[0])
    by_dir = cluster.smr(
        "top", "--cluster", str(cluster.dir), "--count", "2", "--interval-s", "0.3"
    ).stdout
    lines = by_dir.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    for node in ("n0", "n1", "n2"):
        assert any(line.split()[:2] == [node, "serving"] for line in lines if line.strip())
    header = " ".join(lines)
    for column in ("tuples/s", "inbox", "cpu%", "keys", "replicated", "moves"):
        assert column in header
    assert lines[-1] == "autoscaler: none has run on this cluster"
    seed = cluster.spec()["nodes"][1]["addr"].removeprefix("tcp://")
    by_seed = cluster.smr("top", "--cluster", seed, "--count", "1").stdout
    assert "n2" in by_seed and "autoscaler" not in by_seed


def test_top_names_a_cluster_that_is_not_there_in_one_line(cluster: Cluster) -> None:
    result = cluster.smr("top", "--cluster", str(cluster.dir / "nowhere"), check=False)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
