"""The compose cluster's metrics profile: Prometheus scrapes every node container, its
figures agree with the books fed, a replica of the node service is found by DNS, and a node
container killed shows as a target down and a takeover. The cluster is
:mod:`tests.compose.test_compose`'s (its ``project`` fixture). Run by ``make test-compose``."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest

from tests.compose import test_compose
from tests.compose.test_compose import BOOKS_IN_IMAGE, Project
from tests.e2e.conftest import EXAMPLE_BOOKS, word_counts

pytestmark = pytest.mark.compose

project = test_compose.project
FIXED_NODES = ("n0", "n1", "n2", "n3")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def query(port: int, promql: str) -> list[dict[str, Any]]:
    """The result vector of an instant query on Prometheus' HTTP API."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as reply:
        answer = json.load(reply)
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def wait_for(port: int, promql: str, want: float, timeout_s: float = 60) -> float:
    """Poll ``promql`` (a single value) until it is ``want``; its last value."""
    deadline = time.monotonic() + timeout_s
    value = None
    while time.monotonic() < deadline:
        result = query(port, promql)
        value = float(result[0]["value"][1]) if result else None
        if value == want:
            return value
        time.sleep(1)
    raise AssertionError(f"{promql} is {value}, not {want}, after {timeout_s} s")


def test_prometheus_scrapes_every_node_and_sees_the_feed_and_a_kill(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv("SMR_PROMETHEUS_PORT", str(port))
    project.compose("--profile", "metrics", "up", "-d", "--wait", "prometheus", timeout_s=120)
    wait_for(port, 'count(up{job="smr"} == 1)', 4)

    project.smr("feed", "--cluster", "/cluster", "--no-combine", *BOOKS_IN_IMAGE)
    expected = word_counts(EXAMPLE_BOOKS)
    wait_for(port, "sum(smr_tuples_applied_total)", sum(expected.values()))
    wait_for(port, "sum(smr_keys)", len(expected))
    wait_for(port, "sum(smr_slots_owned)", 2**14)
    wait_for(port, "sum(smr_slots_under_replicated)", 0)

    # A replica of the node service is found through Docker's DNS and scraped.
    project.compose("up", "-d", "--wait", "--no-recreate", "--scale", "node=1", "node")
    wait_for(port, 'count(up{job="smr-added"} == 1)', 1)

    # A node container killed: its target goes down, a survivor takes its range over.
    subprocess.run(["docker", "kill", project.container("n3")], check=True, capture_output=True)
    wait_for(port, 'up{instance="n3:9100"}', 0)
    wait_for(port, "sum(smr_takeovers_total) >= bool 1", 1)
    wait_for(port, "sum(smr_slots_lost_total)", 0)
    assert project.counts() == expected
