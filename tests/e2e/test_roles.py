"""A node paused past the timeout comes back fenced and says so: status shows each node's role,
never two nodes on one token; and a cluster started without --replication keeps one copy of
everything, so one killed node costs nothing."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_a_paused_node_comes_back_fenced_and_status_shows_no_token_twice(cluster: Cluster) -> None:
    cluster.up(4)
    cluster.feed(EXAMPLE_BOOKS[0])
    pid = next(n["pid"] for n in cluster.spec()["nodes"] if n["id"] == "n2")
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            rows = [r for r in cluster.status().values() if r["state"] == "up"]
            if sum(r["takeovers"] for r in rows) >= 1:
                break
            time.sleep(0.3)
    finally:
        os.kill(pid, signal.SIGCONT)
    # Every node answers (a node busy for a moment may miss one status call's timeout), and
    # n2 says it was fenced.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = cluster.status()
        if all(row["state"] == "up" for row in status.values()) and (
            status["n2"].get("role") == "fenced"
        ):
            break
        time.sleep(0.3)
    assert all(row["state"] == "up" for row in status.values()), status
    assert status["n2"]["role"] == "fenced" and status["n2"]["token"] is None
    assert {row["role"] for name, row in status.items() if name != "n2"} == {"serving"}
    tokens = [row["token"] for row in status.values() if row["token"] is not None]
    assert len(tokens) == len(set(tokens)) == 3
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])


@pytest.mark.slow
def test_without_replication_given_one_killed_node_loses_nothing(cluster: Cluster) -> None:
    cluster.up(3)  # no --replication: one copy beyond the primary
    assert cluster.spec()["replication"] == 1
    cluster.feed(EXAMPLE_BOOKS[0])
    cluster.smr("fault", "kill", "n1", "--cluster", str(cluster.dir))
    cluster.feed(EXAMPLE_BOOKS[1])
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:2])
