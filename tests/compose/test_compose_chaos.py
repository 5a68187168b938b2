"""A chaos schedule over the compose cluster (``smr fault run --docker-project``), played from
this host by the Docker backend while the books are fed (through a client container, and
through Spark: the feeder service on the standalone cluster): one node container is killed,
another is cut off by iptables rules inside the containers past the failure timeout and
healed, a third is delayed. Nothing is lost, key by key; the cut-off node was really cut
(its neighbour took its range over from the copies it holds, and after the heal it found
itself marked dead, fenced, and is on standby again, empty, as capacity), and the fault log
says what ran when and by which means.

The cluster is :mod:`tests.compose.test_compose`'s (its ``project`` fixture). Run by ``make
test-compose``.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.compose import test_compose
from tests.compose.test_compose import KEYS, REPO, Project
from tests.e2e.conftest import EXAMPLE_BOOKS, JOB, word_counts

pytestmark = pytest.mark.compose

project = test_compose.project
# The books cut into this many files for a Spark feed that lasts past the schedule.
CHUNKS = 40

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


def statuses(project: Project) -> dict[str, dict[str, Any]]:
    """Each node's status row (``smr status --json`` in a client container; it exits 1
    while a node does not answer)."""
    result = project.compose(
        "run", "--rm", "-T", "client", "smr", "status", "--cluster", "/cluster", "--json",
        check=False,
    )  # fmt: skip
    assert result.returncode in (0, 1), result
    return {row["node"]: row for row in json.loads(result.stdout)["nodes"]}


@pytest.fixture(autouse=True)
def chunked_books(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The input folder the Spark worker and feeder mount (set before the cluster comes up):
    the books cut into CHUNKS files, which the feeder reads one per micro-batch, so that a
    Spark feed lasts as long as a schedule (the books whole take it about 2 s)."""
    folder = tmp_path / "books"
    folder.mkdir()
    lines: list[str] = []
    for book in EXAMPLE_BOOKS:
        with gzip.open(book, "rt", encoding="utf-8", errors="replace") as text:
            lines += text
    step = -(-len(lines) // CHUNKS)
    for n in range(CHUNKS):
        (folder / f"part-{n:03d}.txt").write_text("".join(lines[n * step : (n + 1) * step]))
    monkeypatch.setenv("SMR_INPUT", str(folder))
    return folder


def spark_feed(project: Project) -> subprocess.Popen[str]:
    """The feeder service's spark-feed on the standalone cluster, a file per micro-batch."""
    return project.in_background(
        "run", "--rm", "-T", "feeder", "smr", "spark-feed", "--cluster", "/cluster",
        "--job", JOB, "--input", "/input", "--master", "spark://spark-master:7077",
        "--max-files-per-trigger", "1", "--once",
    )  # fmt: skip


def wait_for_tuples(project: Project, feed: subprocess.Popen[str]) -> None:
    """Return once a node has applied a tuple (Spark takes seconds to start)."""
    deadline = time.monotonic() + 120
    while not any(row.get("tuples_applied") for row in statuses(project).values()):
        assert feed.poll() is None, f"the feed ended before any tuple: {feed.communicate()}"
        assert time.monotonic() < deadline, "no tuple applied in 120 s"
        time.sleep(0.5)


@pytest.mark.parametrize("feeder", ["client", "spark"])
def test_a_chaos_schedule_of_real_network_faults_loses_nothing(
    project: Project, tmp_path: Path, feeder: str
) -> None:
    schedule = tmp_path / "chaos.toml"
    schedule.write_text(SCHEDULE)
    log = tmp_path / "faults.jsonl"
    if feeder == "client":
        feeding, books = project.slow_feed(), EXAMPLE_BOOKS * 2
    else:
        feeding, books = project.feeding(spark_feed(project)), EXAMPLE_BOOKS
    with feeding as feed:
        if feeder == "client":
            time.sleep(2)  # the client container starts and the feed begins
        else:
            wait_for_tuples(project, feed)
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
            env={**os.environ, "SMR_KEYS": str(KEYS)},
        )  # fmt: skip
        assert played.returncode == 0, f"{played.stdout}\n{played.stderr}"
        fed_through_every_fault = feed.poll() is None
    assert fed_through_every_fault, "the feed ended before the schedule did"
    assert project.counts() == word_counts(books)

    logged = [json.loads(line) for line in log.read_text().splitlines()]
    assert [entry["fault"] for entry in logged] == ["kill", "partition", "delay"], logged
    assert "iptables" in logged[1]["how"], logged[1]
    assert "netem" in logged[2]["how"], logged[2]  # netem, or the filter where it is missing

    # n3, fenced, comes back as incarnation 2 on standby, owning nothing; a fenced node asks
    # to join again rejoin_after_fence_ms (30 s) later, so on a slow machine, where the feed
    # outlasts the schedule by that much, it may already own a range again by a join.
    deadline = time.monotonic() + 30
    while True:
        rows = statuses(project)
        n3 = rows["n3"]
        settled = n3.get("incarnation") == 2 and n3.get("status_in_view") in ("standby", "up")
        if settled or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert rows["n1"]["state"] == "unreachable", rows["n1"]
    assert [r["dead"] for r in rows["n2"]["takeover_records"]] == ["n1"], rows["n2"]
    assert [r["dead"] for r in rows["n0"]["takeover_records"]] == ["n3"], rows["n0"]
    assert settled, f"n3 is not back as a new incarnation: {n3}"
    assert n3["fenced"] == 1, n3
    if n3["status_in_view"] == "standby":
        assert (n3["range_share"], n3["keys"]) == (0.0, 0), n3
