"""``smr fault run`` plays a chaos schedule against a local cluster's processes while a feed
runs: a pause, a partition, a delay and a loss, each healing by itself; nothing is lost, and
the fault log says what ran when."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import Cluster, word_counts
from tests.e2e.test_rate_cap import first_words

pytestmark = pytest.mark.e2e

SCHEDULE = """
[[fault]]
at = "300ms"
do = "delay"
nodes = ["n3"]
delay = "50ms"
jitter = "20ms"
duration = "1s"

[[fault]]
at = "500ms"
do = "pause"
nodes = ["n1"]
duration = "400ms"

[[fault]]
at = "1200ms"
do = "partition"
nodes = ["n0", "n1"]
others = ["n2", "n3"]
duration = "600ms"

[[fault]]
at = "2s"
do = "loss"
nodes = ["n2"]
share = "10%"
duration = "1s"
"""


@pytest.mark.slow
def test_a_chaos_schedule_on_real_processes_loses_nothing_and_is_logged(
    cluster: Cluster, tmp_path: Path
) -> None:
    paths = [str(first_words(tmp_path / "words.txt"))]
    expected = word_counts(paths)
    # Each node applies a quarter of the 40,000 words: at 2,000 a second the feed lasts
    # about 5 s, past the 3 s schedule.
    cluster.up(4, "examples.wordcount:job", "--replication", "1", "--rate-cap", "2000")
    schedule = tmp_path / "chaos.toml"
    schedule.write_text(SCHEDULE)
    feed = cluster.feed_in_background(*paths, extra=["--batch-size", "200"])
    try:
        played = cluster.smr("fault", "run", str(schedule), "--cluster", str(cluster.dir))
        fed_through_every_fault = feed.poll() is None
    finally:
        cluster.wait_feed(feed)
    assert fed_through_every_fault, "the feed ended before the schedule: the test checks less"
    assert "played" in played.stdout and "5 actions" in played.stdout, played.stdout
    assert cluster.counts() == expected
    logged = [json.loads(line) for line in (cluster.dir / "faults.jsonl").read_text().splitlines()]
    assert [entry["fault"] for entry in logged] == ["delay", "pause", "resume", "partition", "loss"]
    assert all(entry["backend"] == "local" for entry in logged)
    assert "emulated" in logged[0]["how"] and "SIGSTOP" in logged[1]["how"]
    status = cluster.status()
    # Nobody was taken over: the pause and the delay are shorter than the failure timeout,
    # and the partition splits the four owners two and two, so neither side has the
    # majority that declaring a node dead on silence needs.
    assert all(row.get("takeovers", 0) == 0 for row in status.values()), status
