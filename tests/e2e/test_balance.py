"""Neighbour balance (``smr cluster up --balance-above``): a node that stays busy moves part
of its range to its clockwise neighbour by itself, no operator or controller involved, and
every count stays exact."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster, word_counts
from tests.e2e.test_moves import move, settle
from tests.e2e.test_rate_cap import first_words

pytestmark = pytest.mark.e2e

CAP_PER_S = 2000


@pytest.mark.slow
def test_a_busy_node_moves_load_to_its_idle_neighbour_by_itself(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.up(
        3,
        "examples.wordcount:job",
        "--replication",
        "1",
        "--rate-cap",
        str(CAP_PER_S),
        "--balance-above",
        "0.9",
    )
    # Make n2 hot and n0 (its clockwise neighbour) idle: n2 takes most of n1's range, so
    # it holds about 60% of the keys, and n1 most of n0's, which keeps about 7%. A feeder
    # held back by n2 then leaves n0 at about a tenth of its cap (with a third of the keys,
    # as before, it ran at 55-70%: too busy to take a balancing move, which needs under 60%).
    move(cluster, "move", "n1", "--fraction", "0.8")
    settle(cluster)
    move(cluster, "move", "n0", "--fraction", "0.8")
    rows = settle(cluster)
    assert rows["n2"]["range_share"] > 0.55, rows["n2"]["range_share"]
    assert rows["n0"]["range_share"] < 0.1, rows["n0"]["range_share"]
    share_before = rows["n2"]["range_share"]
    source = first_words(tmp_path / "words.txt")
    started = time.monotonic()
    cluster.feed(str(source), extra=["--batch-size", "200", "--no-combine"])
    took_s = time.monotonic() - started
    rows = settle(cluster)
    given = [r for r in rows["n2"]["moves"]["recent"] if r["role"] == "giver"]
    outcomes = [f"move {r['move']}: {r['outcome']}" for r in given]
    assert "done" in [r["outcome"] for r in given], "\n".join(outcomes)  # each says why
    assert rows["n2"]["range_share"] < share_before - 0.05, (share_before, rows["n2"])
    assert rows["n0"]["moves_received"] >= 1
    assert all(row["takeovers"] == 0 for row in rows.values())
    assert cluster.counts() == word_counts([str(source)]), f"feed took {took_s:.1f} s"
