"""A join beside a saturated node, over real processes: capped nodes fed faster than they
apply hold at most their time budget of work (``NodeSettings.admit_ms``: 200 ms at their
cap), a node added during the feed serves within a second of its request, the giver's
other slots go on being applied throughout (no wait between its apply turns over 50 ms
beyond its cap's own pace), and every count is exact."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster, word_counts
from tests.e2e.test_rate_cap import first_words

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CAP_PER_S = 5000
BATCH = 100
# The feed: about six seconds at two nodes' caps, so the join comes while they are full.
WORDS = 60_000
JOIN_TARGET_MS = 1000.0
STALL_TARGET_MS = 50.0


def test_a_join_beside_a_saturated_node_serves_within_a_second(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.up(2, "examples.wordcount:job", "--replication", "1", "--rate-cap", str(CAP_PER_S))
    source = first_words(tmp_path / "words.txt", WORDS)
    feed = cluster.feed_in_background(str(source), extra=["--batch-size", str(BATCH)])
    time.sleep(2.0)
    cluster.smr("scale", "out", "--cluster", str(cluster.dir))
    cluster.wait_feed(feed)
    rows = cluster.status()
    for node, row in rows.items():
        # 200 ms at the cap; the last batch read may go past it.
        assert row["inbox_admits_tuples"] == CAP_PER_S // 5
        assert row["inbox_tuples_peak"] <= row["inbox_admits_tuples"] + BATCH, (node, row)
    given = [
        record
        for row in rows.values()
        for record in row["moves"]["recent"]
        if record["role"] == "giver" and record["outcome"] == "done"
    ]
    assert len(given) == 1, given
    join = given[0]
    assert join["total_ms"] <= JOIN_TARGET_MS, join
    # The cap applies a batch every BATCH / CAP_PER_S s: that pace is not a stall.
    assert join["apply_stall_ms_max"] <= STALL_TARGET_MS + 1000 * BATCH / CAP_PER_S, join
    assert cluster.counts() == word_counts([str(source)])
