"""A feed run again with the same arguments delivers exactly what the nodes do not have yet."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts

pytestmark = pytest.mark.e2e

SLOW_JOB = "tests.e2e.jobs:slow_wordcount"


@pytest.mark.slow
def test_feed_killed_midway_and_run_again_counts_every_word_exactly_once(
    cluster: Cluster,
) -> None:
    cluster.up(3, SLOW_JOB, "--replication", "1")
    feed = cluster.feed_in_background(*EXAMPLE_BOOKS, job=SLOW_JOB, combine=True)
    try:
        deadline = time.monotonic() + 30
        while cluster.applied() < 20_000:
            assert feed.poll() is None, "the feed ended before it could be killed mid-way"
            assert time.monotonic() < deadline, "the feed applied too little in 30 s"
            time.sleep(0.1)
        os.kill(feed.pid, signal.SIGKILL)
    finally:
        if feed.poll() is None:
            os.kill(feed.pid, signal.SIGKILL)
        feed.communicate()
    expected = word_counts(EXAMPLE_BOOKS)
    assert sum(cluster.counts().values()) < sum(expected.values()), "killed too late"

    result = cluster.feed(*EXAMPLE_BOOKS, job=SLOW_JOB)

    assert "the nodes already had" in result.stdout
    assert cluster.counts() == expected


def test_finished_feed_run_again_adds_nothing_and_says_so(cluster: Cluster) -> None:
    cluster.up(2)
    cluster.feed(EXAMPLE_BOOKS[0])
    again = cluster.feed(EXAMPLE_BOOKS[0])
    assert "nothing new: the nodes already had all" in again.stdout
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])


def terminate_once_applying(cluster: Cluster, feed: subprocess.Popen[str]) -> str:
    """SIGTERM a background feed once the nodes applied some of it; its standard error."""
    try:
        deadline = time.monotonic() + 30
        while cluster.applied() == 0:
            assert feed.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        feed.send_signal(signal.SIGTERM)
        _, err = feed.communicate(timeout=30)
    finally:
        if feed.poll() is None:
            feed.kill()
            feed.communicate()
    return err


@pytest.mark.slow
def test_feed_interrupted_says_where_it_stopped_and_how_to_resume(cluster: Cluster) -> None:
    cluster.up(2, SLOW_JOB)
    feed = cluster.feed_in_background(EXAMPLE_BOOKS[0], job=SLOW_JOB, combine=True)
    err = terminate_once_applying(cluster, feed)
    assert feed.returncode == 2
    assert f"after reading through {EXAMPLE_BOOKS[0]}:" in err
    assert "run the same command: smr feed --cluster" in err
    cluster.feed(EXAMPLE_BOOKS[0], job=SLOW_JOB)
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])
