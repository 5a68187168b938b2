"""Nexmark on a cluster of real node processes, as ``bench/nexmark.py`` runs it: Q7 and Q5
paced in real time, fed through ``smr.connect(job=...)`` with event times
into 2 nodes, ``r = 1``, every window's result read once from the output, equal to the
plain-Python model window by window, the second stage too."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import nexmark_model
from bench.nexmark import second_stage
from bench.nexmark_cluster import ClusterOptions, run_paced, run_unpaced
from bench.nexmark_events import NexmarkConfig, read_events, write_events
from examples.nexmark import SLIDE_MS, WINDOW_MS

pytestmark = pytest.mark.e2e

# 25 s of event time: three tumbling windows of 10 s per auction's span, and twelve ends of
# Q5's hopping windows.
CONFIG = NexmarkConfig(seed=3, events=5_000, events_per_second=200)
OPTIONS = ClusterOptions(nodes=2, replication=1, results_timeout_s=20.0)


@pytest.fixture(scope="module")
def event_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_events(CONFIG, tmp_path_factory.mktemp("nexmark-cluster"), files=2)


def test_q7_on_two_nodes_equals_the_model_window_by_window(event_files: list[Path]) -> None:
    expected = nexmark_model.bid_maxima(read_events(event_files), WINDOW_MS)
    run = run_unpaced("q7", read_events(event_files), len(expected), OPTIONS)
    assert run.complete and run.corrections == 0
    assert run.windows == expected
    assert second_stage("q7", run.windows) == second_stage("q7", expected)
    assert len({bounds for _, bounds in expected}) >= 3  # more than one window end passed


def test_q5_paced_in_real_time_equals_the_model_and_times_its_windows(
    event_files: list[Path],
) -> None:
    expected = nexmark_model.bid_counts(read_events(event_files), WINDOW_MS, SLIDE_MS)
    run = run_paced("q5", read_events(event_files), len(expected), 10.0, OPTIONS)
    assert run.complete and run.corrections == 0
    assert run.windows == expected
    assert second_stage("q5", run.windows) == second_stage("q5", expected)
    # Most windows close while the feed runs, each timed from its end's send; only those
    # the last events did not pass wait for the feed's end.
    assert len(run.latencies_ms) + run.closed_at_finish == len(expected)
    assert len(run.latencies_ms) > run.closed_at_finish
    assert all(0 < ms < 5_000 for ms in run.latencies_ms)
