"""What the operator's commands say when a fault gets in their way: ``smr fault heal`` names
the nodes it could not reach and exits 2."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

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

