"""The one harness every benchmark of smr drives a cluster with: start a local cluster that is
always stopped, feed it from a process of its own through an Emitter built from the cluster's
spec, read the nodes' status, signal nodes, dump the counts, and write the results (JSON and
plot).

A run goes through it in this order:

1. ``local_cluster``: a fresh cluster of the word-count job in a temporary directory.
2. ``feeder_process`` (or ``run_feeder`` for a feeder that runs to its end): a spawned process
   that builds its emitter with ``cluster_emitter`` and puts its figures on a queue.
3. ``node_statuses`` / ``cluster_statuses`` while it runs or after it, ``check_applied`` to
   see the primaries applied every tuple sent, ``signal_at_once`` to kill nodes.
4. ``dump_counts``: every key's count, for ``bench.common.check_counts`` against the oracle.
5. ``write_report``: the JSON and its plot (``pyplot`` gives matplotlib without a display).

smr is used only through ``smr.client``, ``smr.cluster`` and ``smr.mapper.emitter``, imported inside
the functions: a spawned feeder imports them itself, and importing this module starts nothing.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import JOB, machine

REPO = Path(__file__).resolve().parents[1]

__all__ = [
    "FeederProcess",
    "check_applied",
    "cluster_emitter",
    "cluster_statuses",
    "dump_counts",
    "feeder_process",
    "local_cluster",
    "machine_around",
    "node_statuses",
    "pyplot",
    "run_feeder",
    "signal_at_once",
    "smr_command",
    "stop_process",
    "timed_run",
    "write_report",
]


# -- 1. the cluster --------------------------------------------------------------------------


@contextlib.contextmanager
def local_cluster(
    nodes: int,
    replication: int,
    checkpoint_interval_ms: int = 1000,
    job: str = JOB,
    apply_rate_cap_per_s: float | None = None,
    balance_above: float | None = None,
    mapper_lease_ms: int | None = None,
    data_dir: Path | None = None,
    output_table: Any = None,
    slot_bits: int | None = None,
) -> Iterator[tuple[Path, Any]]:
    """A fresh local cluster of ``job`` (the word count unless given) in a temporary
    directory, its nodes capped at ``apply_rate_cap_per_s`` and balancing above
    ``balance_above`` if given, writing to ``output_table`` (a
    ``smr.output.table.TableTarget``) if given, with ``2**slot_bits`` slots if given (else
    the default); yields its directory
    and ``ClusterSpec``, and stops every node (``smr.cluster.local.down``) on the way out,
    whatever happened."""
    from smr.cluster.local import down, up
    from smr.ring.hashing import SLOT_BITS_DEFAULT
    from smr.transport.security import KEYS_DIR_NAME, KEYS_ENV

    keys_before = os.environ.get(KEYS_ENV)
    with tempfile.TemporaryDirectory(prefix="smr-bench-") as workdir:
        cluster_dir = Path(workdir) / "cluster"
        try:
            spec = up(
                cluster_dir,
                nodes,
                replication,
                job,
                slot_bits=SLOT_BITS_DEFAULT if slot_bits is None else slot_bits,
                checkpoint_interval_ms=checkpoint_interval_ms,
                apply_rate_cap_per_s=apply_rate_cap_per_s,
                balance_above=balance_above,
                mapper_lease_ms=mapper_lease_ms,
                data_dir=data_dir,
                output_table=output_table,
            )
            # Processes this one spawns (feeders) reach the cluster with its keys too.
            if (cluster_dir / KEYS_DIR_NAME).is_dir():
                os.environ[KEYS_ENV] = str(cluster_dir / KEYS_DIR_NAME)
            yield cluster_dir, spec
        finally:
            if keys_before is None:
                os.environ.pop(KEYS_ENV, None)
            else:
                os.environ[KEYS_ENV] = keys_before
            if (cluster_dir / "cluster.json").exists():
                down(cluster_dir, grace_s=3.0)


# -- 2. feeding ------------------------------------------------------------------------------


def cluster_emitter(cluster: Path | str | Any, mapper_id: str, **options: Any) -> Any:
    """An ``Emitter`` into the cluster ``cluster`` (its directory, or its ``ClusterSpec``) as
    mapper ``mapper_id``: the live view of its nodes, its slot bits and, unless ``options``
    say otherwise, its replication; ``options`` go to ``Emitter`` as they are."""
    from smr.checkpoint.ids import MapperId
    from smr.client.control import fetch_view
    from smr.mapper.emitter import Emitter
    from smr.spec.parse import read_spec

    spec = read_spec(Path(cluster)) if isinstance(cluster, str | Path) else cluster
    options.setdefault("replication", spec.replication)
    view = fetch_view([n.addr for n in spec.nodes])
    return Emitter(view, spec.slot_bits, MapperId(mapper_id), **options)


@dataclass
class FeederProcess:
    """A feeder running in a spawned process: it puts its figures on ``results``; ``stop``,
    when the feeder takes one, tells it to stop feeding."""

    process: Any
    results: Any
    stop: Any | None = None

    def request_stop(self) -> None:
        """Tell a feeder started with ``stoppable`` to stop feeding (it then finishes up and
        puts its figures); ValueError for a feeder that takes no stop event."""
        if self.stop is None:
            raise ValueError(
                "this feeder was started without stoppable=True: it cannot be told to stop"
            )
        self.stop.set()

    def result(self, timeout_s: float) -> Any:
        """The next thing the feeder put on ``results``; ``queue.Empty`` after ``timeout_s``."""
        return self.results.get(timeout=timeout_s)


@contextlib.contextmanager
def feeder_process(
    target: Callable[..., None], *args: Any, stoppable: bool = False
) -> Iterator[FeederProcess]:
    """Start ``target(*args, [stop,] results)`` in a spawned process (a fresh interpreter: no
    state of this one, its sockets or its threads, leaks into the feeder). With ``stoppable``
    the feeder also gets an event to stop on. On the way out the event is set and the process
    is stopped (``stop_process``), whatever happened."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    stop = context.Event() if stoppable else None
    process = context.Process(target=target, args=(*args, *([stop] if stop else []), results))
    process.start()
    try:
        yield FeederProcess(process, results, stop)
    finally:
        if stop is not None:
            stop.set()
        stop_process(process)


