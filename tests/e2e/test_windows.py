"""A windowed job over real node processes: a tumbling-window word count fed with
out-of-order event times (and, in the slow test, one node killed with SIGKILL during the
feed, ``r = 1``), every window's final result read from the output once, equal to plain
Python's windows."""

from __future__ import annotations

import collections
import contextlib
import gzip
import json
import time
from pathlib import Path

import pytest

import smr
from smr.client.control import Client, NodeUnreachable
from tests.e2e.conftest import EXAMPLE_BOOKS, WORD, Cluster
from tests.e2e.jobs import WINDOWED_DISORDER_MS, WINDOWED_SIZE_MS

pytestmark = pytest.mark.e2e

JOB = "tests.e2e.jobs:windowed_count"
# Event time per line, and how far a line's time may jump back (below WINDOWED_DISORDER_MS,
# so no tuple is late and every window's result is the count of all its words).
LINE_MS = 20
JITTER_MS = 997


def write_event_lines(book: str, path: Path, count: int) -> list[tuple[int, str]]:
    """The first ``count`` lines of ``book`` as event lines, line ``i`` at about
    ``i * LINE_MS`` with a deterministic jitter, written to ``path``; returns them."""
    with gzip.open(book, "rt", encoding="utf-8", errors="replace") as text:
        lines = [line.rstrip("\r\n") for line, _ in zip(text, range(count), strict=False)]
    events = [(i * LINE_MS + (i * 7919) % JITTER_MS, line) for i, line in enumerate(lines)]
    path.write_text("".join(f"{t}\t{line}\n" for t, line in events), encoding="utf-8")
    return events


def model_windows(events: list[tuple[int, str]]) -> dict[tuple[str, int], int]:
    """Plain Python: words per (word, window start), tokenised as the job does."""
    counts: collections.Counter[tuple[str, int]] = collections.Counter()
    for t, line in events:
        start = t // WINDOWED_SIZE_MS * WINDOWED_SIZE_MS
        for word in WORD.findall(line.lower()):
            counts[(word, start)] += 1
    return dict(counts)


def output_windows(cluster: Cluster) -> tuple[list[dict], str]:
    """The window results ``smr output`` reads (each origin once), and its report."""
    result = cluster.smr("output", "--cluster", str(cluster.dir))
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def windows_closed(cluster: Cluster) -> int:
    """Windows closed so far, summed over the nodes that answer (asked directly, as
    ``Cluster.applied`` does, so that polling it is cheap)."""
    client = Client(timeout_ms=1000)
    total = 0
    try:
        for node in cluster.spec()["nodes"]:
            with contextlib.suppress(NodeUnreachable):
                total += client.status(node["addr"]).get("windows_closed", 0)
    finally:
        client.close()
    return total


def read_windows(
    cluster: Cluster, expected: dict[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Every window's result in the output, by (word, window start), once the output holds
    as many as ``expected`` (the last ones leave at the checkpoint after the feed's end) or
    after 20 s; each window must have left one final result and no correction."""
    deadline = time.monotonic() + 20
    records, report = output_windows(cluster)
    while len(records) < len(expected) and time.monotonic() < deadline:
        time.sleep(0.3)
        records, report = output_windows(cluster)
    found: dict[tuple[str, int], int] = {}
    for record in records:
        value = record["value"]
        assert value["revision"] == 0, record  # no tuple was late: no correction
        assert value["end_ms"] - value["start_ms"] == WINDOWED_SIZE_MS
        name = (record["key"], value["start_ms"])
        assert name not in found, f"window {name} left twice: {record}"
        found[name] = value["state"]["count"]
    assert found, report
    return found


def test_a_tumbling_count_on_a_cluster_equals_plain_python(
    cluster: Cluster, tmp_path: Path
) -> None:
    events = write_event_lines(EXAMPLE_BOOKS[0], tmp_path / "events.txt", 2000)
    cluster.up(2, JOB, "--replication", "1", "--checkpoint-interval-ms", "200")
    cluster.feed(str(tmp_path / "events.txt"), job=JOB)
    expected = model_windows(events)
    assert read_windows(cluster, expected) == expected


def test_a_program_writes_a_windowed_job_through_smr_connect(cluster: Cluster) -> None:
    cluster.up(2, JOB, "--replication", "1", "--checkpoint-interval-ms", "200")
    sent = [(f"w{i % 7}", i * LINE_MS + (i * 7919) % JITTER_MS) for i in range(3000)]
    with smr.connect(str(cluster.dir), job=JOB) as connection:
        with pytest.raises(ValueError, match="needs its event_time"):
            connection.emit("w0", 1)
        with pytest.raises(TypeError, match="each take an event_time"):
            connection.emit_many([("w0", 1)])
        for word, t in sent:
            connection.emit(word, 1, event_time=t)
    # Closing the connection flushed it and told the nodes it finished: every window closes.
    expected = dict(
        collections.Counter((word, t // WINDOWED_SIZE_MS * WINDOWED_SIZE_MS) for word, t in sent)
    )
    assert read_windows(cluster, expected) == expected


@pytest.mark.slow
def test_a_tumbling_count_is_exact_through_a_kill(cluster: Cluster, tmp_path: Path) -> None:
    assert WINDOWED_DISORDER_MS > JITTER_MS
    events = write_event_lines(EXAMPLE_BOOKS[0], tmp_path / "events.txt", 6000)
    cluster.up(3, JOB, "--replication", "1", "--checkpoint-interval-ms", "200")
    feed = cluster.feed_in_background(
        str(tmp_path / "events.txt"), job=JOB, extra=["--batch-size", "200", "--window", "4"]
    )
    # Kill a node once some windows have left, while the feed runs.
    deadline = time.monotonic() + 30
    while windows_closed(cluster) < 50:
        assert time.monotonic() < deadline, "no window closed during the feed"
        assert feed.poll() is None, "the feed ended before the kill: give it more text"
        time.sleep(0.2)
    cluster.smr("fault", "kill", "n1", "--cluster", str(cluster.dir))
    assert feed.poll() is None, "the feed ended before the kill: give it more text"
    cluster.wait_feed(feed)
    expected = model_windows(events)
    assert read_windows(cluster, expected) == expected
    rows = cluster.status()
    assert sum(row.get("takeovers", 0) for row in rows.values()) == 1
    assert sum(row.get("late_dropped", 0) for row in rows.values()) == 0
