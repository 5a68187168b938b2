"""What the operator's commands say when a fault gets in their way: ``smr fault heal`` names
the nodes it could not reach and exits 2, and ``smr status`` shows a node its peers declared
dead as dead, though it still answers (cut off by a partition)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from smr.client.control import Client
from tests.e2e.conftest import Cluster

pytestmark = pytest.mark.e2e

NOT_REACHED = (
    "smr: error: heal did not reach n0, n1, n2 (running, but not answering: paused, or "
    "refusing this process's keys); the faults set there end by themselves after their "
    "duration\n"
)


def test_heal_refused_by_every_node_names_them_all_and_exits_2(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.up(3)
    # A directory with the same nodes and other keys: every node refuses this process.
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    shutil.copy(cluster.dir / "cluster.json", stranger / "cluster.json")
    cluster.smr("keys", "init", str(stranger))
    refused = cluster.smr("fault", "heal", "--cluster", str(stranger), check=False)
    assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", NOT_REACHED)
    assert not (stranger / "faults.jsonl").exists()  # nothing was healed, so nothing logged


def test_heal_heals_the_nodes_it_reaches_names_a_paused_one_and_passes_over_a_dead_one(
    cluster: Cluster,
) -> None:
    cluster.up(3)
    # One node paused: the others are healed (and logged), the paused one is named.
    pids = cluster.pids()
    os.kill(pids[1], signal.SIGSTOP)
    try:
        partial = cluster.smr("fault", "heal", "--cluster", str(cluster.dir), check=False)
    finally:
        os.kill(pids[1], signal.SIGCONT)
    assert partial.returncode == 2
    assert partial.stdout.split(": ", 1)[0].endswith(" heal n0 n2")
    assert partial.stderr == NOT_REACHED.replace("n0, n1, n2", "n1")
    logged = [json.loads(line) for line in (cluster.dir / "faults.jsonl").read_text().splitlines()]
    assert [(entry["fault"], entry["targets"]) for entry in logged] == [("heal", ["n0", "n2"])]
    # A node that is gone holds nothing back: the heal of the rest succeeds.
    os.kill(pids[2], signal.SIGKILL)
    healed = cluster.smr("fault", "heal", "--cluster", str(cluster.dir), check=False)
    assert healed.returncode == 0, healed.stderr


def test_status_shows_a_node_its_peers_declared_dead_as_dead_while_it_answers(
    cluster: Cluster,
) -> None:
    cluster.up(3)
    addrs = {node["id"]: node["addr"] for node in cluster.spec()["nodes"]}
    cluster.smr("fault", "partition", "n0", "--duration", "20s", "--cluster", str(cluster.dir))
    client = Client(timeout_ms=1000)
    try:
        deadline = time.monotonic() + 10
        while "n0" not in client.status(addrs["n1"])["dead_in_view"]:
            assert time.monotonic() < deadline, "n1 never declared n0 dead"
            time.sleep(0.1)
        # n0, cut off, has not heard: by its own view it still serves its range.
        assert client.status(addrs["n0"])["role"] == "serving"
    finally:
        client.close()
    result = cluster.smr("status", "--cluster", str(cluster.dir), "--json", check=False)
    roles = {row["node"]: row["role"] for row in json.loads(result.stdout)["nodes"]}
    assert roles == {"n0": "dead", "n1": "serving", "n2": "serving"}
    assert result.returncode == 1
    assert result.stderr == (
        "smr: declared dead by the other nodes, yet answering: n0 (cut off from them? the "
        "ring serves their slots elsewhere; each rejoins empty once it hears)\n"
    )
