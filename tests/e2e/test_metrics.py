"""Each node's Prometheus endpoint over real node processes: what it says agrees with the
state a feed left (tuples, keys, slots), bad frames and takeovers are counted, and a node
whose loop a reduce call holds still answers a scrape, saying how long it has stalled."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from smr.cluster.ports import free_port
from smr.ring.hashing import slot_of
from tests.e2e.conftest import EXAMPLE_BOOKS, REPO, Cluster, word_counts
from tests.e2e.jobs import SLOW_CALL_S

pytestmark = pytest.mark.e2e

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(metrics_addr: str, timeout_s: float = 5.0) -> Samples:
    """Every sample a node's /metrics serves, by name and labels (the node label left out)."""
    with urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=timeout_s) as reply:
        text = reply.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "node"))
            samples[(sample.name, labels)] = sample.value
    return samples


def total(scrapes: list[Samples], name: str) -> float:
    return sum(samples[(name, ())] for samples in scrapes)


@pytest.mark.slow
def test_metrics_agree_with_the_state_a_feed_left(cluster: Cluster) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    cluster.feed(*EXAMPLE_BOOKS, extra=["--no-combine"])
    expected = word_counts(EXAMPLE_BOOKS)
    nodes = cluster.spec()["nodes"]
    assert all(node["metrics_addr"] for node in nodes)
    # A checkpoint (every second) leaves every slot with its copies.
    deadline = time.monotonic() + 10
    while True:
        scrapes = [scrape(node["metrics_addr"]) for node in nodes]
        if total(scrapes, "smr_slots_under_replicated") == 0:
            break
        assert time.monotonic() < deadline, "slots still under-replicated after 10 s"
        time.sleep(0.2)
    assert total(scrapes, "smr_tuples_applied_total") == sum(expected.values())
    assert total(scrapes, "smr_keys") == len(expected)
    assert total(scrapes, "smr_slots_owned") == 2**14
    assert total(scrapes, "smr_tuples_duplicate_total") == 0
    assert total(scrapes, "smr_checkpoint_sent_bytes_total") > 0
    assert total(scrapes, "smr_backup_batches_total") == total(scrapes, "smr_batches_applied_total")
    # One mapper fed: each slot it touched has one high-water mark at its primary and, once
    # the next checkpoint (every second) has carried it, one in its secondary's copy.
    touched = {slot_of(word, 14) for word in expected}
    deadline = time.monotonic() + 10
    while (entries := total([scrape(n["metrics_addr"]) for n in nodes], "smr_hwm_entries")) != (
        2 * len(touched)
    ):
        assert time.monotonic() < deadline, (entries, 2 * len(touched))
        time.sleep(0.2)
    for samples in scrapes:
        assert samples[("smr_node_info", (("role", "serving"), ("zone", "")))] == 1
        assert samples[("process_resident_memory_bytes", ())] > 0
        assert samples[("smr_batches_refused_total", (("reason", "not_owner"),))] == 0

    # Frames no decoder takes are counted, one each.
    before = scrape(nodes[0]["metrics_addr"])[("smr_bad_frames_total", ())]
    sender = cluster.raw_dealer(nodes[0]["addr"])
    for index in range(40):
        sender.send(b"\xee not a message " + bytes([index]))
    sender.close()
    deadline = time.monotonic() + 10
    while (now := scrape(nodes[0]["metrics_addr"])[("smr_bad_frames_total", ())]) < before + 40:
        assert time.monotonic() < deadline, (before, now)
        time.sleep(0.1)
    assert now == before + 40
    assert cluster.counts() == expected


def test_a_takeover_shows_in_the_survivors_metrics(cluster: Cluster) -> None:
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    cluster.feed(EXAMPLE_BOOKS[0])
    nodes = cluster.spec()["nodes"]
    os.kill(nodes[2]["pid"], signal.SIGKILL)
    survivors = nodes[:2]
    deadline = time.monotonic() + 15
    while True:
        scrapes = [scrape(node["metrics_addr"]) for node in survivors]
        if total(scrapes, "smr_takeovers_total") >= 1:
            break
        assert time.monotonic() < deadline, "no takeover within 15 s"
        time.sleep(0.2)
    assert total(scrapes, "smr_takeover_duration_seconds_count") == total(
        scrapes, "smr_takeovers_total"
    )
    assert total(scrapes, "smr_takeover_duration_seconds_sum") > 0
    assert total(scrapes, "smr_slots_owned") == 2**14
    assert total(scrapes, "smr_slots_lost_total") == 0
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])


@pytest.mark.slow
def test_a_node_held_by_a_slow_reduce_call_is_still_scraped(cluster: Cluster) -> None:
    job = "tests.e2e.jobs:one_slow_call"
    cluster.up(3, job, "--replication", "1")
    nodes = cluster.spec()["nodes"]
    feed = cluster.feed_in_background(EXAMPLE_BOOKS[0], job=job)
    stalled_max = 0.0
    try:
        while feed.poll() is None and stalled_max < 1.0:
            for node in nodes:
                started = time.monotonic()
                samples = scrape(node["metrics_addr"])
                # The scrape waits at most about a second for a held loop, then answers
                # with the last status it had.
                assert time.monotonic() - started < 3.0
                stalled = samples[("smr_loop_stalled_seconds", ())]
                if stalled >= 1.0:
                    assert samples[("smr_status_age_seconds", ())] > 0.5
                stalled_max = max(stalled_max, stalled)
    finally:
        Cluster.wait_feed(feed)
    assert stalled_max >= 1.0, f"no scrape saw a held loop (max stall {stalled_max:.2f} s)"
    assert SLOW_CALL_S >= 2.0
    assert cluster.counts() == word_counts(EXAMPLE_BOOKS[:1])


def test_a_node_whose_metrics_port_is_taken_says_so_and_exits_2(cluster: Cluster) -> None:
    cluster.up(2, "examples.wordcount:job", "--replication", "1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        node = subprocess.run(
            [
                sys.executable, "-m", "smr", "node", "--cluster", str(cluster.dir), "--id",
                "extra", "--port", str(free_port(set())), "--advertise", "127.0.0.1",
                "--metrics-port", str(busy),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
    assert node.returncode == 2, node.stderr
    assert f"cannot start: metrics on 0.0.0.0:{busy}" in node.stderr, node.stderr
