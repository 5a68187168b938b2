"""The Docker provisioner (``smr scale --docker-project``) on the compose cluster, from the
``operator`` service (on the compose network, with the engine's socket) while the books are
fed: ``scale out`` starts a node container and joins it, ``scale in`` moves its range back
and removes the container; no takeover, every count exact. Then the ``autoscaler`` service
runs the controller with the same provisioner and decides. The cluster is
:mod:`tests.compose.test_compose`'s (its ``project`` fixture, whose ``down`` removes the
provisioned containers too). Run by ``make test-compose``."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from tests.compose import test_compose
from tests.compose.test_compose import Project
from tests.compose.test_compose_chaos import statuses
from tests.e2e.conftest import EXAMPLE_BOOKS, word_counts

pytestmark = pytest.mark.compose

project = test_compose.project
OPS_DIR = "/cluster/output/ops"


def operator(project: Project, *args: str, provisioner: bool = True) -> str:
    """``smr ARGS --cluster OPS_DIR [--docker-project self]`` in an operator container."""
    with_provisioner = ["--docker-project", "self"] if provisioner else []
    return project.compose(
        "run", "--rm", "-T", "operator", "smr", *args, "--cluster", OPS_DIR, *with_provisioner
    ).stdout


def test_the_docker_provisioner_adds_and_removes_a_node_container_during_a_feed(
    project: Project,
) -> None:
    with project.slow_feed() as feed:
        added = operator(project, "scale", "out")
        match = re.search(r"^(\S+-x[0-9a-f]{6}) on standby", added, re.MULTILINE)
        assert match, added
        node = match.group(1)
        rows = statuses(project)
        assert rows[node]["range_share"] > 0, rows[node]
        assert feed.poll() is None, "the feed ended before the node joined"
        removed = operator(project, "scale", "in", node)
        assert f"{node} stopped" in removed, removed
        still_feeding = feed.poll() is None
    assert still_feeding, "the feed ended before the node left"
    assert project.counts() == word_counts(EXAMPLE_BOOKS * 2)
    rows = statuses(project)
    assert node not in rows and all(r["takeovers"] == 0 for r in rows.values()), rows
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"name={node}"], capture_output=True, text=True
    )
    assert left.stdout.strip() == "", f"{node}'s container is still there"

    # The autoscaler service runs the controller with the same provisioner: it reaches the
    # engine and the nodes, and decides (an idle ring of four stays at its minimum).
    project.compose("--profile", "autoscale", "up", "-d", "autoscaler")
    deadline = time.monotonic() + 30
    while True:
        status = project.compose(
            "run", "--rm", "-T", "operator", "smr", "autoscale", "status", "--cluster", OPS_DIR,
            check=False,
        )  # fmt: skip
        # Until the controller's first decision is written, status says none has run (and
        # `docker compose run` does not always pass the command's exit code on).
        if "decision:" in status.stdout or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert status.returncode == 0, f"{status.stdout}\n{status.stderr}"
    assert "decision: 4 nodes" in status.stdout, status.stdout
