"""``smr fault``: inject faults into a local cluster's nodes by signalling their processes
(SIGKILL, SIGSTOP, SIGCONT). Registered on the main group by :mod:`smr.cli`."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import click

from smr import cluster as local_cluster
from smr.cli_options import cluster_dir_option
from smr.spec import read_spec


@click.group("fault")
def fault_group() -> None:
    """Inject faults into a local cluster's nodes."""


def _fault(cluster_dir: Path, node_id: str, signum: signal.Signals, verb: str) -> None:
    spec = read_spec(cluster_dir)
    pid = local_cluster.signal_node(spec, node_id, signum)
    click.echo(f"{verb} {node_id} (pid {pid}) at {time.strftime('%H:%M:%S')}")


@fault_group.command("kill")
@click.argument("node_id")
@cluster_dir_option
def fault_kill(node_id: str, cluster_dir: Path) -> None:
    """SIGKILL node NODE_ID."""
    _fault(cluster_dir, node_id, signal.SIGKILL, "killed")


@fault_group.command("pause")
@click.argument("node_id")
@cluster_dir_option
def fault_pause(node_id: str, cluster_dir: Path) -> None:
    """SIGSTOP node NODE_ID."""
    _fault(cluster_dir, node_id, signal.SIGSTOP, "paused")


@fault_group.command("resume")
@click.argument("node_id")
@cluster_dir_option
def fault_resume(node_id: str, cluster_dir: Path) -> None:
    """SIGCONT node NODE_ID."""
    _fault(cluster_dir, node_id, signal.SIGCONT, "resumed")
