"""A windowed job over real node processes: a tumbling-window word count fed with
out-of-order event times (and, in the slow test, one node killed with SIGKILL during the
feed, ``r = 1``), every window's final result read from the output once, equal to plain
Python's windows. A move and a join during a feed that also carries tuples far behind the
watermark: the nodes that gain slots resume their watermarks, so every late tuple is
dropped wherever it lands, and every window leaves under one origin with one result, the
model's. Session windows per word, merged as tuples bridge them, equal plain Python's."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gzip
import json
import time
from pathlib import Path

import pytest

import smr
from smr.client.control import Client, NodeUnreachable
from tests.e2e.conftest import EXAMPLE_BOOKS, WORD, Cluster
from tests.e2e.jobs import SESSION_GAP_MS, WINDOWED_DISORDER_MS, WINDOWED_SIZE_MS

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


# The late lines of a feed with late tuples: the most frequent words of the first lines, at
# event times of the first window, one line every LATE_EVERY from line LATE_FROM on (by then
# every slot those words fall in is far past the first window: each is dropped, wherever
# it is judged).
LATE_WORD_COUNT = 20
LATE_FROM = 1500
LATE_EVERY = 10


@dataclasses.dataclass
class LateFeed:
    """A feed with late lines: its on-time events, its late tuples, and the tuples that
    come before its first late line."""

    events: list[tuple[int, str]]
    late_tuples: int
    tuples_before_late: int


def write_events_with_late_lines(book: str, path: Path, count: int) -> LateFeed:
    """``write_event_lines``, then one late line every ``LATE_EVERY`` lines from
    ``LATE_FROM`` on, written to ``path``."""
    events = write_event_lines(book, path, count)
    frequent = collections.Counter(
        word for _t, line in events[:1000] for word in WORD.findall(line.lower())
    )
    late_line = " ".join(word for word, _n in frequent.most_common(LATE_WORD_COUNT))
    fed: list[tuple[int, str]] = []
    late_lines = 0
    for i, event in enumerate(events):
        fed.append(event)
        if i >= LATE_FROM and i % LATE_EVERY == 0:
            fed.append(((i * 7) % WINDOWED_SIZE_MS, late_line))
            late_lines += 1
    path.write_text("".join(f"{t}\t{line}\n" for t, line in fed), encoding="utf-8")
    before = sum(len(WORD.findall(line.lower())) for _t, line in events[:LATE_FROM])
    return LateFeed(events, late_lines * LATE_WORD_COUNT, before)


def results_by_origin(cluster: Cluster) -> dict[tuple[object, ...], set[str]]:
    """Every window result in every node's output file, repeats included (as written, not
    as a reader keeps them): the distinct values written under each origin."""
    found: dict[tuple[object, ...], set[str]] = collections.defaultdict(set)
    for path in sorted((cluster.dir / "output").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            found[tuple(record["origin"])].add(json.dumps(record["value"], sort_keys=True))
    return found


def assert_one_result_per_window(cluster: Cluster, expected: dict[tuple[str, int], int]) -> None:
    """Each window left under one origin, revision 0, with one result (a node that closed
    it again wrote the same one), and the windows are the model's."""
    by_origin = results_by_origin(cluster)
    assert len(by_origin) == len(expected)
    for origin, values in by_origin.items():
        assert len(values) == 1, f"window {origin} left with different results: {values}"
        assert origin[2] == 0, origin


def move_until_done(cluster: Cluster, *args: str, attempts: int = 40) -> str:
    """``smr move`` (or ``scale out``) until it is done; a refusal while a replica is
    still being rebuilt is retried (the reason says so)."""
    for _ in range(attempts):
        result = cluster.smr(*args, "--cluster", str(cluster.dir), check=False)
        if result.returncode == 0:
            return result.stdout
        retryable = ("not complete yet", "already takes part", "views differ")
        assert any(reason in result.stderr for reason in retryable), result.stderr
        time.sleep(0.3)
    raise AssertionError(f"smr {' '.join(args)} never got done")


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


