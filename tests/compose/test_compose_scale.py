"""The compose cluster's node service scales while the books are fed: ``up --scale node=1``
starts a replica that finds the ring through the seeds and joins by itself, and ``--scale
node=0`` stops it (its successor takes its range over from its copies); every count stays
exact. The cluster is :mod:`tests.compose.test_compose`'s (its ``project`` fixture). Run by
``make test-compose``."""

from __future__ import annotations

import time

import pytest

from tests.compose import test_compose
from tests.compose.test_compose import Project
from tests.compose.test_compose_chaos import statuses
from tests.e2e.conftest import EXAMPLE_BOOKS, word_counts

pytestmark = pytest.mark.compose

project = test_compose.project
FIXED_NODES = {"n0", "n1", "n2", "n3"}
JOIN_TIMEOUT_S = 30.0


def test_the_node_service_scales_up_and_down_by_one_during_a_feed_and_loses_nothing(
    project: Project,
) -> None:
    with project.slow_feed() as feed:
        time.sleep(2)
        project.compose("up", "-d", "--wait", "--no-recreate", "--scale", "node=1", "node")
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while True:
            rows = statuses(project)
            joined = {n: r for n, r in rows.items() if n not in FIXED_NODES}
            if any(r.get("range_share") for r in joined.values()):
                break
            assert time.monotonic() < deadline, f"no replica joined: {rows}"
            time.sleep(0.5)
        (replica,) = joined
        assert feed.poll() is None, "the feed ended before the replica joined"
        time.sleep(2)  # the replica serves part of the feed
        project.compose("up", "-d", "--wait", "--scale", "node=0", "node")
        still_feeding = feed.poll() is None
    assert still_feeding, "the feed ended before the replica was stopped"
    assert project.counts() == word_counts(EXAMPLE_BOOKS * 2)
    rows = statuses(project)
    assert replica not in rows, rows  # stopped, its range taken over: no longer an owner
    takers = [n for n, r in rows.items() if replica in [t["dead"] for t in r["takeover_records"]]]
    assert len(takers) == 1, rows
    assert sum(r["range_share"] for r in rows.values()) == pytest.approx(1.0)
