"""``smr autoscale run`` (the controller, in the foreground) and ``smr autoscale status`` (its
last decision and why). Registered on the main group by :mod:`smr.cli`."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

import click

from smr.autoscale.capacity import CapacityConfig
from smr.autoscale.controller import Controller, read_status
from smr.autoscale.policies import POLICIES, PolicyRunner
from smr.cli.options import cluster_dir_option, docker_project_option
from smr.cluster.provision import StandbyPool, provisioner_for
from smr.spec.model import ClusterError
from smr.spec.parse import read_spec


@click.group("autoscale")
def autoscale_group() -> None:
    """Add and remove nodes as the load goes: a controller runs a policy on the nodes'
    measured load (the nodes balance among themselves without it)."""


@autoscale_group.command("run")
@cluster_dir_option
@click.option(
    "--policy", type=click.Choice(sorted(POLICIES)), default="capacity", show_default=True
)
@click.option("--min", "nodes_min", type=click.IntRange(1), default=1, show_default=True)
@click.option("--max", "nodes_max", type=click.IntRange(1), default=8, show_default=True)
@click.option("--interval-s", type=click.FloatRange(0.1), default=1.0, show_default=True)
@click.option(
    "--billing-period-s",
    type=click.FloatRange(1),
    help="capacity: release a node only near the end of a paid period of this length "
    "[default: release at once].",
)
@click.option(
    "--duration-s", type=click.FloatRange(0.1), help="Stop after this long [default: on SIGTERM]."
)
@docker_project_option
def autoscale_run(
    cluster_dir: Path,
    policy: str,
    nodes_min: int,
    nodes_max: int,
    interval_s: float,
    billing_period_s: float | None,
    duration_s: float | None,
    docker_project: str | None,
) -> None:
    """Run the controller on the cluster in the foreground until SIGTERM or Ctrl-C: every
    interval it polls the nodes, decides, and scales out (a standby node first) or in (a
    node leaves, then stops). Its state is in autoscale.json ('smr autoscale status')."""
    if nodes_min > nodes_max:
        raise ClusterError(f"--min {nodes_min} is above --max {nodes_max}")
    read_spec(cluster_dir)  # a clear error if there is no cluster here
    config = None
    if policy == "capacity":
        config = CapacityConfig(billing_period_s=billing_period_s)
    elif billing_period_s is not None:
        raise ClusterError("--billing-period-s applies to the capacity policy only")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s autoscale %(message)s")
    provisioner = StandbyPool(provisioner_for(cluster_dir, docker_project), size=0)
    controller = Controller(
        cluster_dir, PolicyRunner(policy, config), nodes_min, nodes_max, interval_s, provisioner
    )
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    try:
        controller.run(stopping, duration_s)
    finally:
        controller.close()


@autoscale_group.command("status")
@cluster_dir_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def autoscale_status(cluster_dir: Path, as_json: bool) -> None:
    """The controller's policy, its last decision and why, the workload, forecast and
    capacity it decided on, and its recent actions."""
    read_spec(cluster_dir)
    status = read_status(cluster_dir)
    if status is None:
        raise ClusterError(f"no autoscale controller has run on {cluster_dir}")
    if as_json:
        click.echo(json.dumps(status, indent=1))
        return
    click.echo(_describe(status))


def _describe(status: dict[str, Any]) -> str:
    age_s = time.time() - status["updated_at_unix_s"]
    decision = status["decision"]
    lines = [
        f"policy {status['policy']} (pid {status['pid']}), {status['nodes_min']}-"
        f"{status['nodes_max']} nodes, last round {age_s:.1f} s ago",
        f"serving {status['serving']}; workload {status['workload_per_s']:,.0f} tuples/s, "
        f"backlog {status['backlog_tuples']:,} tuples ("
        + (
            f"the source reports {status['source']['backlog_tuples']:,} of them)"
            if status.get("source")
            else "no source report: the nodes' figures)"
        ),
        f"decision: {decision['nodes_wanted']} nodes: {decision['reason']}",
    ]
    if decision.get("forecast_per_s") is not None:
        lines.append(
            f"forecast peak {decision['forecast_per_s']:,.0f} tuples/s; capacity of "
            f"{decision['nodes_wanted']} nodes {decision['capacity_per_s']:,.0f} tuples/s"
        )
    if age_s > 5 * status["interval_s"]:
        lines.append(
            click.style("the controller has not written for a while: is it running?", fg="yellow")
        )
    for action in status["actions"][-5:]:
        mark = "ok" if action["ok"] else click.style("failed", fg="red")
        lines.append(f"  {action['action']}: {mark}: {action['outcome']} ({action['took_s']} s)")
    return "\n".join(lines)
