"""A state file damaged while the cluster is down, over real node processes: the newest log
cut at a record boundary (so every record left reads whole), cut to 0 bytes, removed, the
snapshot removed, or the node's whole folder. Each once restarted in part and in silence
(``up``, ``status`` and ``dump`` exiting 0 with keys missing); now the node's manifest
(``smr.node.disk``) tells what its generation must hold, a node writes a generation before
it first answers (so a folder without one lost it: ``smr.cluster.local.state_missing``), and the
restart is refused with one line naming the node and the file."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from smr.checkpoint.records import decode_records, encode_record
from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts

pytestmark = pytest.mark.e2e

VICTIM = "n1"


def _cut_at_half_its_records(log: Path) -> str:
    records = decode_records(log.read_bytes())
    assert len(records) >= 2, f"{log} holds {len(records)} records: nothing to cut"
    kept = b"".join(encode_record(record) for record in records[: len(records) // 2])
    log.write_bytes(kept)
    return str(log)


def _damage(data_dir: Path, damage: str) -> str:
    """Damage the victim's newest generation; the path of the file damaged."""
    node_dir = data_dir / VICTIM
    (log,) = node_dir.glob("log-*.smr")
    (snapshot,) = node_dir.glob("snapshot-*.smr")
    if damage == "log cut at a record boundary":
        return _cut_at_half_its_records(log)
    if damage == "log cut to 0 bytes":
        assert log.stat().st_size > 0
        log.write_bytes(b"")
        return str(log)
    if damage == "log removed":
        assert log.stat().st_size > 0
        log.unlink()
        return str(log)
    if damage == "snapshot removed":
        snapshot.unlink()
        return str(snapshot)
    assert damage == "node's folder removed"
    shutil.rmtree(node_dir)
    return str(node_dir)


def _missing_or_wrong(cluster: Cluster, expected: dict[str, int]) -> int:
    counts = cluster.counts()
    return sum(1 for word, count in expected.items() if counts.get(word) != count)


def _files_of(data_dir: Path) -> dict[str, bytes]:
    """Every file under ``data_dir`` by its relative path, with its bytes."""
    return {
        str(path.relative_to(data_dir)): path.read_bytes()
        for path in sorted(data_dir.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize(
    "damage",
    [
        "log cut at a record boundary",
        # The same refusal as a cut (the manifest's log length), each in the unit tests too.
        pytest.param("log cut to 0 bytes", marks=pytest.mark.slow),
        pytest.param("log removed", marks=pytest.mark.slow),
        "snapshot removed",
        "node's folder removed",
    ],
)
@pytest.mark.slow
def test_a_state_file_damaged_at_a_boundary_refuses_the_restart_naming_it(
    cluster: Cluster, damage: str
) -> None:
    data_dir = cluster.dir.parent / "data"
    cluster.up(
        3,
        "examples.wordcount:job",
        "--replication",
        "1",
        "--data-dir",
        str(data_dir),
        # Checkpoints often, so that the log holds several to cut.
        "--checkpoint-interval-ms",
        "200",
    )
    cluster.feed(EXAMPLE_BOOKS[0], extra=["--no-combine", "--batch-size", "500"])
    expected = word_counts(EXAMPLE_BOOKS[:1])
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    damaged = _damage(data_dir, damage)
    files_before = _files_of(data_dir)
    result = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--job", "examples.wordcount:job", check=False
    )
    if result.returncode == 0:
        wrong = _missing_or_wrong(cluster, expected)
        pytest.fail(
            f"{damage}: the restart went on, {wrong} of {len(expected)} keys missing or wrong"
        )
    said = result.stdout + result.stderr
    assert f"{VICTIM}: {damaged}" in said, said
    assert "refusing to restore in part" in said, said
    # Refused before any node started: no node wrote, fenced or took over on any disk.
    assert _files_of(data_dir) == files_before
    # No node was left serving, and status names the node that refused and the file.
    status = cluster.smr("status", "--cluster", str(cluster.dir), check=False)
    assert status.returncode != 0
    assert f"{VICTIM}: {damaged}" in status.stderr, status.stderr


@pytest.mark.slow  # about 30 s: the failure detector's grace for a node never heard
def test_a_node_left_out_of_a_restart_has_its_range_marked_lost_loudly(cluster: Cluster) -> None:
    """The way past a refused node (``up --without``): its successor takes its range over as
    from a dead node, and with no copy on disk the range is marked lost, never served empty:
    ``status`` and ``recover`` say so and exit 1."""
    data_dir = cluster.dir.parent / "data"
    cluster.up(3, "examples.wordcount:job", "--replication", "1", "--data-dir", str(data_dir))
    cluster.feed(EXAMPLE_BOOKS[0], extra=["--no-combine"])
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    shutil.rmtree(data_dir / VICTIM)
    tokens = sorted(node["token"] for node in cluster.spec()["nodes"])
    (victim,) = (node for node in cluster.spec()["nodes"] if node["id"] == VICTIM)
    after = tokens[tokens.index(victim["token"]) + 1]  # n1 is not the last on the ring
    up = cluster.smr(
        "cluster",
        "up",
        "--dir",
        str(cluster.dir),
        "--job",
        "examples.wordcount:job",
        "--without",
        VICTIM,
    )
    assert f"{VICTIM}  " in up.stdout and "not started (--without)" in up.stdout
    assert f"{VICTIM} left out" in up.stderr
    deadline = time.monotonic() + 30
    while sum(row.get("offline_slots") or 0 for row in cluster.status().values()) == 0:
        assert time.monotonic() < deadline, cluster.status()
        time.sleep(0.5)
    rows = cluster.status()
    assert sum(row.get("offline_slots") or 0 for row in rows.values()) == after - victim["token"]
    status = cluster.smr("status", "--cluster", str(cluster.dir), check=False)
    assert status.returncode == 1 and "lost their state" in status.stderr, status.stderr
    recover = cluster.smr("recover", "--cluster", str(cluster.dir), check=False)
    assert recover.returncode == 1 and "slots offline (state lost)" in recover.stdout
