"""The compose cluster (compose/docker-compose.yml) on this machine's Docker engine: four
node containers come up healthy, the books fed through the CLI on the compose network come
out exact, and a node container killed in the middle of a feed loses nothing.

Run by ``make test-compose`` (which builds the image first); each test's containers,
network and volume belong to a compose project of its own, removed at the end by name.
Docker missing is a failure here, not a skip: these tests exist to check the containers.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from smr.transport.security import init_keys
from tests.e2e.conftest import EXAMPLE_BOOKS, word_counts

pytestmark = pytest.mark.compose

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "compose" / "docker-compose.yml"
COMPOSE_BIN = Path(sys.executable).parent / "docker-compose"
# The ring's keys: mounted into its containers; a process on the host uses them by SMR_KEYS.
KEYS = REPO / "compose" / "keys"
# The books as the image holds them (compose/build-image.sh copies examples/ into /app).
BOOKS_IN_IMAGE = [f"examples/data/{Path(book).name}" for book in EXAMPLE_BOOKS]


class Project:
    """One compose project of the cluster, driven by the Compose v2 binary."""

    def __init__(self) -> None:
        self.name = f"smr-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def compose(
        self, *args: str, timeout_s: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [str(COMPOSE_BIN), "-f", str(COMPOSE_FILE), "-p", self.name, *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
            )
        return result

    def smr(self, *args: str, timeout_s: float = 300) -> str:
        """``smr ARGS`` in a client container on the project's network; its stdout."""
        return self.compose("run", "--rm", "-T", "client", "smr", *args, timeout_s=timeout_s).stdout

    def smr_in_background(self, *args: str) -> subprocess.Popen[str]:
        """``smr ARGS`` in a client container, not waited for."""
        return self.in_background("run", "--rm", "-T", "client", "smr", *args)

    def in_background(self, *args: str) -> subprocess.Popen[str]:
        """``docker compose ARGS`` on the project, not waited for."""
        command = [str(COMPOSE_BIN), "-f", str(COMPOSE_FILE), "-p", self.name, *args]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    @contextlib.contextmanager
    def feeding(self, feed: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
        """Run the ``with`` block while ``feed`` runs; on leaving it, wait for the feed,
        which must exit 0 (it is killed if the block raised)."""
        try:
            yield feed
            out, err = feed.communicate(timeout=300)
            assert feed.returncode == 0, f"{out}\n{err}"
        finally:
            if feed.poll() is None:
                feed.kill()
                feed.wait()

    def slow_feed(self) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
        """:meth:`feeding` the books twice through a client container, in small batches with
        one in flight per node and no combine (about 30 s here)."""
        return self.feeding(
            self.smr_in_background(
                "feed", "--cluster", "/cluster", "--batch-size", "10", "--window", "1",
                "--no-combine", *BOOKS_IN_IMAGE, *BOOKS_IN_IMAGE,
            )
        )  # fmt: skip

    def container(self, service: str) -> str:
        """The id of ``service``'s container."""
        container_id = self.compose("ps", "-q", service).stdout.strip()
        assert container_id, f"{service} has no container"
        return container_id

    def counts(self) -> dict[str, int]:
        """Every key's count, dumped through a client container."""
        self.smr("dump", "--cluster", "/cluster", "--out", "/cluster/output/dump.jsonl")
        text = self.compose(
            "run", "--rm", "-T", "client", "cat", "/cluster/output/dump.jsonl"
        ).stdout
        counts: dict[str, int] = {}
        for line in text.splitlines():
            record = json.loads(line)
            assert record["key"] not in counts, f"key {record['key']!r} dumped twice"
            counts[record["key"]] = record["state"]["count"]
        return counts


@pytest.fixture
def project() -> Iterator[Project]:
    docker = subprocess.run(["docker", "info"], capture_output=True, text=True)
    assert docker.returncode == 0, f"these tests need a running Docker engine: {docker.stderr}"
    image = subprocess.run(["docker", "image", "inspect", "smr:latest"], capture_output=True)
    assert image.returncode == 0, "no smr:latest image: run 'make image' (make test-compose does)"
    if not KEYS.is_dir():  # the ring's keys, as make compose-up makes them
        init_keys(KEYS.parent)
    project = Project()
    try:
        started = time.monotonic()
        project.compose("up", "-d", "--wait", timeout_s=240)
        print(f"{project.name} healthy in {time.monotonic() - started:.1f} s")
        yield project
    finally:
        # Every profile's services (a started autoscaler), and the orphans: node containers
        # the Docker provisioner added.
        project.compose(
            "--profile", "*", "down", "-v", "--remove-orphans", "--timeout", "5",
            check=False, timeout_s=120,
        )  # fmt: skip


def test_four_nodes_come_up_healthy_and_the_books_fed_come_out_exact(project: Project) -> None:
    status = project.smr("status", "--cluster", "/cluster")
    by_seed = project.smr("status", "--cluster", "n2:7000")  # no spec: a seed address
    for node in ("n0", "n1", "n2", "n3"):
        assert node in status and node in by_seed, (status, by_seed)
    out = project.smr("feed", "--cluster", "/cluster", *BOOKS_IN_IMAGE)
    assert project.counts() == word_counts(EXAMPLE_BOOKS), out


def test_a_node_container_killed_during_a_feed_loses_nothing(project: Project) -> None:
    # Small batches, one in flight per node: the feed runs for some seconds.
    feed = project.smr_in_background(
        "feed", "--cluster", "/cluster", "--batch-size", "20", "--window", "1", *BOOKS_IN_IMAGE
    )
    time.sleep(3)
    assert feed.poll() is None, "the feed ended before the kill: nothing was tested"
    subprocess.run(["docker", "kill", project.container("n1")], check=True, capture_output=True)
    out, err = feed.communicate(timeout=300)
    assert feed.returncode == 0, f"{out}\n{err}"
    assert project.counts() == word_counts(EXAMPLE_BOOKS)
    # The ring took n1 over: its successor reports the takeover, n1 no longer answers.
    result = project.compose(
        "run",
        "--rm",
        "-T",
        "client",
        "smr",
        "status",
        "--cluster",
        "/cluster",
        "--json",
        check=False,
    )
    assert result.returncode in (0, 1), result
    rows = {row["node"]: row for row in json.loads(result.stdout)["nodes"]}
    assert rows["n2"]["takeovers"] >= 1, rows["n2"]
    assert rows["n1"]["state"] == "unreachable", rows["n1"]
