"""``smr.connect`` over real node processes: a program writes a book, reads it back, is
killed and resumes, reads through takeovers, and follows the reducers' output; every
result is compared with plain Python's count of the same words."""

from __future__ import annotations

import asyncio
import collections
import gzip
import itertools
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import smr
from smr import aio
from smr.client import reads as reads_module
from smr.client.reads import StateReader
from smr.cluster.local import signal_node
from smr.connection import Unreachable
from smr.ring.ids import Slot
from smr.ring.placement import Ring
from smr.spec.model import ClusterError
from smr.spec.parse import read_spec
from smr.values import EmitError
from tests.e2e.conftest import EXAMPLE_BOOKS, REPO, WORD, Cluster, feed_books, word_counts
from tests.e2e.test_moves import move


def book_words(paths: list[str]) -> list[str]:
    """The words of ``paths``, in order, tokenised as the example job does."""
    words: list[str] = []
    for path in paths:
        opener: Any = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as text:
            for line in text:
                words.extend(WORD.findall(line.rstrip("\r\n").lower()))
    return words


def scanned_counts(connection: smr.Cluster) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for key, state in connection.scan():
        assert key not in counts, f"key {key!r} scanned twice"
        counts[key] = state["count"]
    return counts


def test_a_program_emits_a_book_and_reads_it_back_exactly(cluster: Cluster) -> None:
    cluster.up(3)
    words = book_words(EXAMPLE_BOOKS[:1])
    expected = collections.Counter(words)
    with smr.connect(cluster.dir) as connection:
        connection.emit_many([(word, 1) for word in words])
        assert connection.flush() == len(words)
        assert scanned_counts(connection) == expected
        assert connection.get("the") == {"count": expected["the"]}
        assert connection.get("no-such-word-anywhere") is None
        some = list(expected)[:1500]
        assert connection.get_many(some) == {w: {"count": expected[w]} for w in some}
        with_prefix = dict(connection.scan(prefix="wh"))
        assert set(with_prefix) == {w for w in expected if w.startswith("wh")}
        # A bad tuple raises at once and sends nothing: the state stays exact.
        with pytest.raises(EmitError):
            connection.emit_many([("zz-not-a-word", 1), (1.5, 1)])
        with pytest.raises(TypeError):
            connection.get(b"bytes")  # type: ignore[arg-type]
        connection.flush()
        assert connection.get("zz-not-a-word") is None


def test_bad_arguments_are_refused_with_a_clear_error(cluster: Cluster) -> None:
    with pytest.raises(ClusterError, match="no seed"):
        smr.connect("127.0.0.1:1", timeout_s=0.5)
    with pytest.raises(ClusterError):
        smr.connect(cluster.dir / "missing")
    cluster.up(2)
    with pytest.raises(ValueError, match="position"):
        smr.connect(cluster.dir, position=-1)
    with pytest.raises(ValueError, match="combine"):
        smr.connect(cluster.dir, job="examples.wordcount:job", mapper_id="m", position=10)


@pytest.mark.slow
def test_a_node_killed_mid_emit_and_mid_scan_costs_nothing(cluster: Cluster) -> None:
    cluster.up(3)
    words = book_words(feed_books())
    expected = collections.Counter(words)
    spec = read_spec(cluster.dir)
    half = len(words) // 2
    with smr.connect(cluster.dir, batch_size=200, window_batches=8) as connection:
        connection.emit_many((word, 1) for word in words[:half])
        signal_node(spec, "n1", signal.SIGKILL)
        connection.emit_many((word, 1) for word in words[half:])
        assert connection.flush(timeout=60) == len(words)
        assert scanned_counts(connection) == expected
    # Mid-scan: a primary dies while the scan is between its pages.
    with smr.connect(cluster.dir, timeout_s=10) as connection:
        scan = connection.scan()
        counts: dict[Any, int] = {}
        for key, state in scan:
            counts[key] = state["count"]
            if len(counts) == 100:
                signal_node(spec, "n2", signal.SIGKILL)
                break
        for key, state in scan:
            assert key not in counts, f"key {key!r} scanned twice"
            counts[key] = state["count"]
        assert counts == expected


@pytest.mark.slow
def test_a_range_moved_mid_scan_is_read_from_its_new_primary_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    paths = feed_books()
    cluster.feed(*paths)
    expected = word_counts(paths)
    monkeypatch.setattr(reads_module, "SCAN_PAGE_KEYS", 200)  # many pages per node
    waits: list[str] = []
    wait_for_view = StateReader.wait_for_view

    def counted(self: StateReader, deadline: float, what: str, failures: list[str]) -> None:
        waits.append(what)
        wait_for_view(self, deadline, what, failures)

    monkeypatch.setattr(StateReader, "wait_for_view", counted)
    with smr.connect(cluster.dir, timeout_s=10) as connection:
        slot_bits = connection.spec.slot_bits
        last_slot = Slot((1 << slot_bits) - 1)
        node_of_last = Ring(connection.view(), slot_bits).primary(last_slot)
        scan = connection.scan()
        counts: dict[Any, int] = {}
        for key, state in scan:
            counts[key] = state["count"]
            if len(counts) == 500:
                break
        # The top of the last node's range moves to its clockwise neighbour while the scan,
        # with the view it started from, has not reached it yet.
        out = move(cluster, "move", node_of_last, "--fraction", "0.5")
        assert out.startswith("started:") and "done:" in out, out
        for key, state in scan:
            assert key not in counts, f"key {key!r} scanned twice"
            counts[key] = state["count"]
        assert Ring(connection.view(refresh=True), slot_bits).primary(last_slot) != node_of_last
    assert counts == expected
    assert waits, "the scan never met a slot its old primary had given away"


