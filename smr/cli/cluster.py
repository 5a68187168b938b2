"""``smr cluster up`` and ``smr cluster down``: start and stop a local cluster of reducer
nodes. Registered on the main group by :mod:`smr.cli`, which turns a raised user error
(``ClusterError``, a job that does not load) into one ``smr: error:`` line and exit 2."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from smr.api import load_job
from smr.autoscale.policies import POLICIES
from smr.cli.options import CLUSTER_ENV
from smr.cluster import local as local_cluster
from smr.cluster.ports import NODES_MAX
from smr.output.table import MERGES, TableError, TableTarget
from smr.ring.zones import one_zone_windows
from smr.spec.model import CLUSTER_FILE, ClusterError, ClusterSpec
from smr.spec.parse import read_spec
from smr.windows import refuse_in_cluster

# `cluster up` makes the directory, so it need not exist; --dir is its older name.
up_down_cluster_option = click.option(
    "--cluster",
    "--dir",
    "cluster_dir",
    required=True,
    envvar=CLUSTER_ENV,
    type=click.Path(file_okay=False, path_type=Path),
    help=f"The cluster's directory (--dir is the same) [default: ${CLUSTER_ENV}].",
)


@click.group("cluster")
def cluster_group() -> None:
    """Start and stop a local cluster of reducer nodes."""


@cluster_group.command("up")
@up_down_cluster_option
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--replication",
    type=click.IntRange(0),
    help="Copies of each tuple and state beyond the primary (r) [default: 1, or 0 for a "
    "single node].",
)
@click.option("--job", "job_ref", required=True, help="The job, as module:attribute.")
@click.option("--slot-bits", default=14, show_default=True, type=click.IntRange(1, 20))
@click.option("--checkpoint-interval-ms", default=1000, show_default=True, type=click.IntRange(1))
@click.option(
    "--rejoin-after-fence-s",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0),
    help="A node declared dead while alive joins again this long after (0: never).",
)
@click.option(
    "--zones",
    default="",
    help="Comma-separated fault zones, dealt to the nodes in turn; the nodes sit so that "
    "each range's copies span two zones where the sizes allow [default: no zones].",
)
@click.option(
    "--rate-cap",
    "rate_cap_per_s",
    type=click.FloatRange(min=0, min_open=True),
    help="Tuples each node applies per second at most: emulates smaller machines (for "
    "autoscaling benchmarks and tests) [default: no cap].",
)
@click.option(
    "--balance-above",
    type=click.FloatRange(min=0, max=1, min_open=True),
    help="Neighbour balance: a node at least this busy (utilisation, 0 to 1) for 3 s moves "
    "a third of its load to its clockwise neighbour, if that one is 0.3 less busy (else "
    "that one passes the request on once, to make room) [default: off].",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Each node keeps its state in DATA_DIR/NODE (a snapshot and its checkpoints, "
    "checksummed, fsynced every checkpoint); 'cluster down' then 'cluster up' on the same "
    "DIR restores every key [default: no state on disk].",
)
@click.option(
    "--without",
    "without",
    multiple=True,
    metavar="NODE",
    help="On a restart from disk: leave NODE out (one whose state files are refused, say); "
    "its successor takes its range over as from a dead node, and what no copy holds is "
    "marked lost, for 'smr recover' [repeatable; default: every node starts].",
)
@click.option(
    "--output-postgres",
    "output_dsn",
    metavar="DSN",
    help="Write the output to a PostgreSQL table too (a libpq connection string or URI), "
    "exactly once: each node upserts per key in the same transaction as the position it "
    "has reached [default: output files only].",
)
@click.option(
    "--output-table",
    default="smr_output",
    show_default=True,
    help="--output-postgres: the table (and TABLE_positions beside it).",
)
@click.option(
    "--output-merge",
    type=click.Choice(MERGES),
    default="replace",
    show_default=True,
    help="--output-postgres: a key's new value replaces its row's, or is added to it.",
)
@click.option(
    "--mapper-lease-s",
    type=click.FloatRange(min=0),
    help="How long after a feed or client finished the nodes drop its dedup memory (its "
    "reruns are still recognised) [default: 600].",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="No keys: any process that reaches the nodes' ports may feed, read and command "
    "them (for experiments on a machine of your own). By default the cluster gets keys in "
    "DIR/keys and its nodes accept only their holders (CurveZMQ).",
)
@click.option(
    "--autoscale",
    "policy",
    type=click.Choice(sorted(POLICIES)),
    help="Start an autoscale controller with this policy beside the nodes ('smr autoscale "
    "run'; 'cluster down' stops it) [default: none].",
)
@click.option(
    "--min", "nodes_min", type=click.IntRange(1), help="--autoscale: fewest nodes [default: NODES]."
)
@click.option(
    "--max",
    "nodes_max",
    type=click.IntRange(1),
    help="--autoscale: most nodes [default: twice NODES].",
)
def cluster_up(
    cluster_dir: Path,
    nodes: int,
    replication: int | None,
    job_ref: str,
    slot_bits: int,
    checkpoint_interval_ms: int,
    rejoin_after_fence_s: float,
    zones: str,
    rate_cap_per_s: float | None,
    balance_above: float | None,
    data_dir: Path | None,
    mapper_lease_s: float | None,
    output_dsn: str | None,
    output_table: str,
    output_merge: str,
    insecure: bool,
    policy: str | None,
    nodes_min: int | None,
    nodes_max: int | None,
    without: tuple[str, ...],
) -> None:
    """Start NODES node processes on 127.0.0.1 in the background (and, with --autoscale, a
    controller that adds and removes nodes as the load goes)."""
    nodes_min, nodes_max = _autoscale_bounds(policy, nodes, nodes_min, nodes_max)
    zone_names = _zone_names(zones)
    if replication is None:
        # One node's failure loses nothing by default; a lone node has nobody to copy to.
        replication = 1 if nodes >= 2 else 0
    # Fail here, with the reason, rather than in every node's log.
    refuse_in_cluster(load_job(job_ref), table=output_dsn is not None)
    try:
        target = None if output_dsn is None else TableTarget(output_dsn, output_table, output_merge)
    except TableError as error:
        raise ClusterError(str(error)) from None
    restarting = (cluster_dir / CLUSTER_FILE).exists() and local_cluster.state_on_disk(
        read_spec(cluster_dir)
    )
    spec = local_cluster.up(
        cluster_dir,
        nodes,
        replication,
        job_ref,
        slot_bits,
        checkpoint_interval_ms,
        rejoin_after_fence_ms=round(rejoin_after_fence_s * 1000) or None,
        zones=zone_names,
        apply_rate_cap_per_s=rate_cap_per_s,
        balance_above=balance_above,
        secure=not insecure,
        mapper_lease_ms=None if mapper_lease_s is None else round(mapper_lease_s * 1000),
        data_dir=data_dir,
        output_table=target,
        without=without,
    )
    security = "without keys (--insecure)" if insecure else f"keys in {cluster_dir / 'keys'}"
    if restarting:
        # The restarted cluster is the one on disk: its nodes, its r, its keys.
        nodes, replication = len(spec.nodes), spec.replication
        security = f"state restored from {spec.data_dir()}"
    click.echo(f"cluster of {nodes} nodes up in {cluster_dir}, {security}")
    _echo_nodes(spec, without)
    if policy is not None:
        args = ["--policy", policy, "--min", str(nodes_min), "--max", str(nodes_max)]
        pid = local_cluster.spawn_autoscaler(cluster_dir, args)
        click.echo(
            f"  autoscale: {policy}, {nodes_min}-{nodes_max} nodes, pid {pid} "
            f"(log {cluster_dir / 'logs' / 'autoscale.log'}; 'smr autoscale status')"
        )
    _warn_one_zone(spec, replication)


def _autoscale_bounds(
    policy: str | None, nodes: int, nodes_min: int | None, nodes_max: int | None
) -> tuple[int, int]:
    """``--min`` and ``--max``, checked (they go with ``--autoscale``) and defaulted: NODES,
    and twice NODES up to the most a local cluster holds."""
    if policy is None and (nodes_min is not None or nodes_max is not None):
        raise ClusterError("--min and --max go with --autoscale")
    nodes_min = nodes if nodes_min is None else nodes_min
    nodes_max = min(NODES_MAX, 2 * nodes) if nodes_max is None else nodes_max
    if nodes_min > nodes_max:
        raise ClusterError(f"--min {nodes_min} is above --max {nodes_max}")
    return nodes_min, nodes_max


def _zone_names(zones: str) -> list[str]:
    """The zones ``--zones`` names, in order (none when it is empty)."""
    zone_names = [zone.strip() for zone in zones.split(",")] if zones else []
    if any(not zone for zone in zone_names):
        raise ClusterError(f"--zones {zones!r} names an empty zone")
    return zone_names


def _warn_one_zone(spec: ClusterSpec, replication: int) -> None:
    """Warn of the ranges whose every copy sits in one zone (losing it loses them)."""
    in_ring_order = sorted(spec.nodes, key=lambda node: node.token)
    alone = one_zone_windows([node.zone for node in in_ring_order], replication)
    if alone:
        click.echo(
            f"warning: {len(alone)} of {len(in_ring_order)} ranges keep every copy in one zone "
            f"({', '.join(in_ring_order[i].id for i in alone)}): too few nodes outside the "
            f"largest zone for r={replication}; losing that zone loses those ranges"
        )


def _echo_nodes(spec: ClusterSpec, without: Sequence[str]) -> None:
    """One line per node that ``up`` started (and one for those it left out)."""
    for node in spec.nodes:
        zone = f"  zone {node.zone}" if node.zone else ""
        started = "not started (--without)" if node.pid is None else f"pid {node.pid}"
        click.echo(f"  {node.id}  {node.addr}  {started}  token {node.token}{zone}")
    if without:
        click.secho(
            f"warning: {', '.join(without)} left out: its successor takes its range over, "
            "and what no copy holds is marked lost ('smr status', 'smr recover')",
            fg="yellow",
            err=True,
        )


@cluster_group.command("down")
@up_down_cluster_option
@click.option("--grace-s", default=5.0, show_default=True, type=click.FloatRange(0))
def cluster_down(cluster_dir: Path, grace_s: float) -> None:
    """Stop every node (SIGTERM, then SIGKILL after the grace period)."""
    stopped = local_cluster.down(cluster_dir, grace_s)
    click.echo(f"stopped {len(stopped)} nodes" + (f": {', '.join(stopped)}" if stopped else ""))
