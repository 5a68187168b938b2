"""Finished mappers retire their dedup memory, over real node processes: feeds that ended leave
no hwm entries behind once their lease ran out (primaries and replicas alike), a rerun of a
finished feed changes nothing and exits 0, a finished mapper id used for more tuples is
refused aloud, and a takeover after retirement keeps every count exact."""

from __future__ import annotations

import gzip
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import smr
from smr.mapper.emitter import DeliveryError
from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts

pytestmark = pytest.mark.e2e

LEASE_S = 1.0


def split_book(directory: Path, pieces: int) -> list[str]:
    """The first shipped book cut into ``pieces`` files of about equal length: each is a
    short feed of its own, with an id of its own."""
    with gzip.open(EXAMPLE_BOOKS[0], "rt", encoding="utf-8", errors="replace") as book:
        lines = book.read().splitlines()[:3000]
    size = len(lines) // pieces + 1
    paths = []
    for index in range(pieces):
        path = directory / f"piece{index}.txt"
        path.write_text("\n".join(lines[index * size : (index + 1) * size]) + "\n")
        paths.append(str(path))
    return paths


def wait_status(cluster: Cluster, done: Any, timeout_s: float = 20) -> dict[str, Any]:
    """Poll every node's status until ``done(rows)`` holds; fail with the rows otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = cluster.status()
        if done(rows):
            return rows
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)


def retired_everywhere(feeds: int) -> Any:
    def done(rows: dict[str, dict[str, Any]]) -> bool:
        serving = [row for row in rows.values() if row.get("slots_owned")]
        # Each node retires the mappers that wrote to it, and keeps no hwm of them.
        return (
            bool(serving)
            and all(row["hwm_entries"] == 0 for row in serving)
            and (max(row["mappers_retired"] for row in serving) >= feeds)
        )

    return done


@pytest.mark.slow
def test_finished_feeds_leave_no_hwms_and_a_rerun_changes_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1", "--mapper-lease-s", "1")
    pieces = split_book(tmp_path, 5)
    for piece in pieces:
        cluster.feed(piece, extra=["--no-combine"])
    rows = cluster.status()
    assert sum(row["hwm_entries"] for row in rows.values()) > 0
    assert all(row["mappers_finishing"] + row["mappers_retired"] == 5 for row in rows.values())
    # After the lease and a checkpoint, neither the primaries nor their replicas hold any.
    rows = wait_status(cluster, retired_everywhere(5))
    assert sum(row["retired_hwms_dropped"] for row in rows.values()) > 0
    expected = word_counts(pieces)
    assert cluster.counts() == expected
    # A rerun of a finished feed sends the same tuples under the same id: all duplicates.
    rerun = cluster.feed(pieces[2], extra=["--no-combine"])
    assert "nothing new" in rerun.stdout + rerun.stderr
    rows = cluster.status()
    assert sum(row["batches_of_finished_mappers"] for row in rows.values()) > 0
    assert all(row["hwm_entries"] == 0 for row in rows.values())
    assert cluster.counts() == expected


@pytest.mark.slow
def test_a_finished_mapper_id_used_for_more_tuples_is_refused(cluster: Cluster) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1", "--mapper-lease-s", "1")
    with smr.connect(cluster.dir) as first:
        mapper_id = first.mapper_id
        first.emit_many([("alpha", 1)] * 50)
    # Its id again, resumed from the start with the same 50 tuples: they were delivered,
    # the nodes ack them. (Without a position, the connection is refused before it sends:
    # tests/e2e/test_stream_identity.py.)
    with smr.connect(cluster.dir, mapper_id=mapper_id, position=0) as again:
        again.emit_many([("alpha", 1)] * 50)
    wait_status(cluster, retired_everywhere(1))
    # Retired, its hwms gone, the id still has a history: a new stream under it is refused.
    with (
        smr.connect(cluster.dir, mapper_id=mapper_id) as new_stream,
        pytest.raises(smr.MapperIdReused, match=r"\(finished at seq 50\)"),
    ):
        new_stream.emit("alpha", 1)
    # And with more: refused aloud at intake, nothing applied.
    reused = smr.connect(cluster.dir, mapper_id=mapper_id, position=0)
    try:
        with pytest.raises(DeliveryError, match="said it had finished at seq 50"):
            reused.emit_many([("alpha", 1)] * 60)
            reused.flush()
    finally:
        reused.abort()
    rows = cluster.status()
    assert sum(row["batches_refused_finished"] for row in rows.values()) > 0
    assert cluster.counts() == {"alpha": 50}


@pytest.mark.slow
def test_a_takeover_after_retirement_keeps_every_count(cluster: Cluster, tmp_path: Path) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1", "--mapper-lease-s", "1")
    pieces = split_book(tmp_path, 4)
    for piece in pieces[:3]:
        cluster.feed(piece, extra=["--no-combine"])
    wait_status(cluster, retired_everywhere(3))
    victim = cluster.spec()["nodes"][1]
    os.kill(victim["pid"], signal.SIGKILL)
    wait_status(
        cluster,
        lambda rows: (
            sum(row.get("takeovers", 0) for row in rows.values()) >= 1
            and sum(row.get("slots_owned", 0) for row in rows.values()) == 2**14
        ),
    )
    # The survivors promoted the dead node's replica, retirements and all: a rerun of a
    # finished feed is still all duplicates, and a new feed counts once.
    cluster.feed(pieces[0], extra=["--no-combine"])
    cluster.feed(pieces[3], extra=["--no-combine"])
    assert cluster.counts() == word_counts(pieces)
