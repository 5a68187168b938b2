"""A node revived from an older disk never serves its stale state as current, over real node
processes: n1 is SIGKILLed and taken over by n2, more is fed, the cluster stops, n2's newest
log is damaged, and the cluster comes back without n2. n1's files hold its range as it was
when it died; the ring's view, which each node's manifest records at every checkpoint, says
n1 was taken over. So n1 fences itself, n2's range (n1's with it) goes to its successor,
which holds no copy of it on disk and marks it lost: ``status`` and reads say so, and no
read ever answers the counts n1 held when it died (before, n1 restored the view of its own
snapshot, owned its old range again, and served them as current). A refused restart starts
no node, so n1's fence is seen at the restart that runs."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from smr.checkpoint.records import decode_records, encode_record
from smr.ring.hashing import slot_of
from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOB = "examples.wordcount:job"
SLOT_BITS = 14


def _wait_status(
    cluster: Cluster, done: Callable[[dict[str, dict[str, Any]]], bool], timeout_s: float = 45
) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while not done(rows := cluster.status()):
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)
    return rows


def _cut_newest_log(node_dir: Path) -> Path:
    (log,) = node_dir.glob("log-*.smr")
    records = decode_records(log.read_bytes())
    assert records, f"{log} holds no checkpoint to cut"
    log.write_bytes(b"".join(encode_record(r) for r in records[: len(records) // 2]))
    return log


def _owner_of(spec: dict[str, Any], slot: int) -> str:
    """The node whose token is the greatest at or below ``slot`` in the spec's ring."""
    nodes = sorted(spec["nodes"], key=lambda node: node["token"])
    below = [node for node in nodes if node["token"] <= slot]
    return str((below or nodes)[-1]["id"])


def _revive_a_stale_node(cluster: Cluster) -> tuple[list[str], dict[str, int], dict[str, int]]:
    """The scenario up to the restart without n2: the words of n1's old range the second
    feed changed, the true counts, and the counts n1's disk holds."""
    data_dir = cluster.dir.parent / "data"
    cluster.up(
        4,
        JOB,
        "--replication",
        "1",
        "--data-dir",
        str(data_dir),
        "--checkpoint-interval-ms",
        "200",
    )
    cluster.feed(EXAMPLE_BOOKS[0], extra=["--no-combine"])
    stale = word_counts(EXAMPLE_BOOKS[:1])
    spec = cluster.spec()
    victim, taker = "n1", "n2"
    assert [n["id"] for n in sorted(spec["nodes"], key=lambda n: n["token"])] == [
        "n0",
        "n1",
        "n2",
        "n3",
    ]
    os.kill(next(n["pid"] for n in spec["nodes"] if n["id"] == victim), signal.SIGKILL)
    _wait_status(cluster, lambda rows: rows[taker].get("takeovers", 0) >= 1)
    cluster.feed(*EXAMPLE_BOOKS[1:], extra=["--no-combine"])
    current = word_counts(EXAMPLE_BOOKS)
    # Words of n1's old range whose count the second feed changed: n1's disk holds them stale.
    # Words n1 held (with a stale count) first, then words new since n1 died.
    changed = sorted(
        (
            word
            for word, count in current.items()
            if _owner_of(spec, slot_of(word, SLOT_BITS)) == victim and stale.get(word) != count
        ),
        key=lambda word: (word not in stale, word),
    )
    assert len(changed) > 50, "the second feed changed too few words of n1's range"
    time.sleep(1.0)  # a few checkpoints: every node's manifest records the view
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    damaged = _cut_newest_log(data_dir / taker)
    refused = cluster.smr("cluster", "up", "--dir", str(cluster.dir), "--job", JOB, check=False)
    assert refused.returncode != 0 and str(damaged) in refused.stdout + refused.stderr
    cluster.smr("cluster", "up", "--dir", str(cluster.dir), "--job", JOB, "--without", taker)
    return changed, current, stale


