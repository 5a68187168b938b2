"""Word count over real node processes equals plain Python's count, key by key."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from tests.e2e.conftest import EXAMPLE_BOOKS, REPO, Cluster, shared_books, word_counts

pytestmark = pytest.mark.e2e


def test_three_nodes_count_two_shared_books_exactly(cluster: Cluster) -> None:
    books = shared_books("pg2701_moby_dick.txt", "pg1342_pride_and_prejudice.txt")
    cluster.up(3)
    result = cluster.feed(*books)
    expected = word_counts(books)
    assert f"fed {sum(expected.values()):,} tuples" in result.stdout
    assert cluster.counts() == expected


@pytest.mark.slow
@pytest.mark.parametrize(
    ("nodes", "slot_bits", "combine"),
    [(1, 4, True), (2, 16, False), (4, 8, True), (5, 12, False), (5, 16, True)],
)
def test_any_node_count_and_slot_bits_give_exact_counts(
    cluster: Cluster, nodes: int, slot_bits: int, combine: bool
) -> None:
    cluster.up(nodes, "examples.wordcount:job", "--slot-bits", str(slot_bits))
    extra = [] if combine else ["--no-combine"]
    cluster.feed(*EXAMPLE_BOOKS, extra=["--batch-size", "300", *extra])
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS)
    status = cluster.status()
    assert sorted(status) == [f"n{i}" for i in range(nodes)]
    assert sum(row["range_share"] for row in status.values()) == pytest.approx(1.0)
    if not combine:
        assert sum(row["tuples_applied"] for row in status.values()) == sum(
            word_counts(EXAMPLE_BOOKS).values()
        )


def test_feed_reads_standard_input(cluster: Cluster) -> None:
    cluster.up(2)
    cluster.feed("-", input_text="the cat\nThe dog\n\nthe end")
    assert cluster.counts() == {"the": 3, "cat": 1, "dog": 1, "end": 1}


def test_two_feeds_under_different_mapper_ids_add_up(cluster: Cluster) -> None:
    cluster.up(3)
    cluster.feed(EXAMPLE_BOOKS[0], extra=["--mapper-id", "first"])
    cluster.feed(EXAMPLE_BOOKS[0], extra=["--mapper-id", "second"])
    once = word_counts(EXAMPLE_BOOKS[:1])
    assert cluster.counts() == {word: 2 * n for word, n in once.items()}


def test_reducer_that_raises_is_counted_and_the_rest_is_exact(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = tmp_path / "input.txt"
    text.write_text("a zzpoison b\nzzpoison a\nc\n")
    cluster.up(2, "tests.e2e.jobs:poison_reduce")
    cluster.feed(str(text), job="tests.e2e.jobs:poison_reduce", extra=["--no-combine"])
    assert cluster.counts() == {"a": 2, "b": 1, "c": 1}
    assert sum(row["tuples_failed"] for row in cluster.status().values()) == 2
    logs = "".join(p.read_text() for p in (cluster.dir / "logs").glob("*.log"))
    assert "reduce failed for key 'zzpoison': ValueError: refusing zzpoison" in logs


def test_map_that_raises_drops_that_record_only_and_exits_1(cluster: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = tmp_path / "input.txt"
    text.write_text("one two\nthree MAPFAIL\nfour\n")
    cluster.up(2, "tests.e2e.jobs:failing_map")
    result = cluster.feed(str(text), job="tests.e2e.jobs:failing_map", check=False)
    assert result.returncode == 1
    assert f"map failed at {text}:2: RuntimeError: marker line" in result.stderr
    assert cluster.counts() == {"one": 1, "two": 1, "four": 1}


def test_node_survives_random_frames_and_counts_them(cluster: Cluster) -> None:
    cluster.up(2)
    addr = cluster.spec()["nodes"][0]["addr"]
    junk = cluster.raw_dealer(addr)
    rng = __import__("random").Random(7)
    for _ in range(300):
        frames = [rng.randbytes(rng.randint(0, 60)) for _ in range(rng.randint(1, 4))]
        junk.send_multipart(frames)
    junk.send(b"\x01\x00\x00\x00\x04\x81\xa1v\x01" + b"\xff" * 10)  # a batch, junk header
    time.sleep(0.3)
    junk.close()
    cluster.feed(*EXAMPLE_BOOKS)
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS)
    assert cluster.status()["n0"]["bad_frames"] >= 290


@pytest.mark.slow
def test_paused_node_delays_the_feed_without_losing_anything(cluster: Cluster) -> None:
    cluster.up(3)
    feed = cluster.feed_in_background(
        *EXAMPLE_BOOKS, extra=["--batch-size", "100", "--window", "4"]
    )
    time.sleep(0.3)
    cluster.smr("fault", "pause", "n1", "--cluster", str(cluster.dir))
    time.sleep(1.5)
    assert feed.poll() is None, "the feed finished while a node was paused"
    cluster.smr("fault", "resume", "n1", "--cluster", str(cluster.dir))
    cluster.wait_feed(feed)
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS)


def test_killed_node_is_gone_by_pid_and_shown_unreachable(cluster: Cluster) -> None:
    cluster.up(3)
    pid = next(n["pid"] for n in cluster.spec()["nodes"] if n["id"] == "n2")
    result = cluster.smr("fault", "kill", "n2", "--cluster", str(cluster.dir))
    assert f"kill n2: SIGKILL to pid {pid}" in result.stdout
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    status = cluster.status()
    assert status["n2"]["state"] == "unreachable"
    assert status["n0"]["state"] == "up"


@pytest.mark.slow
def test_tail_prints_what_reducers_emit(cluster: Cluster) -> None:
    cluster.up(2, "tests.e2e.jobs:announcing")
    tail = subprocess.Popen(
        [sys.executable, "-m", "smr", "tail", "--cluster", str(cluster.dir), "--timeout-s", "3"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)  # let the subscriber connect before anything is published
        cluster.feed(EXAMPLE_BOOKS[0], job="tests.e2e.jobs:announcing")
        out, _ = tail.communicate(timeout=30)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    frequent = {w for w, n in word_counts(EXAMPLE_BOOKS[:1]).items() if n >= 100}
    tailed = {__import__("json").loads(line)["key"] for line in out.splitlines()}
    assert tailed == frequent
    written = "".join(p.read_text() for p in (cluster.dir / "output").glob("*.jsonl"))
    assert len(written.splitlines()) == len(frequent)
