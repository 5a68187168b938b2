"""A node with an apply rate cap (``smr cluster up --rate-cap``) behaves as a smaller machine:
it applies no faster than the cap, what waits is held back (inbox, then the mappers), it is
never declared dead for it, and every count is exact."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import EXAMPLE_BOOKS, WORD, Cluster, word_counts

pytestmark = pytest.mark.e2e

CAP_PER_S = 8000
WORDS = 40_000


def first_words(path: Path, count: int = WORDS) -> Path:
    """A file of the first ``count`` words of the shipped books, 100 a line."""
    words: list[str] = []
    for book in EXAMPLE_BOOKS:
        with gzip.open(book, "rt", encoding="utf-8", errors="replace") as text:
            for line in text:
                words += WORD.findall(line.lower())
                if len(words) >= count:
                    break
        if len(words) >= count:
            break
    words = words[:count]
    path.write_text("\n".join(" ".join(words[i : i + 100]) for i in range(0, len(words), 100)))
    return path


@pytest.mark.slow
def test_capped_nodes_apply_no_faster_than_their_cap_and_lose_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.up(2, "examples.wordcount:job", "--replication", "1", "--rate-cap", str(CAP_PER_S))
    source = first_words(tmp_path / "words.txt")
    started = time.monotonic()
    cluster.feed(str(source), extra=["--batch-size", "200", "--no-combine"])
    took_s = time.monotonic() - started
    rows = cluster.status()
    assert {row["apply_rate_cap_per_s"] for row in rows.values()} == {CAP_PER_S}
    assert all(row["state"] == "up" and row["takeovers"] == 0 for row in rows.values())
    applied = [row["tuples_applied"] for row in rows.values()]
    assert sum(applied) == WORDS
    # Each node applied its share no faster than the cap (less a burst of 0.1 s and one
    # batch it may take on credit); the feed took at least as long.
    burst = CAP_PER_S * 0.1 + 200
    assert took_s >= (max(applied) - burst) / CAP_PER_S, (took_s, applied)
    assert cluster.counts() == word_counts([str(source)])
