"""A cluster's description (``DIR/cluster.json``) and the local process launcher.

``cluster.json`` is the contract between ``smr cluster up`` and every other command::

    {"format": 1, "slot_bits": 14, "replication": 0, "job": "examples.wordcount:job",
     "checkpoint_interval_ms": 1000,
     "nodes": [{"id": "n0", "addr": "tcp://127.0.0.1:40001",
                "pub_addr": "tcp://127.0.0.1:40002", "pid": 1234, "token": 0}, ...]}

It holds the nodes as started; the live view (after takeovers and moves) is asked of the
nodes themselves. Node processes run in their own session, so they outlive the command
that started them, log to ``DIR/logs/ID.log`` and write reducer output to
``DIR/output/ID.jsonl``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import psutil

from ring.hashing import SLOT_BITS_DEFAULT, check_slot_bits, even_tokens
from ring.ids import NodeId, Token
from ring.view import Member, Status, View
from smr.client import Client, NodeUnreachable

CLUSTER_FILE: Final = "cluster.json"
CLUSTER_FORMAT: Final = 1
CHECKPOINT_INTERVAL_MS_DEFAULT: Final = 1000
NODES_MAX: Final = 64


class ClusterError(Exception):
    """A cluster could not be read, started or stopped; the message says what to do."""


@dataclass
class NodeSpec:
    """One node as started: its id, inbox and output addresses, process id and token."""

    id: str
    addr: str
    pub_addr: str
    token: int
    pid: int | None = None


@dataclass
class ClusterSpec:
    """The contents of ``cluster.json``."""

    slot_bits: int
    replication: int
    job: str
    nodes: list[NodeSpec]
    checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT
    format: int = CLUSTER_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    def node(self, node_id: str) -> NodeSpec:
        """The node named ``node_id``; ClusterError naming the known ids otherwise."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        known = ", ".join(n.id for n in self.nodes)
        raise ClusterError(f"no node {node_id!r} in this cluster (nodes: {known})")

    def initial_view(self) -> View:
        """The view every node starts from: all nodes up, incarnation 1, version 1."""
        return View(
            Member(NodeId(n.id), 1, n.addr, Token(n.token), "", Status.UP, 1) for n in self.nodes
        )


def read_spec(cluster_dir: Path) -> ClusterSpec:
    """Read ``DIR/cluster.json``; ClusterError if missing or malformed."""
    path = cluster_dir / CLUSTER_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ClusterError(
            f"no cluster at {cluster_dir}: {path} not found (start one with 'smr cluster up')"
        ) from None
    except (OSError, ValueError) as error:
        raise ClusterError(f"cannot read {path}: {error}") from None
    try:
        if raw.get("format") != CLUSTER_FORMAT:
            raise ClusterError(f"{path} has format {raw.get('format')!r}, expected 1")
        nodes = [NodeSpec(**node) for node in raw["nodes"]]
        return ClusterSpec(
            slot_bits=int(raw["slot_bits"]),
            replication=int(raw["replication"]),
            job=str(raw["job"]),
            nodes=nodes,
            checkpoint_interval_ms=int(
                raw.get("checkpoint_interval_ms", CHECKPOINT_INTERVAL_MS_DEFAULT)
            ),
            extra=dict(raw.get("extra", {})),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ClusterError(f"{path} is malformed: {error}") from None


def write_spec(cluster_dir: Path, spec: ClusterSpec) -> None:
    """Write ``DIR/cluster.json`` atomically (readers never see half a file)."""
    path = cluster_dir / CLUSTER_FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(spec), indent=2) + "\n")
    os.replace(temporary, path)


def _free_port() -> int:
    # The port is released again before the node binds it; on loopback the window in which
    # another process could take it is tiny, and a node that cannot bind exits with an error.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def plan_cluster(
    nodes: int,
    replication: int,
    job: str,
    slot_bits: int = SLOT_BITS_DEFAULT,
    checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT,
) -> ClusterSpec:
    """Choose ids, loopback addresses and evenly spaced tokens for ``nodes`` nodes."""
    check_slot_bits(slot_bits)
    if not 1 <= nodes <= NODES_MAX:
        raise ClusterError(f"--nodes must be between 1 and {NODES_MAX}, got {nodes}")
    if not 0 <= replication <= nodes - 1:
        raise ClusterError(
            f"--replication must be between 0 and nodes - 1 ({nodes - 1}), got {replication}"
        )
    if checkpoint_interval_ms <= 0:
        raise ClusterError(f"checkpoint interval must be positive, got {checkpoint_interval_ms}")
    tokens = even_tokens(nodes, slot_bits)
    specs = [
        NodeSpec(
            id=f"n{i}",
            addr=f"tcp://127.0.0.1:{_free_port()}",
            pub_addr=f"tcp://127.0.0.1:{_free_port()}",
            token=int(tokens[i]),
        )
        for i in range(nodes)
    ]
    return ClusterSpec(slot_bits, replication, job, specs, checkpoint_interval_ms)