RESUMING_PROGRAM = """
import json, os, signal, sys
import smr
from tests.e2e.test_connection import book_words

cluster_dir, books, record_path = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
stop_after = int(sys.argv[4])
words = book_words(books)
try:
    record = json.load(open(record_path))
except FileNotFoundError:
    record = {"offset": 0, "position": 0}
connection = smr.connect(cluster_dir, mapper_id="resuming-program", position=record["position"],
                         batch_size=100)
offset = record["offset"]
while offset < len(words):
    chunk = words[offset:offset + 5000]
    connection.emit_many([(word, 1) for word in chunk])
    offset += len(chunk)
    if offset >= stop_after:
        # Emitted past the last flush, some of it delivered: then killed, no flush, no close.
        os.kill(os.getpid(), signal.SIGKILL)
    if offset % 20000 == 0:
        position = connection.flush()
        with open(record_path + ".new", "w") as out:
            json.dump({"offset": offset, "position": position}, out)
        os.replace(record_path + ".new", record_path)
connection.close()
print("done", offset)
"""


@pytest.mark.slow
def test_a_program_killed_after_a_flush_resumes_from_its_position_exactly(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.up(3)
    books = EXAMPLE_BOOKS[:1]
    words = book_words(books)
    record = tmp_path / "position.json"

    def run(stop_after: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", RESUMING_PROGRAM, str(cluster.dir), ",".join(books),
             str(record), str(stop_after)],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    killed = run(stop_after=55_000)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    saved = json.loads(record.read_text())
    assert saved == {"offset": 40_000, "position": 40_000}
    with smr.connect(cluster.dir) as reader:
        # Tuples past the flushed position reached the nodes before the kill.
        assert sum(scanned_counts(reader).values()) > 40_000
    finished = run(stop_after=len(words) + 1)
    assert finished.returncode == 0, finished.stderr
    with smr.connect(cluster.dir) as reader:
        assert scanned_counts(reader) == word_counts(books)


@pytest.mark.slow
def test_get_during_a_feed_never_fails_while_a_node_is_killed(cluster: Cluster) -> None:
    cluster.up(3)
    feed = cluster.feed_in_background(*feed_books(), extra=["--batch-size", "200", "--window", "8"])
    spec = read_spec(cluster.dir)
    seen: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def read_while_feeding() -> None:
        try:
            with smr.connect(cluster.dir, timeout_s=10) as connection:
                while not stop.is_set():
                    state = connection.get("the")
                    seen.append(0 if state is None else state["count"])
        except BaseException as error:
            errors.append(error)

    reader = threading.Thread(target=read_while_feeding)
    reader.start()
    try:
        time.sleep(1.0)
        signal_node(spec, "n1", signal.SIGKILL)
        cluster.wait_feed(feed)
    finally:
        stop.set()
        reader.join(timeout=30)
    assert not errors, errors
    assert len(seen) > 10
    # A read sees the key's state as of one apply turn: never less than an earlier read.
    assert all(a <= b for a, b in itertools.pairwise(seen))
    assert seen[-1] == word_counts(feed_books())["the"]


@pytest.mark.slow
def test_subscribe_follows_the_output_and_resumes_from_its_position(cluster: Cluster) -> None:
    cluster.up(2, "tests.e2e.jobs:announcing")
    frequent = {w for w, n in word_counts(EXAMPLE_BOOKS[:1]).items() if n >= 100}
    with smr.connect(cluster.dir) as connection:
        live = connection.subscribe("end", idle_timeout_s=5)
        cluster.feed(EXAMPLE_BOOKS[0], job="tests.e2e.jobs:announcing")
        first = [next(live) for _ in range(10)]
        rest = connection.subscribe(live.position, idle_timeout_s=2)
        keys = [record.key for record in first] + [record.key for record in rest]
        assert sorted(keys) == sorted(frequent)
        everything = connection.subscribe("start", idle_timeout_s=2)
        assert sorted(record.key for record in everything) == sorted(frequent)
        assert all(record.node in ("n0", "n1") for record in first)


def test_the_asyncio_flavour_writes_and_reads_the_same(cluster: Cluster) -> None:
    cluster.up(2)
    words = book_words(EXAMPLE_BOOKS[:1])[:20_000]

    async def program() -> tuple[int, dict[Any, Any], Any]:
        async with await aio.connect(str(cluster.dir)) as connection:
            await connection.emit_many([(word, 1) for word in words])
            position = await connection.flush()
            scanned = {key: state["count"] async for key, state in connection.scan()}
            return position, scanned, await connection.get("the")

    position, scanned, the = asyncio.run(program())
    expected = collections.Counter(words)
    assert position == len(words)
    assert scanned == expected
    assert the == {"count": expected["the"]}


def test_a_read_of_a_cluster_whose_nodes_are_all_gone_says_so(cluster: Cluster) -> None:
    cluster.up(2)
    with smr.connect(cluster.dir, timeout_s=1.0) as connection:
        connection.get("the")
        for node in ("n0", "n1"):
            signal_node(read_spec(cluster.dir), node, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(Unreachable):
            connection.get("the")
        assert time.monotonic() - started < 5