@pytest.mark.slow
@pytest.mark.parametrize("change", ["move", "join"])
def test_a_move_or_a_join_during_a_feed_with_late_tuples_leaves_each_window_once(
    cluster: Cluster, tmp_path: Path, change: str
) -> None:
    """Three nodes and a move of half of n1's range to its neighbour, or two nodes and a
    third joining, once the late lines have begun, while the feed runs: every window leaves
    once, equal to plain Python's windows of the on-time lines, and every late tuple is
    dropped and counted (the node that gains a slot judges the late tuples it gets from
    the first, against the watermark the slot's checkpoints carried)."""
    path = tmp_path / "events.txt"
    fed = write_events_with_late_lines(EXAMPLE_BOOKS[0], path, 6000)
    nodes = 3 if change == "move" else 2
    cluster.up(nodes, JOB, "--replication", "1", "--checkpoint-interval-ms", "200")
    feed = cluster.feed_in_background(
        str(path), job=JOB, extra=["--batch-size", "100", "--window", "2"]
    )
    try:
        deadline = time.monotonic() + 30
        while cluster.applied() < fed.tuples_before_late:
            assert time.monotonic() < deadline, "the feed did not reach its late lines"
            assert feed.poll() is None, "the feed ended before the change: give it more text"
            time.sleep(0.1)
        if change == "move":
            out = move_until_done(cluster, "move", "n1", "--fraction", "0.5")
        else:
            out = move_until_done(cluster, "scale", "out")
        assert "done:" in out, out
        assert feed.poll() is None, "the feed ended before the change was done"
    finally:
        cluster.wait_feed(feed)
    expected = model_windows(fed.events)
    assert read_windows(cluster, expected) == expected
    assert_one_result_per_window(cluster, expected)
    rows = cluster.status()
    assert sum(row.get("moves_received", 0) for row in rows.values()) == 1
    assert sum(row.get("takeovers", 0) for row in rows.values()) == 0
    assert sum(row.get("late_dropped", 0) for row in rows.values()) == fed.late_tuples


def model_sessions(events: list[tuple[int, str]]) -> dict[tuple[str, int, int], int]:
    """Plain Python: per word, its runs of event times less than ``SESSION_GAP_MS`` apart,
    as (word, start, end) with the words counted."""
    times: dict[str, list[int]] = collections.defaultdict(list)
    for t, line in events:
        for word in WORD.findall(line.lower()):
            times[word].append(t)
    sessions: dict[tuple[str, int, int], int] = {}
    for word, word_times in times.items():
        word_times.sort()
        start, end, count = word_times[0], word_times[0] + SESSION_GAP_MS, 0
        for t in word_times:
            if t >= end:
                sessions[(word, start, end)] = count
                start, count = t, 0
            end, count = max(end, t + SESSION_GAP_MS), count + 1
        sessions[(word, start, end)] = count
    return sessions


def test_session_windows_on_a_cluster_equal_plain_python(cluster: Cluster, tmp_path: Path) -> None:
    """Sessions per word merge as tuples bridge them and each leaves once, with no late
    tuple: none replaces another, and the sessions are the model's."""
    job = "tests.e2e.jobs:session_count"
    events = write_event_lines(EXAMPLE_BOOKS[0], tmp_path / "events.txt", 1200)
    cluster.up(2, job, "--replication", "1", "--checkpoint-interval-ms", "200")
    cluster.feed(str(tmp_path / "events.txt"), job=job)
    expected = model_sessions(events)
    deadline = time.monotonic() + 20
    records, report = output_windows(cluster)
    while len(records) < len(expected) and time.monotonic() < deadline:
        time.sleep(0.3)
        records, report = output_windows(cluster)
    found: dict[tuple[str, int, int], int] = {}
    for record in records:
        value = record["value"]
        assert value["revision"] == 0 and "replaces" not in value, record
        name = (record["key"], value["start_ms"], value["end_ms"])
        assert name not in found, f"session {name} left twice: {record}"
        found[name] = value["state"]["count"]
    assert found == expected, report
