"""The bulk forms of a job over real node processes: ``map_batch``, built-in aggregators and
``reduce_batch`` give the state plain Python computes, faults included."""

from __future__ import annotations

import base64
import collections
import gzip
import statistics
import time
from typing import Any

import pytest

from examples.wordcount import WORD
from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts
from tests.e2e.jobs import POISON

pytestmark = pytest.mark.e2e

FAST = "examples.wordcount:fast"


@pytest.mark.slow
def test_the_fast_word_count_stays_exact_with_a_node_killed_mid_feed(cluster: Cluster) -> None:
    books = EXAMPLE_BOOKS
    # Capped nodes, so that the feed is still running when the node dies (the shipped books
    # take some 4 s at this cap); the kill waits for tuples applied, not for a time.
    cluster.up(4, FAST, "--replication", "1", "--rate-cap", "3000")
    feed = cluster.feed_in_background(*books, job=FAST, combine=True)
    deadline = time.monotonic() + 30
    while cluster.applied() < 5_000:
        assert feed.poll() is None, "the feed ended before the fault"
        assert time.monotonic() < deadline, "the feed applied too little in 30 s"
        time.sleep(0.1)
    cluster.smr("fault", "kill", "n1", "--cluster", str(cluster.dir))
    cluster.wait_feed(feed)
    assert cluster.counts() == word_counts(books)
    status = cluster.status()
    assert sum(row.get("takeovers", 0) for row in status.values() if row["state"] == "up") == 1
    assert all(row["tuples_failed"] == 0 for row in status.values() if row["state"] == "up")


def test_the_fast_word_count_reports_the_words_it_fed(cluster: Cluster) -> None:
    cluster.up(2, FAST)
    result = cluster.feed(*EXAMPLE_BOOKS, job=FAST)
    expected = word_counts(EXAMPLE_BOOKS)
    assert f"fed {sum(expected.values()):,} tuples" in result.stdout
    assert cluster.counts() == expected


def first_letter_stats(paths: list[str]) -> dict[str, dict[str, Any]]:
    """What ``tests.e2e.jobs:letters`` keeps per first letter, by plain Python."""
    words_of: dict[str, list[str]] = collections.defaultdict(list)
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as text:
            for line in text:
                for word in WORD.findall(line.rstrip("\r\n").lower()):
                    words_of[word[0]].append(word)
    stats = {}
    for letter, words in words_of.items():
        lengths = [len(w) for w in words]
        stats[letter] = {
            "n": len(words),
            "chars": sum(lengths),
            "shortest": min(lengths),
            "longest": max(lengths),
            "mean": statistics.fmean(lengths),
            "words": len(set(words)),
            "top": sorted(lengths, reverse=True)[:3],
            "latest": words[-1],
        }
    return stats


@pytest.mark.slow
def test_every_aggregator_over_real_nodes_equals_plain_python(cluster: Cluster) -> None:
    cluster.up(3, "tests.e2e.jobs:letters", "--replication", "1")
    cluster.feed(*EXAMPLE_BOOKS, job="tests.e2e.jobs:letters")
    expected = first_letter_stats(EXAMPLE_BOOKS)
    states = cluster.dump()
    assert sorted(states) == sorted(expected)
    for letter, want in expected.items():
        got = states[letter]
        assert {k: got[k] for k in ("n", "chars", "shortest", "longest", "words")} == {
            k: want[k] for k in ("n", "chars", "shortest", "longest", "words")
        }, letter
        assert got["mean"] == pytest.approx(want["mean"])
        assert list(got["top"]) == want["top"]
        assert got["latest"] == want["latest"]
        assert abs(got["words_approx"] - want["words"]) <= max(2, 0.15 * want["words"])
        assert len(base64.b64decode(got["words_approx.hll"]["base64"])) == 1024


def test_reduce_batch_counts_exactly(cluster: Cluster) -> None:
    cluster.up(3, "examples.wordcount:batched", "--replication", "1")
    cluster.feed(*EXAMPLE_BOOKS, job="examples.wordcount:batched")
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS)


def test_a_reduce_batch_that_raises_changes_nothing_of_its_batch_and_is_reported(
    cluster: Cluster, tmp_path: Any
) -> None:
    text = tmp_path / "input.txt"
    text.write_text(f"a {POISON} b\n{POISON} a\nc\n")
    cluster.up(2, "tests.e2e.jobs:batch_poison")
    # One tuple per batch: the batches holding the poison fail, and only they.
    cluster.feed(
        str(text), job="tests.e2e.jobs:batch_poison", extra=["--no-combine", "--batch-size", "1"]
    )
    assert cluster.counts() == {"a": 2, "b": 1, "c": 1}
    assert sum(row["tuples_failed"] for row in cluster.status().values()) == 2
    logs = "".join(p.read_text() for p in (cluster.dir / "logs").glob("*.log"))
    assert f"reduce failed for key '{POISON}': ValueError: refusing a batch" in logs
