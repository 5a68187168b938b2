"""Failures within tolerance lose nothing: the scenarios of ``smr.faults.scenarios`` that signals
can
carry out (kills and pauses) run against real node processes while a feed runs; the final
state equals plain Python's counts exactly, key by key, and the takeovers and fencing are the
ones each scenario expects. Partitions and delays are played by the nodes' own network
filter (``smr fault``'s local backend); stalls and forged views have tests of their own,
and show as skipped with where they are."""

from __future__ import annotations

import time

import pytest

from smr.faults.scenarios import SCENARIOS, Scenario
from tests.e2e.conftest import EXAMPLE_BOOKS, FEED_FLAGS, JOB, Cluster, word_counts
from tests.e2e.conftest import feed_books as books
from tests.e2e.scenario_player import (
    play,
    wait_for_feed_start,
    wait_for_outcome,
    why_the_local_backend_cannot_run,
)

pytestmark = pytest.mark.e2e


def run_on_real_processes(cluster: Cluster, scenario: Scenario) -> None:
    """Start the scenario's ring, feed the books, play its faults timed from the feed's
    start, and check the outcome it expects (``smr.faults.scenarios``): exact counts, the
    takeovers and fencing it names, and no others."""
    cluster.up(scenario.nodes, JOB, "--replication", str(scenario.replication))
    nodes = cluster.spec()["nodes"]
    pids = {node["id"]: node["pid"] for node in nodes}
    addrs = {node["id"]: node["addr"] for node in nodes}
    paths = books()
    feed = cluster.feed_in_background(*paths, extra=FEED_FLAGS)
    try:
        started_s = wait_for_feed_start(addrs, feed)
        play(scenario.schedule, pids, feed, started_s, addrs)
    finally:
        cluster.wait_feed(feed)
    assert cluster.counts() == word_counts(paths)
    differences = wait_for_outcome(scenario, addrs, pids)
    assert not differences, "\n".join(differences)


@pytest.mark.slow
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(scenario, id=scenario.name, marks=pytest.mark.skip(reason=reason))
        if (reason := why_the_local_backend_cannot_run(scenario))
        else pytest.param(scenario, id=scenario.name)
        for scenario in SCENARIOS
    ],
)
def test_a_fault_scenario_on_real_processes_loses_nothing_and_ends_as_it_expects(
    cluster: Cluster, scenario: Scenario
) -> None:
    run_on_real_processes(cluster, scenario)


@pytest.mark.slow
def test_under_replicated_slots_return_to_zero_after_a_takeover(cluster: Cluster) -> None:
    cluster.up(4, "examples.wordcount:job", "--replication", "1")
    cluster.feed(EXAMPLE_BOOKS[0])
    cluster.smr("fault", "kill", "n1", "--cluster", str(cluster.dir))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        status = cluster.status()
        live = [row for row in status.values() if row["state"] == "up"]
        if sum(r.get("takeovers", 0) for r in live) == 1 and all(
            r["under_replicated_slots"] == 0 for r in live
        ):
            break
        time.sleep(0.2)
    assert sum(r["takeovers"] for r in live) == 1
    assert all(r["under_replicated_slots"] == 0 for r in live)
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])