def run_feeder(target: Callable[..., None], *args: Any, timeout_s: float) -> Any:
    """Run ``target(*args, results)`` in a spawned process to its end and return the figures
    it put on ``results``; ``queue.Empty`` if none came within ``timeout_s``."""
    with feeder_process(target, *args) as feeder:
        return feeder.result(timeout_s)


def smr_command(*args: str) -> list[str]:
    """The command line of ``smr ARGS`` run by this Python (``timed_run`` runs it)."""
    return [sys.executable, "-m", "smr", *args]


def timed_run(command: list[str]) -> float:
    """Run ``command`` to its end from the repository (so jobs import); its wall time.
    CalledProcessError, with its output, if it fails."""
    started = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - started


def stop_process(process: Any, grace_s: float = 5.0) -> None:
    """Stop a benchmark's helper process by its PID: wait ``grace_s``, then SIGKILL it."""
    if process.pid is None:
        return
    process.join(grace_s)
    if process.is_alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.join(5.0)


# -- 3. the nodes ----------------------------------------------------------------------------


def node_statuses(client: Any, addrs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``status`` of every node in ``addrs`` (id -> address), by id."""
    return {node: client.status(addr) for node, addr in addrs.items()}


def cluster_statuses(spec: Any) -> dict[str, dict[str, Any]]:
    """``status`` of every node of the cluster ``spec``, by id, with a client of its own."""
    from smr.client.control import Client

    client = Client()
    try:
        return node_statuses(client, {n.id: n.addr for n in spec.nodes})
    finally:
        client.close()


def check_applied(statuses: Iterable[dict[str, Any]], result: dict[str, Any]) -> None:
    """AssertionError unless the nodes applied, as primaries, exactly the ``tuples_sent`` of a
    feeder's ``result`` (every tuple acked was applied once)."""
    applied = sum(row["tuples_applied"] for row in statuses)
    assert applied == result["tuples_sent"], (applied, result)


def signal_at_once(
    spec: Any, victims: Sequence[str], signum: signal.Signals = signal.SIGKILL
) -> dict[str, float]:
    """Send ``signum`` to every victim at the same moment (one thread each, released together
    by a barrier, so no victim's failure is noticed before another is hit); the wall time
    each signal was sent, by victim."""
    from smr.cluster.local import signal_node

    barrier = threading.Barrier(len(victims))
    sent_at: dict[str, float] = {}
    errors: list[BaseException] = []

    def send(victim: str) -> None:
        barrier.wait()
        sent_at[victim] = time.time()
        try:
            signal_node(spec, victim, signum)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=send, args=(v,)) for v in victims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return sent_at


# -- 4. the counts ---------------------------------------------------------------------------


def dump_counts(addrs: Sequence[str]) -> dict[Any, int]:
    """Every key's ``count``, scanned from each slot's primary in the live view of the nodes
    at ``addrs`` (as ``smr dump`` does); AssertionError if a key is dumped twice."""
    from smr.connection import connect

    counts: dict[Any, int] = {}
    with connect(addrs) as cluster:
        for key, state in cluster.scan():
            assert key not in counts, f"key {key!r} dumped twice"
            counts[key] = state["count"]
    return counts


# -- 5. the results --------------------------------------------------------------------------


def machine_around(before: dict[str, Any]) -> dict[str, Any]:
    """The machine (``bench.common.machine``) taken ``before`` a run, with the load average
    before it and now, after it."""
    around = {key: value for key, value in before.items() if key != "loadavg"}
    around["loadavg_after"] = machine()["loadavg"]
    around["loadavg_before"] = before["loadavg"]
    return around


def pyplot() -> Any:
    """``matplotlib.pyplot`` drawing to files only (the Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_report(
    report: dict[str, Any],
    out: Path,
    plot: Callable[[dict[str, Any], Path], None],
    json_default: Callable[[Any], Any] | None = None,
) -> None:
    """Write ``report`` as indented JSON to ``out`` (creating its directory) and draw it with
    ``plot`` to the PNG beside it; ``json_default`` turns what JSON cannot hold into what it
    can."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=json_default) + "\n")
    plot(report, out.with_suffix(".png"))
