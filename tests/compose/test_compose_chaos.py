"""A chaos schedule over the compose cluster (``smr fault run --docker-project``), played from
this host by the Docker backend while the books are fed: one node container is killed,
another is cut off by iptables rules inside the containers past the failure timeout and
healed, a third is delayed. Nothing is lost, key by key; the cut-off node was really cut
(its neighbour took its range over from the copies it holds, and after the heal it found
itself marked dead, fenced, and is on standby again, empty, as capacity), and the fault log
says what ran when and by which means.

The cluster is :mod:`tests.compose.test_compose`'s (its ``project`` fixture). Run by ``make
test-compose``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.compose import test_compose
from tests.compose.test_compose import REPO, Project
from tests.e2e.conftest import EXAMPLE_BOOKS, word_counts

pytestmark = pytest.mark.compose

project = test_compose.project

# r = 1 on n0..n3: n1 and n3 are not neighbours, so losing both is within tolerance once
# n1's range is copied again (n2 took it over at 1 s; the cut starts at 4 s).
SCHEDULE = """
[[fault]]
at = "1s"
do = "kill"
nodes = ["n1"]

[[fault]]
at = "4s"
do = "partition"
nodes = ["n3"]
duration = "3s"

[[fault]]
at = "9s"
do = "delay"
nodes = ["n0"]
delay = "100ms"
jitter = "20ms"
duration = "3s"
"""


def statuses(project: Project) -> dict[str, dict[str, object]]:
    """Each node's status row (``smr status --json`` in a client container; it exits 1
    while a node does not answer)."""
    result = project.compose(
        "run", "--rm", "-T", "client", "smr", "status", "--cluster", "/cluster", "--json",
        check=False,
    )  # fmt: skip
    assert result.returncode in (0, 1), result
    return {row["node"]: row for row in json.loads(result.stdout)["nodes"]}


def test_a_chaos_schedule_of_real_network_faults_loses_nothing(
    project: Project, tmp_path: Path
) -> None:
    schedule = tmp_path / "chaos.toml"
    schedule.write_text(SCHEDULE)
    log = tmp_path / "faults.jsonl"
    with project.slow_feed() as feed:
        time.sleep(2)  # the client container starts and the feed begins
        assert feed.poll() is None, "the feed ended before the schedule: nothing was tested"
        played = subprocess.run(
            [
                sys.executable, "-m", "smr", "fault", "run", str(schedule), "--log", str(log),
                "--docker-project", project.name,
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )  # fmt: skip
        assert played.returncode == 0, f"{played.stdout}\n{played.stderr}"
        fed_through_every_fault = feed.poll() is None
    assert fed_through_every_fault, "the feed ended before the schedule did"
    assert project.counts() == word_counts(EXAMPLE_BOOKS * 2)

    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [entry["fault"] for entry in logged] == ["kill", "partition", "delay"], logged
    assert "iptables" in logged[1]["how"], logged[1]
    assert "netem" in logged[2]["how"], logged[2]  # netem, or the filter where it is missing

    deadline = time.monotonic() + 30
    while True:
        rows = statuses(project)
        n3 = rows["n3"]
        settled = n3.get("status_in_view") == "standby" and n3.get("incarnation") == 2
        if settled or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert rows["n1"]["state"] == "unreachable", rows["n1"]
    assert [r["dead"] for r in rows["n2"]["takeover_records"]] == ["n1"], rows["n2"]
    assert [r["dead"] for r in rows["n0"]["takeover_records"]] == ["n3"], rows["n0"]
    assert (n3["fenced"], n3["range_share"], n3["keys"]) == (1, 0.0, 0), n3
    assert settled, f"n3 is not on standby, empty, as a new incarnation: {n3}"
