"""The local process launcher: a cluster of node processes on this host, on loopback.

``smr cluster up`` plans the nodes (ids ``n0``, ``n1``, ..., free ports on ``127.0.0.1``,
evenly spaced tokens), writes the plan as ``DIR/cluster.json`` (the cluster spec, see
``smr.spec``), starts one ``smr node`` process per node and records their PIDs in the same
file. ``down`` and ``signal_node`` act on those PIDs, checking first that each is really
that node's process (the processes are ``smr.cluster.processes``'s). Node processes run in
their own session, so they outlive the command that started them, log to
``DIR/logs/ID.log`` and write reducer output to ``DIR/output/ID.jsonl``. Each node serves
Prometheus metrics on a loopback port of its own (the spec's ``metrics_addr``; ``smr status
--json`` shows it too).

Everything about the spec itself (``ClusterSpec``, ``read_spec``, ``ClusterError``, ...)
lives in ``smr.spec``; it is re-exported here for scripts that import it with the launcher.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

from smr.api import absolute_job_ref
from smr.cluster.ports import LOOPBACK_HOST, NODES_MAX, free_port, plan_cluster, ports_of
from smr.cluster.processes import (
    command_of,
    is_our_node,
    signal_node,
    spawn,
    spawn_node,
    start_refusal,
    stop_nodes,
    wait_answering,
)
from smr.output.table import TableError, TableTarget
from smr.ring.hashing import SLOT_BITS_DEFAULT
from smr.ring.ids import NodeId, Token
from smr.spec.model import (
    APPLY_RATE_CAP_KEY,
    BALANCE_ABOVE_KEY,
    CHECKPOINT_INTERVAL_MS_DEFAULT,
    CLUSTER_FILE,
    DATA_DIR_KEY,
    MAPPER_LEASE_KEY,
    OUTPUT_TABLE_KEY,
    REJOIN_AFTER_FENCE_KEY,
    REJOIN_AFTER_FENCE_MS_DEFAULT,
    RESTART_LEFT_OUT_KEY,
    ClusterError,
    ClusterSpec,
    NodeSpec,
)
from smr.spec.parse import read_spec, write_spec
from smr.transport.security import KEYS_DIR_NAME, init_keys
from smr.transport.zeromq import use_keys_of

__all__ = [
    "CHECKPOINT_INTERVAL_MS_DEFAULT",
    "CLUSTER_FILE",
    "NODES_MAX",
    "ClusterError",
    "ClusterSpec",
    "NodeSpec",
    "down",
    "is_our_node",
    "plan_cluster",
    "read_spec",
    "signal_node",
    "spawn_node",
    "start_refusal",
    "stop_nodes",
    "up",
    "write_spec",
]

# The ``extra`` entry of the spec holding the PID of the cluster's autoscale controller.
AUTOSCALE_PID_KEY: Final = "autoscale_pid"
# The ``extra`` entry of the spec holding the index of the next node added (``n<index>``).
NEXT_NODE_INDEX_KEY: Final = "next_node_index"
"""Every local node binds and advertises this host: the cluster is reachable from this
machine only."""


def up(
    cluster_dir: Path,
    nodes: int,
    replication: int,
    job: str,
    slot_bits: int = SLOT_BITS_DEFAULT,
    checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT,
    ready_timeout_s: float = 30.0,
    rejoin_after_fence_ms: int | None = REJOIN_AFTER_FENCE_MS_DEFAULT,
    zones: Sequence[str] = (),
    apply_rate_cap_per_s: float | None = None,
    balance_above: float | None = None,
    secure: bool = True,
    mapper_lease_ms: int | None = None,
    data_dir: Path | None = None,
    output_table: TableTarget | None = None,
    without: Sequence[str] = (),
) -> ClusterSpec:
    """Start a local cluster and return once every node answers a ping (node ``i`` in zone
    ``zones[i % len(zones)]``, see `plan_cluster`).

    1. Refuse if ``cluster_dir`` already has running nodes. If its cluster keeps its state
       on disk (``data_dir``) and some node has a snapshot there, restart that cluster
       instead: the same spec (nodes, addresses, incarnation: a feed's rerun resumes), each
       node restoring its state (``smr.node.disk``); go to step 3. Refuse another job, and
       a node whose folder holds no state (``state_missing``) unless ``without`` names it:
       the nodes ``without`` names are not started, and their successors take their
       ranges over as from a dead node, marking lost what no copy holds.
    2. Plan ids, addresses and tokens and a new cluster incarnation (the nodes start empty:
       this is a new life of the cluster); write ``cluster.json`` (nodes read it to start),
       with ``data_dir`` if given (the nodes then keep their state there), and with
       ``output_table`` if given, once it is reached and its tables made (the nodes then
       write their output there too, ``smr.output.table``).
       With ``secure``, make the cluster's keys (``DIR/keys``) unless it has them already
       (clients given them keep working); without, refuse a directory that has keys (its
       nodes would use them).
    3. Start each node process; record the PIDs in ``cluster.json``.
    4. Ping every node until it answers; if one does not within ``ready_timeout_s`` (or its
       process exits), stop them all and raise ClusterError quoting the node's log.
    """
    cluster_dir = cluster_dir.resolve()
    # A job file is stored by its absolute path: feeds and nodes find it from anywhere.
    job = absolute_job_ref(job, Path.cwd())
    # 1.
    old = _stopped_cluster(cluster_dir)
    if old is not None and state_on_disk(old):
        _restart(cluster_dir, old, job, ready_timeout_s, without)
        return old
    if without:
        raise ClusterError(
            f"--without leaves nodes out of a restart from disk, and {cluster_dir} holds no "
            "cluster with state on disk"
        )
    # 2.
    spec = plan_cluster(nodes, replication, job, slot_bits, checkpoint_interval_ms, zones)
    spec.incarnation = uuid.uuid4().hex[:16]
    spec.extra[REJOIN_AFTER_FENCE_KEY] = rejoin_after_fence_ms
    spec.extra[NEXT_NODE_INDEX_KEY] = nodes
    for key, value in [
        (APPLY_RATE_CAP_KEY, apply_rate_cap_per_s),
        (BALANCE_ABOVE_KEY, balance_above),
        (MAPPER_LEASE_KEY, mapper_lease_ms),
    ]:
        if value is not None:
            spec.extra[key] = value
    _place_state(spec, data_dir, output_table)
    spec.mapper_lease_ms()
    spec.apply_rate_cap_per_s()  # refuse a bad cap or threshold before any node starts
    spec.balance_above()
    # Only now, every argument checked: a refused cluster leaves no directory behind.
    cluster_dir.mkdir(parents=True, exist_ok=True)
    _prepare_keys(cluster_dir, secure)
    write_spec(cluster_dir, spec)
    _start_and_wait(cluster_dir, spec, ready_timeout_s)
    return spec


def _stopped_cluster(cluster_dir: Path) -> ClusterSpec | None:
    """Step 1 of ``up``: the spec of the cluster ``cluster_dir`` already holds (None when it
    holds none); ClusterError if any of its nodes still runs."""
    if not (cluster_dir / CLUSTER_FILE).exists():
        return None
    old = read_spec(cluster_dir)
    alive = [n.id for n in old.nodes if n.pid is not None and is_our_node(n.pid, n.id)]
    if alive:
        raise ClusterError(
            f"a cluster is already running in {cluster_dir} (nodes {', '.join(alive)}); "
            "stop it with 'smr cluster down' first"
        )
    return old


def _place_state(
    spec: ClusterSpec, data_dir: Path | None, output_table: TableTarget | None
) -> None:
    """Step 2 of ``up``: where the new cluster keeps its state (``data_dir``, refused unless
    empty) and writes its output (``output_table``, once reached and its tables made)."""
    if data_dir is not None:
        if data_dir.is_dir() and any(data_dir.iterdir()):
            raise ClusterError(
                f"--data-dir {data_dir} is not empty: it holds the state of another cluster; "
                "restart that one with 'smr cluster up' on its own directory, or choose an "
                "empty data directory"
            )
        spec.extra[DATA_DIR_KEY] = str(data_dir.resolve())
    if output_table is not None:
        try:
            output_table.prepare()
        except TableError as error:
            raise ClusterError(str(error)) from None
        spec.extra[OUTPUT_TABLE_KEY] = output_table.to_json()


def _prepare_keys(cluster_dir: Path, secure: bool) -> None:
    """Step 2 of ``up``: with ``secure``, the cluster's keys (made unless it has them: clients
    given them keep working); without, refuse a directory that has keys (its nodes would use
    them). This process then uses them, as any client of the cluster."""
    keys_dir = cluster_dir / KEYS_DIR_NAME
    if secure and not keys_dir.exists():
        init_keys(cluster_dir)
    elif not secure and keys_dir.exists():
        raise ClusterError(
            f"{keys_dir} exists, so the nodes would require keys: remove it to run without "
            "security, or leave out --insecure"
        )
    use_keys_of(cluster_dir)  # the pings of step 4, as any client of this cluster


def state_on_disk(spec: ClusterSpec) -> bool:
    """True when the cluster keeps its state on disk and some node has a snapshot there:
    ``up`` then restarts that cluster (same nodes, addresses, incarnation) from it."""
    data_dir = spec.data_dir()
    if data_dir is None:
        return False
    # Here, not at the top: the node's package is only needed to read a disk there is.
    from smr.node.disk import DiskState

    return any(DiskState(data_dir / node.id).has_state() for node in spec.nodes)


def state_missing(spec: ClusterSpec) -> dict[str, str]:
    """The nodes of ``spec`` whose folder in the data directory holds no state though some
    other node's does, each with one line saying so. A node writes its first generation
    before it answers (``smr.node.loop``), so in a cluster that ran with ``--data-dir`` a node
    without files lost them (removed, or moved aside): restarting it empty would serve its
    range empty, in silence."""
    data_dir = spec.data_dir()
    if data_dir is None:
        return {}
    from smr.node.disk import DiskState  # here: the node's package only for a disk there is

    having = [node.id for node in spec.nodes if DiskState(data_dir / node.id).has_state()]
    if not having:
        return {}
    return {
        node.id: (
            f"{node.id}: {data_dir / node.id} holds no state, though {', '.join(having)} "
            "hold theirs (removed, or moved aside?); refusing to restore in part: put its "
            "files back"
        )
        for node in spec.nodes
        if node.id not in having
    }


def state_damaged(spec: ClusterSpec, without: Sequence[str] = ()) -> dict[str, str]:
    """The nodes to start whose newest generation on disk is not whole (a file damaged,
    missing or shorter than its manifest says, ``DiskState.check``), each with one line
    naming the file and why. Asked before any node starts: a node started beside one that
    refuses would write checkpoints, fence or take over by a view that the refused restart
    never serves."""
    data_dir = spec.data_dir()
    if data_dir is None:
        return {}
    from smr.node.disk import DiskError, DiskState  # here: the node's package only for a disk

    damaged: dict[str, str] = {}
    for node in spec.nodes:
        if node.id in without:
            continue
        try:
            DiskState(data_dir / node.id, spec.incarnation).check()
        except DiskError as error:
            damaged[node.id] = str(error)
    return damaged


def _restart(
    cluster_dir: Path, spec: ClusterSpec, job: str, ready_timeout_s: float, without: Sequence[str]
) -> None:
    """Step 1 of ``up``, when the cluster keeps its state on disk: restart it."""
    if spec.job != job:
        raise ClusterError(
            f"{cluster_dir} holds the state of job {spec.job!r} on disk, not {job!r}: "
            "start that job, or remove the directory to start anew"
        )
    unknown = sorted(set(without) - {node.id for node in spec.nodes})
    if unknown:
        raise ClusterError(f"--without {', '.join(unknown)}: no such node in this cluster")
    if len(set(without)) >= len(spec.nodes):
        raise ClusterError("--without leaves no node to start")
    missing = [line for node, line in state_missing(spec).items() if node not in without]
    if missing:
        raise ClusterError("\n".join(missing))
    damaged = state_damaged(spec, without)
    if damaged:
        raise ClusterError("\n".join(damaged.values()))
    # The nodes left out, for those restored from a crash (smr.node.restart): read by
    # each node as it starts, so written before any starts.
    spec.extra[RESTART_LEFT_OUT_KEY] = sorted(set(without))
    write_spec(cluster_dir, spec)
    use_keys_of(cluster_dir)
    _start_and_wait(cluster_dir, spec, ready_timeout_s, without)


def _start_and_wait(
    cluster_dir: Path, spec: ClusterSpec, ready_timeout_s: float, without: Sequence[str] = ()
) -> None:
    """Steps 3 and 4 of ``up`` (the nodes ``without`` names are not started)."""
    # 3.
    for node in spec.nodes:
        node.pid = None if node.id in without else spawn_node(cluster_dir, node.id)
    write_spec(cluster_dir, spec)
    # 4.
    try:
        wait_answering(cluster_dir, spec.nodes, ready_timeout_s)
    except BaseException:
        stop_nodes(spec, grace_s=1.0)
        raise


def down(cluster_dir: Path, grace_s: float = 5.0) -> list[str]:
    """Stop the cluster in ``cluster_dir``; returns the ids of the nodes that were running.

    The autoscale controller, if one was started with the cluster, stops first, so that it
    adds no node while the others stop; the spec is read after it, with any node it added.
    """
    stop_autoscaler(cluster_dir, grace_s)
    return stop_nodes(read_spec(cluster_dir), grace_s)


def spawn_autoscaler(cluster_dir: Path, args: Sequence[str]) -> int:
    """Start ``smr autoscale run`` on the cluster (with ``args``) in its own session, its
    output in ``logs/autoscale.log``; record its PID in the spec (``down`` stops it)."""
    cluster_dir = cluster_dir.resolve()
    pid = spawn(
        cluster_dir, "autoscale.log", ["autoscale", "run", "--cluster", str(cluster_dir), *args]
    )
    spec = read_spec(cluster_dir)
    spec.extra[AUTOSCALE_PID_KEY] = pid
    write_spec(cluster_dir, spec)
    return pid


def stop_autoscaler(cluster_dir: Path, grace_s: float = 5.0) -> bool:
    """Stop the cluster's autoscale controller, if it runs (SIGTERM: it ends its round; then
    SIGKILL after ``grace_s``); whether one was running."""
    spec = read_spec(cluster_dir)
    pid = spec.extra.get(AUTOSCALE_PID_KEY)
    if not isinstance(pid, int) or not _is_our_autoscaler(pid, cluster_dir):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _is_our_autoscaler(pid, cluster_dir):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if _is_our_autoscaler(pid, cluster_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return True


def _is_our_autoscaler(pid: int, cluster_dir: Path) -> bool:
    """True if ``pid`` is a live ``smr autoscale run`` on this cluster (not a reused PID)."""
    command = command_of(pid)
    return command is not None and "autoscale" in command and str(cluster_dir.resolve()) in command


def add_node(cluster_dir: Path, ready_timeout_s: float = 30.0, zone: str = "") -> NodeSpec:
    """Start one more node in fault zone ``zone``, on standby (it owns nothing until it
    joins: ``smr scale out``), record it in the cluster's spec, and return once it answers
    a ping."""
    return add_nodes(cluster_dir, [zone], ready_timeout_s)[0]


def add_nodes(
    cluster_dir: Path, zones: Sequence[str], ready_timeout_s: float = 30.0
) -> list[NodeSpec]:
    """Start one more node per entry of ``zones`` (its fault zone), side by side, on
    standby; record them in the cluster's spec and return once each answers a ping (a
    process takes a second or two to start: several started one after the other would
    take as many times that)."""
    spec = read_spec(cluster_dir)
    nodes = []
    taken = ports_of(spec)
    for zone in zones:
        # A removed node's id stays in the other nodes' views (as left, or dead): a new
        # node of the same id would be taken for it. So ids are never reused in a
        # cluster's life.
        index = _next_node_index(spec)
        spec.extra[NEXT_NODE_INDEX_KEY] = index + 1
        node = NodeSpec(
            id=NodeId(f"n{index}"),
            addr=f"tcp://{LOOPBACK_HOST}:{free_port(taken)}",
            pub_addr=f"tcp://{LOOPBACK_HOST}:{free_port(taken)}",
            token=Token(0),
            zone=zone,
            standby=True,
            metrics_addr=f"{LOOPBACK_HOST}:{free_port(taken)}",
        )
        spec.nodes.append(node)
        spec.seeds.append(node.addr)
        nodes.append(node)
    write_spec(cluster_dir, spec)
    for node in nodes:
        node.pid = spawn_node(cluster_dir, node.id)
    write_spec(cluster_dir, spec)
    wait_answering(cluster_dir, nodes, ready_timeout_s, what="the new node")
    return nodes


def remove_node(cluster_dir: Path, node_id: str, grace_s: float = 5.0) -> None:
    """Stop node ``node_id`` (it left the ring: it owns nothing) and drop it from the
    cluster's spec, so that ``status``, ``feed`` and ``down`` no longer look for it."""
    spec = read_spec(cluster_dir)
    node = spec.node(node_id)
    stop_nodes(replace(spec, nodes=[node]), grace_s)
    spec.extra[NEXT_NODE_INDEX_KEY] = _next_node_index(spec)
    spec.nodes = [other for other in spec.nodes if other.id != node_id]
    spec.seeds = [seed for seed in spec.seeds if seed != node.addr]
    write_spec(cluster_dir, spec)


def _next_node_index(spec: ClusterSpec) -> int:
    """The index of the next node added: past every node of the spec and every node ever
    added or removed (recorded in ``extra``)."""
    indexes = [int(node.id[1:]) for node in spec.nodes if node.id[1:].isdigit()]
    return max(
        [len(spec.nodes), int(spec.extra.get(NEXT_NODE_INDEX_KEY, 0))] + [i + 1 for i in indexes]
    )
