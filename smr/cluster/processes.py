"""Node processes of a local cluster on this host: started in their own session (so they
outlive the command that started them, logging to ``DIR/logs/ID.log``), waited for until they
answer, signalled and stopped, each checked first to be really that node's process (a PID may
be reused)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from smr.client.control import Client, NodeUnreachable
from smr.spec.model import ClusterError, ClusterSpec, NodeSpec


def spawn_node(cluster_dir: Path, node_id: str) -> int:
    """Start one node process in its own session; returns its PID."""
    return spawn(
        cluster_dir, f"{node_id}.log", ["node", "--cluster", str(cluster_dir), "--id", node_id]
    )


def spawn(cluster_dir: Path, log_name: str, args: Sequence[str]) -> int:
    """Start ``python -m smr ARGS`` in its own session, its output appended to
    ``logs/LOG_NAME``; returns its PID."""
    logs = cluster_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # The job module is imported by path relative to where the user runs smr.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    with open(logs / log_name, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "smr", *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    return process.pid


def command_of(pid: int) -> list[str] | None:
    """The command line of live process ``pid`` (None if it is gone, a zombie, or not ours
    to read)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        command: list[str] = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return command


def is_our_node(pid: int, node_id: str) -> bool:
    """True if ``pid`` is a live smr node process for ``node_id`` (guards against PID reuse)."""
    command = command_of(pid)
    return command is not None and "smr" in command and "node" in command and node_id in command


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


def wait_answering(
    cluster_dir: Path, nodes: Sequence[NodeSpec], ready_timeout_s: float, what: str = "node"
) -> None:
    """Ping each of ``nodes`` that has a process until it answers; ClusterError quoting the
    node's last log line if its process exits first or it does not answer within
    ``ready_timeout_s`` (``what`` names the node in the message: "node", "new node")."""
    client = Client(timeout_ms=250)
    deadline = time.monotonic() + ready_timeout_s
    try:
        for node in nodes:
            while node.pid is not None:
                try:
                    client.ping(node.addr)
                    break
                except NodeUnreachable:
                    if not is_our_node(node.pid, node.id):
                        raise ClusterError(
                            f"{what} {node.id} exited during start-up: "
                            f"{last_log_line(cluster_dir, node.id)}"
                        ) from None
                    if time.monotonic() > deadline:
                        raise ClusterError(
                            f"{what} {node.id} did not answer within {ready_timeout_s} s: "
                            f"{last_log_line(cluster_dir, node.id)}"
                        ) from None
    finally:
        client.close()


def start_refusal(cluster_dir: Path, node_id: str) -> str | None:
    """Why node ``node_id`` of the local cluster in ``cluster_dir`` refused to start (its
    state on disk not whole, say): a node that cannot start logs one line, "cannot start:
    WHY", and exits. None when its log does not end with such a line."""
    _, said, why = last_log_line(cluster_dir, node_id).partition("cannot start: ")
    return why if said else None


def last_log_line(cluster_dir: Path, node_id: str) -> str:
    """The last line of the node's log, or a word saying there is none."""
    try:
        lines = (cluster_dir / "logs" / f"{node_id}.log").read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(empty log)"
