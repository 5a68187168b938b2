"""Spark in the compose cluster (compose/docker-compose.yml): a standalone master and worker
come up healthy beside the ring, the books fed through the ``feeder`` service (``smr
spark-feed --once`` on the standalone cluster) come out exact, and a second feed resumes from
the query's checkpoint and adds nothing.

The cluster is :mod:`tests.compose.test_compose`'s: its ``project`` fixture (a compose project
of the test's own, ``up -d --wait``, then ``down -v``), with the input folder the services
mount (``SMR_INPUT``) holding the books alone. Run by ``make test-compose``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compose import test_compose
from tests.compose.test_compose import Project
from tests.e2e.conftest import EXAMPLE_BOOKS, JOB, word_counts

pytestmark = pytest.mark.compose

# The ring plus Spark, up and healthy, torn down with its volumes at the end (this module's
# fixtures set SMR_INPUT first: autouse fixtures run before the others).
project = test_compose.project

MASTER_STATE = (
    "import urllib.request; "
    "print(urllib.request.urlopen('http://127.0.0.1:8080/json/', timeout=5).read().decode())"
)


@pytest.fixture(autouse=True)
def books_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder the worker and the feeder mount at /input: the books and nothing else (the
    file source reads every file there; examples/data also holds SOURCES.md)."""
    folder = tmp_path / "books"
    folder.mkdir()
    for book in EXAMPLE_BOOKS:
        shutil.copy(book, folder)
    monkeypatch.setenv("SMR_INPUT", str(folder))
    return folder


@pytest.fixture
def spark(project: Project) -> Iterator[Project]:
    """The project; at the end its one-off containers go first (``down`` leaves those of
    ``run`` behind, a feeder still running after a timeout, say, and then cannot remove the
    network)."""
    try:
        yield project
    finally:
        one_offs = subprocess.run(
            [
                "docker",
                "ps",
                "-aq",
                "--filter",
                f"label=com.docker.compose.project={project.name}",
                "--filter",
                "label=com.docker.compose.oneoff=True",
            ],
            capture_output=True,
            text=True,
        ).stdout.split()
        if one_offs:
            subprocess.run(["docker", "rm", "-f", *one_offs], capture_output=True)


def master_state(project: Project) -> dict[str, object]:
    """The standalone master's state, as its web UI serves it at /json/."""
    out = project.compose("exec", "-T", "spark-master", "python", "-c", MASTER_STATE).stdout
    state: dict[str, object] = json.loads(out)
    return state


def feed(project: Project) -> str:
    """One run of the feeder service (profile feed); its stdout, which ends with the line
    saying how many tuples it fed."""
    return project.compose("run", "--rm", "-T", "feeder", timeout_s=240).stdout


def test_books_fed_through_spark_come_out_exact_and_a_second_feed_adds_nothing(
    spark: Project,
) -> None:
    state = master_state(spark)
    assert state["status"] == "ALIVE", state
    assert state["aliveworkers"] == 1, state

    first = feed(spark)
    assert "fed 0 tuples" not in first, first
    expected = word_counts(EXAMPLE_BOOKS)
    assert spark.counts() == expected, first
    # The query ran on the standalone cluster (local mode never reaches the master).
    apps = master_state(spark)["completedapps"]
    assert isinstance(apps, list)
    assert [app["name"] for app in apps] == [f"smr spark-feed {JOB}"], apps

    # The checkpoint (a volume) says both books are done: nothing is fed twice.
    second = feed(spark)
    assert "fed 0 tuples from 0 records" in second, second
    assert spark.counts() == expected, second