def spawn_node(cluster_dir: Path, node_id: str) -> int:
    """Start one node process in its own session; returns its PID."""
    logs = cluster_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # The job module is imported by path relative to where the user runs smr.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    with open(logs / f"{node_id}.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "smr", "node", "--cluster", str(cluster_dir), "--id", node_id],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    return process.pid


def is_our_node(pid: int, node_id: str) -> bool:
    """True if ``pid`` is a live smr node process for ``node_id`` (guards against PID reuse)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        command = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return "smr" in command and "node" in command and node_id in command


def stop_nodes(spec: ClusterSpec, grace_s: float = 5.0) -> list[str]:
    """Stop every node of ``spec``: SIGTERM, then SIGKILL after ``grace_s``.

    Returns the ids of nodes that were running. Only processes that are really this
    cluster's nodes are signalled.
    """
    running = [n for n in spec.nodes if n.pid is not None and is_our_node(n.pid, n.id)]
    for node in running:
        _signal(node, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(is_our_node(n.pid, n.id) for n in running if n.pid is not None):
            break
        time.sleep(0.05)
    for node in running:
        if node.pid is not None and is_our_node(node.pid, node.id):
            _signal(node, signal.SIGKILL)
    for node in running:
        _wait_gone(node)
    return [n.id for n in running]


def signal_node(spec: ClusterSpec, node_id: str, signum: signal.Signals) -> int:
    """Send ``signum`` to node ``node_id``; returns its PID. ClusterError if not running."""
    node = spec.node(node_id)
    if node.pid is None or not is_our_node(node.pid, node.id):
        raise ClusterError(f"node {node_id} is not running (pid {node.pid})")
    _signal(node, signum)
    if signum == signal.SIGKILL:
        _wait_gone(node)
    return node.pid


def _signal(node: NodeSpec, signum: signal.Signals) -> None:
    assert node.pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(node.pid, signum)


def _wait_gone(node: NodeSpec, timeout_s: float = 5.0) -> None:
    """Wait until the node's process is gone, reaping it if it is our child (as in tests and
    the demo, where the same process ran `cluster up`), so no zombie lingers."""
    if node.pid is None:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            reaped, _ = os.waitpid(node.pid, os.WNOHANG)
            if reaped:
                return
        except ChildProcessError:
            if not is_our_node(node.pid, node.id):
                return
        time.sleep(0.01)
    raise ClusterError(f"node {node.id} (pid {node.pid}) did not exit within {timeout_s} s")


def up(
    cluster_dir: Path,
    nodes: int,
    replication: int,
    job: str,
    slot_bits: int = SLOT_BITS_DEFAULT,
    checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS_DEFAULT,
    ready_timeout_s: float = 30.0,
) -> ClusterSpec:
    """Start a local cluster and return once every node answers a ping.

    1. Refuse if ``cluster_dir`` already has running nodes.
    2. Plan ids, addresses and tokens; write ``cluster.json`` (nodes read it to start).
    3. Start each node process; record the PIDs in ``cluster.json``.
    4. Ping every node until it answers; if one does not within ``ready_timeout_s`` (or its
       process exits), stop them all and raise ClusterError quoting the node's log.
    """
    cluster_dir = cluster_dir.resolve()
    # 1.
    if (cluster_dir / CLUSTER_FILE).exists():
        old = read_spec(cluster_dir)
        alive = [n.id for n in old.nodes if n.pid is not None and is_our_node(n.pid, n.id)]
        if alive:
            raise ClusterError(
                f"a cluster is already running in {cluster_dir} (nodes {', '.join(alive)}); "
                "stop it with 'smr cluster down' first"
            )
    cluster_dir.mkdir(parents=True, exist_ok=True)
    # 2.
    spec = plan_cluster(nodes, replication, job, slot_bits, checkpoint_interval_ms)
    write_spec(cluster_dir, spec)
    # 3.
    for node in spec.nodes:
        node.pid = spawn_node(cluster_dir, node.id)
    write_spec(cluster_dir, spec)
    # 4.
    client = Client(timeout_ms=250)
    deadline = time.monotonic() + ready_timeout_s
    try:
        for node in spec.nodes:
            while True:
                try:
                    client.ping(node.addr)
                    break
                except NodeUnreachable:
                    if node.pid is None or not is_our_node(node.pid, node.id):
                        raise ClusterError(
                            f"node {node.id} exited during start-up: "
                            f"{_last_log_line(cluster_dir, node.id)}"
                        ) from None
                    if time.monotonic() > deadline:
                        raise ClusterError(
                            f"node {node.id} did not answer within {ready_timeout_s} s: "
                            f"{_last_log_line(cluster_dir, node.id)}"
                        ) from None
    except BaseException:
        stop_nodes(spec, grace_s=1.0)
        raise
    finally:
        client.close()
    return spec


def down(cluster_dir: Path, grace_s: float = 5.0) -> list[str]:
    """Stop the cluster in ``cluster_dir``; returns the ids of the nodes that were running."""
    return stop_nodes(read_spec(cluster_dir), grace_s)


def _last_log_line(cluster_dir: Path, node_id: str) -> str:
    try:
        lines = (cluster_dir / "logs" / f"{node_id}.log").read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(empty log)"
