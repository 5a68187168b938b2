"""A node the cluster's spec does not name (``smr node --join``, as a compose replica or a
node on another host runs) finds the ring through the spec's nodes, joins by itself while a
feed runs, and serves its range: every count stays exact and ``smr status`` lists it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from smr.client.control import Client, NodeUnreachable
from tests.e2e.conftest import REPO, Cluster, word_counts
from tests.e2e.test_rate_cap import first_words

pytestmark = pytest.mark.e2e

JOIN_TIMEOUT_S = 20.0


def two_free_ports() -> int:
    """A port p of 127.0.0.1 with p and p + 1 free (the inbox and the output publisher)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        with contextlib.suppress(OSError), socket.socket() as second:
            second.bind(("127.0.0.1", port + 1))
            return port
    raise RuntimeError("no two free ports in a row")


@pytest.mark.slow
def test_a_node_started_outside_the_spec_joins_by_itself_and_loses_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    # A cap of 2,000 tuples a second per node makes the 40,000-word feed last ~7 s.
    cluster.up(3, "examples.wordcount:job", "--replication", "1", "--rate-cap", "2000")
    paths = [str(first_words(tmp_path / "words.txt"))]
    feed = cluster.feed_in_background(*paths, extra=["--batch-size", "200"])
    port = two_free_ports()
    command = ["smr", "node", "--cluster", str(cluster.dir), "--id", "x1", "--join"]
    newcomer = subprocess.Popen(
        [sys.executable, "-m", *command, "--advertise", "127.0.0.1", "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "x1.log", "w"),  # noqa: SIM115 (closed with the process)
    )
    client = Client(timeout_ms=1000)
    try:
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        row: dict[str, object] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(NodeUnreachable):
                row = client.status(f"tcp://127.0.0.1:{port}")
                if row["range_share"]:
                    break
            time.sleep(0.1)
        joined_while_feeding = feed.poll() is None
        cluster.wait_feed(feed)
        log = (tmp_path / "x1.log").read_text()
        assert row.get("range_share"), f"x1 never joined: {row}\n{log[-2000:]}"
        assert joined_while_feeding, "the feed ended before x1 joined: the test checks less"
        assert cluster.counts() == word_counts(paths)
        listed = cluster.smr("status", "--cluster", str(cluster.dir)).stdout
        assert " x1 " in listed, listed
        assert client.status(f"tcp://127.0.0.1:{port}")["keys"] > 0
    finally:
        client.close()
        newcomer.terminate()
        newcomer.wait(timeout=10)
