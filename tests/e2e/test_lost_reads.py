"""Reads never serve a lost slot as empty: with more adjacent nodes killed than the
replication factor, ``smr dump``, ``smr query`` and a program's ``get``, ``get_many`` and
``scan`` refuse the slots whose state is gone, naming them, unless the caller asks for a
partial answer by name (``--allow-lost``, ``allow_lost=True``), which then says what it
left out. Over real node processes, against plain Python's counts."""

from __future__ import annotations

import json
import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

import smr
from smr.client.control import Client
from tests.e2e.conftest import EXAMPLE_BOOKS, JOB, Cluster, word_counts

pytestmark = pytest.mark.e2e


def statuses(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The status of every node that answers, asked in process (a poll needs no CLI)."""
    client = Client(timeout_ms=1000)
    try:
        rows = client.status_each([node["addr"] for node in cluster.spec()["nodes"]])
    finally:
        client.close()
    return {row["node"]: row for row in rows.values() if isinstance(row, dict)}


def offline_slots(cluster: Cluster) -> int:
    """The slots the live nodes report offline (lost, not accepted)."""
    return sum(row.get("offline_slots", 0) for row in statuses(cluster).values())


def lose_a_range(cluster: Cluster) -> int:
    """Kill n1 and n2, ring neighbours (with r = 1 nobody else held n1's state), and wait
    for the taker to mark n1's range lost; how many slots it lost."""
    pids = {node["id"]: node["pid"] for node in cluster.spec()["nodes"]}
    for victim in ("n1", "n2"):
        os.kill(pids[victim], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (lost := offline_slots(cluster)) == 0:
        assert time.monotonic() < deadline, "no slot went offline after two adjacent kills"
        time.sleep(0.3)
    return lost


def read_dump(path: Path) -> dict[str, int]:
    return {
        record["key"]: record["state"]["count"]
        for record in map(json.loads, path.read_text(encoding="utf-8").splitlines())
    }


@pytest.mark.slow
def test_reads_of_lost_slots_are_refused_unless_a_partial_answer_is_asked_for(
    cluster: Cluster,
) -> None:
    cluster.up(4, JOB, "--replication", "1")
    cluster.feed(EXAMPLE_BOOKS[0])
    expected = word_counts(EXAMPLE_BOOKS[:1])
    lost = lose_a_range(cluster)
    where = ["--cluster", str(cluster.dir)]

    # smr dump: refused, one line naming the lost slots; no file is left.
    out = cluster.dir / "dump.jsonl"
    refused = cluster.smr("dump", *where, "--out", str(out), check=False)
    assert refused.returncode == 2, refused
    assert refused.stderr.count("\n") == 1 and f"{lost:,} slots are lost" in refused.stderr
    assert "--allow-lost" in refused.stderr and not out.exists()

    # smr dump --allow-lost: every key it keeps is exact, the rest is named as left out.
    partial = cluster.smr("dump", *where, "--out", str(out), "--allow-lost", check=False)
    assert partial.returncode == 1 and f"left out {lost:,} lost slots" in partial.stderr
    kept = read_dump(out)
    assert kept and all(count == expected[word] for word, count in kept.items())
    missing = sorted(set(expected) - set(kept))
    assert missing, "the dump kept every key, though a range was lost"

    # smr query of a key in a lost slot: refused; with --allow-lost, null and a warning.
    word = missing[0]
    refused = cluster.smr("query", *where, word, check=False)
    assert refused.returncode == 2 and "is lost" in refused.stderr, refused
    partial = cluster.smr("query", *where, word, "--allow-lost", check=False)
    assert partial.returncode == 1 and json.loads(partial.stdout)["state"] is None
    assert "lost" in partial.stderr
    present = next(iter(kept))

    # A program: get, get_many and scan raise SlotsLost naming the slots, or, asked for a
    # partial answer, give it and say which lost slots it skipped.
    with smr.connect(cluster.dir) as connection:
        with pytest.raises(smr.SlotsLost) as raised:
            connection.get(word)
        assert raised.value.slots and f"slot {connection.owner_of(word)[1]}" in str(raised.value)
        with pytest.raises(smr.SlotsLost):
            connection.get_many([present, word])
        with pytest.raises(smr.SlotsLost) as raised:
            list(connection.scan())
        assert len(raised.value.slots) == lost
        assert connection.get(present) == {"count": expected[present]}
        with pytest.warns(smr.LostSlotsSkipped):
            states = connection.get_many([present, word], allow_lost=True)
        assert states == {present: {"count": expected[present]}, word: None}
        assert connection.skipped_lost_slots == {connection.owner_of(word)[1]}
        with pytest.warns(smr.LostSlotsSkipped):
            scanned = dict(connection.scan(allow_lost=True))
        assert {key: state["count"] for key, state in scanned.items()} == kept
        assert len(connection.skipped_lost_slots) == lost
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert connection.get(present) == {"count": expected[present]}
        assert connection.skipped_lost_slots == frozenset()


@pytest.mark.slow
def test_a_restart_from_disk_keeps_the_loss_loud_and_the_only_copy_on_disk(
    cluster: Cluster,
) -> None:
    data_dir = cluster.dir.parent / "data"
    cluster.up(4, JOB, "--replication", "1", "--data-dir", str(data_dir))
    cluster.feed(EXAMPLE_BOOKS[0])
    expected = word_counts(EXAMPLE_BOOKS[:1])
    # n1's keys reach its disk with its next checkpoint (the one copy a restart can find).
    deadline = time.monotonic() + 10
    while statuses(cluster)["n1"]["disk_log_bytes"] < 10_000:
        assert time.monotonic() < deadline, "n1 wrote none of its keys to disk"
        time.sleep(0.3)
    lost = lose_a_range(cluster)
    # Let the taker write the range it took, with its loss marks, to disk.
    time.sleep(1.5)
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    # n1's files: the only copy of the lost range's state.
    n1_files = {path.name: path.read_bytes() for path in (data_dir / "n1").glob("*.smr")}
    assert any(len(data) > 10_000 for data in n1_files.values()), n1_files.keys()
    cluster.smr("cluster", "up", "--dir", str(cluster.dir), "--job", JOB)
    where = ["--cluster", str(cluster.dir)]

    # The loss is still there, loud: status (and the metric it shares), recover.
    deadline = time.monotonic() + 20
    while (rows := statuses(cluster)).get("n1", {}).get("role") != "fenced":
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)
    assert sum(row.get("offline_slots", 0) for row in rows.values()) == lost
    status = cluster.smr("status", *where, check=False)
    assert status.returncode == 1 and "lost their state" in status.stderr, status
    shown = cluster.smr("recover", *where, check=False)
    assert shown.returncode == 1 and f"{lost} slots offline" in shown.stdout, shown

    # Reads refuse the lost slots; asked for a partial answer, every key kept is exact.
    with smr.connect(cluster.dir) as connection:
        with pytest.raises(smr.SlotsLost):
            list(connection.scan())
        with pytest.warns(smr.LostSlotsSkipped):
            kept = {key: state["count"] for key, state in connection.scan(allow_lost=True)}
    assert kept and all(count == expected[word] for word, count in kept.items())
    word = sorted(set(expected) - set(kept))[0]
    # A tuple for a lost slot is refused, not counted from zero.
    fed = cluster.feed("-", extra=["--no-combine"], input_text=word + "\n", check=False)
    assert fed.returncode != 0 and "was lost" in fed.stderr, fed
    assert cluster.smr("query", *where, word, check=False).returncode == 2

    # The fenced n1 rewrote its data directory (a new generation, standby and empty), but
    # kept every byte of the generation it served (the only copy of the lost range; its log
    # may have grown by the checkpoints n1 took after the restore, before its fence).
    (served,) = (name for name in n1_files if name.startswith("snapshot-"))
    generation = int(served.removeprefix("snapshot-").removesuffix(".smr"))
    deadline = time.monotonic() + 10
    while (n1 := statuses(cluster)["n1"])["disk_generation"] <= generation:
        assert time.monotonic() < deadline, "n1 wrote no new generation after its fence"
        time.sleep(0.3)
    assert n1["disk_fenced_kept"], "n1's status does not say it kept a fenced generation"
    held = [(path.name, path.read_bytes()) for path in (data_dir / "n1").rglob("*.smr")]
    for name, data in n1_files.items():
        if name.startswith("manifest-"):
            # A manifest is replaced whole at each checkpoint n1 took before its fence.
            assert any(n == name for n, _ in held), name
            continue
        assert any(n == name and now.startswith(data) for n, now in held), name

    # Only the operator's word brings the slots back, empty.
    accepted = cluster.smr("recover", *where, "--accept-loss")
    assert f"{lost} slots back, empty" in accepted.stdout
    assert offline_slots(cluster) == 0
    cluster.feed("-", extra=["--no-combine"], input_text=word + "\n")
    assert json.loads(cluster.smr("query", *where, word).stdout)["state"] == {"count": 1}


@pytest.mark.slow
def test_lost_slots_stay_lost_when_the_range_holding_them_moves(cluster: Cluster) -> None:
    cluster.up(5, JOB, "--replication", "1")
    cluster.feed(EXAMPLE_BOOKS[0])
    expected = word_counts(EXAMPLE_BOOKS[:1])
    lost = lose_a_range(cluster)
    # n3 took both ranges over; it leaves, so its whole range (the lost slots with it)
    # moves to n4, which must refuse them as n3 did.
    deadline = time.monotonic() + 30
    while statuses(cluster)["n3"]["under_replicated_slots"] > 0:
        assert time.monotonic() < deadline, "n3's range was never copied to n4"
        time.sleep(0.3)
    cluster.smr("scale", "in", "--cluster", str(cluster.dir), "n3")
    rows = statuses(cluster)
    assert set(rows) == {"n0", "n4"} and rows["n4"]["offline_slots"] == lost
    assert rows["n0"]["offline_slots"] == 0
    with smr.connect(cluster.dir) as connection:
        with pytest.raises(smr.SlotsLost) as raised:
            list(connection.scan())
        assert len(raised.value.slots) == lost
        with pytest.warns(smr.LostSlotsSkipped):
            kept = {key: state["count"] for key, state in connection.scan(allow_lost=True)}
    assert kept and all(count == expected[word] for word, count in kept.items())
    word = sorted(set(expected) - set(kept))[0]
    fed = cluster.feed("-", extra=["--no-combine"], input_text=word + "\n", check=False)
    assert fed.returncode != 0 and "was lost" in fed.stderr, fed