def test_a_node_revived_from_an_older_disk_never_serves_its_stale_counts(
    cluster: Cluster,
) -> None:
    changed, current, stale = _revive_a_stale_node(cluster)
    # From the first read on, a word of n1's old range is never answered with n1's stale
    # count: refused as lost, or exact.
    where = ("--cluster", str(cluster.dir))
    deadline = time.monotonic() + 40
    lost_seen = False
    while time.monotonic() < deadline and not lost_seen:
        for word in changed[:5]:
            answer = cluster.smr("query", *where, word, check=False)
            if answer.returncode == 0:
                state = json.loads(answer.stdout)["state"]
                count = None if state is None else state["count"]
                assert count == current[word], (
                    f"{word}: served {count} (n1's stale count is {stale.get(word)}, the "
                    f"true one {current[word]})"
                )
            else:
                assert answer.returncode == 2 and "lost" in answer.stderr, answer
                lost_seen = True
        time.sleep(0.3)
    assert lost_seen, "n1's old range was neither lost nor exact within 40 s"
    _wait_status(
        cluster, lambda rows: sum(row.get("offline_slots") or 0 for row in rows.values()) > 0
    )
    status = cluster.smr("status", *where, check=False)
    assert status.returncode == 1 and "lost their state" in status.stderr, status.stderr
    # A partial dump names what it left out, and keeps no stale count.
    out = cluster.dir / "partial.jsonl"
    partial = cluster.smr("dump", *where, "--out", str(out), "--allow-lost", check=False)
    assert partial.returncode == 1 and "lost slots" in partial.stderr, partial.stderr
    dumped = {
        (record := json.loads(line))["key"]: record["state"]["count"]
        for line in out.read_text(encoding="utf-8").splitlines()
    }
    wrong = {word: count for word, count in dumped.items() if count != current.get(word)}
    assert not wrong, f"{len(wrong)} keys served with a count that is not current: {wrong}"
    assert not set(changed) & set(dumped)
    # n1 learned it was taken over, and fenced (its role is serving again once it rejoins,
    # 30 s after its fence: the counter says it), keeping the generation it served.
    rows = _wait_status(cluster, lambda rows: rows["n1"].get("fenced", 0) >= 1)
    assert rows["n1"]["disk_fenced_kept"] == ["fenced-1"], rows["n1"]


def test_a_crashed_node_whose_only_taker_is_left_out_counts_its_state_lost(
    cluster: Cluster,
) -> None:
    """Two nodes, r = 1: n1 is SIGKILLed and taken over by n0, more is fed, the cluster
    stops, n0's newest log is damaged, and the cluster comes back without n0. Nothing that
    comes back knows n1 was taken over: n1's disk holds no clean stop, and its only
    secondary, n0, is left out, so n1 counts its whole range lost (kept on disk, not served)
    and, holding no trusted copy of n0's range, takes it over lost too: every read is
    refused, nothing is answered from n1's older state (before, n1 served it as current)."""
    data_dir = cluster.dir.parent / "data"
    cluster.up(2, JOB, "--replication", "1", "--data-dir", str(data_dir))
    cluster.feed(EXAMPLE_BOOKS[0], extra=["--no-combine"])
    spec = cluster.spec()
    os.kill(next(n["pid"] for n in spec["nodes"] if n["id"] == "n1"), signal.SIGKILL)
    _wait_status(cluster, lambda rows: rows["n0"].get("takeovers", 0) >= 1)
    cluster.feed(*EXAMPLE_BOOKS[1:], extra=["--no-combine"])
    current = word_counts(EXAMPLE_BOOKS)
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    _cut_newest_log(data_dir / "n0")
    cluster.smr("cluster", "up", "--dir", str(cluster.dir), "--job", JOB, "--without", "n0")
    rows = _wait_status(cluster, lambda rows: (rows["n1"].get("offline_slots") or 0) > 0)
    assert rows["n1"]["offline_slots"] == 2**SLOT_BITS, rows["n1"]  # the whole ring
    where = ("--cluster", str(cluster.dir))
    for word in sorted(current)[:5]:
        answer = cluster.smr("query", *where, word, check=False)
        assert answer.returncode == 2 and "lost" in answer.stderr, answer
    status = cluster.smr("status", *where, check=False)
    assert status.returncode == 1 and "lost their state" in status.stderr, status.stderr
    log = (cluster.dir / "logs" / "n1.log").read_text(encoding="utf-8")
    assert "this node crashed before the stop and n0" in log
