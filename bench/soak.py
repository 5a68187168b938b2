"""Soak: node memory stays bounded under a sustained full-rate feed with peer backup.

A local cluster of ``--nodes`` nodes with replication ``--replication`` takes a feed that
loops over the books at full speed (no pacing, no combine) for ``--seconds``; every second
the resident memory (RSS) of every node process is sampled with psutil. If tuple-backup
eviction or checkpoint merging leaked, RSS would climb with the tuples fed; bounded memory
shows as a plateau. Reported: peak and final RSS per node, the RSS growth over the second
half of the run, tuples fed, and a plot of RSS over time (``bench/results/soak.json`` and
``soak.png``).

With ``--fault-every-s S`` (``bench/results/soak_faults.json``), the ring also loses and
gains a node every S seconds while the feed runs: S/3 into each period a node is SIGKILLed
(a serving one, at random, once every slot has its ``r`` copies again) and 5 S/6 into it
``smr scale out`` starts a new node that joins beside the busiest. Then the figure is the
whole ring's RSS (every live node's, summed) at the same point of each period, just before
the kill, with the same number of nodes each time: its growth from the first period to
the last. The counts are checked against plain Python at the end: every tuple the feeder
emitted, exactly once, through every kill and join.

    python bench/soak.py [--seconds 120] [--nodes 3] [--replication 1]
    python bench/soak.py --seconds 600 --fault-every-s 60 --out bench/results/soak_faults.json
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import (  # noqa: E402
    RESULTS,
    check_counts,
    load_words,
    machine,
    stream_counts,
    versions,
)
from bench.harness import (  # noqa: E402
    cluster_emitter,
    dump_counts,
    feeder_process,
    local_cluster,
    pyplot,
    write_report,
)


def _feeder(
    cluster_dir: str, words: list[str], replication: int, seconds: float, results: Any
) -> None:
    emitter = cluster_emitter(cluster_dir, f"soak-{os.getpid()}", replication=replication)
    emit = emitter.emit
    deadline = time.monotonic() + seconds
    fed = 0
    while time.monotonic() < deadline:
        for word in words:
            emit(word, 1)
        fed += len(words)
    emitter.close()
    results.put({"tuples": fed, "tuples_acked": emitter.tuples_acked})


class Faults:
    """The kills and joins of a soak with faults, one of each per period, on a local
    cluster; what happened, for the report."""

    def __init__(self, cluster_dir: Path, period_s: float, seed: int = 11) -> None:
        self.cluster_dir = cluster_dir
        self.period_s = period_s
        self.rng = random.Random(seed)
        self.events: list[dict[str, Any]] = []
        self.ring_rss: list[dict[str, Any]] = []
        self._done: set[tuple[int, str]] = set()

    def tick(self, elapsed: float) -> None:
        """Do what is due ``elapsed`` seconds into the feed (once each)."""
        period = int(elapsed // self.period_s)
        phase = elapsed - period * self.period_s
        if phase >= self.period_s / 3 and (period, "kill") not in self._done:
            self._done.add((period, "kill"))
            self.ring_rss.append({"t": elapsed, "period": period, **self._ring_memory()})
            self._kill(elapsed)
        if phase >= 5 * self.period_s / 6 and (period, "join") not in self._done:
            self._done.add((period, "join"))
            self._join(elapsed)

    def _statuses(self) -> list[dict[str, Any]]:
        from smr.connection import connect

        with connect(self.cluster_dir, timeout_s=10) as cluster:
            return cluster.status()

    def _ring_memory(self) -> dict[str, Any]:

        rows = [row for row in self._statuses() if "rss_bytes" in row]
        live = [row for row in rows if row.get("role") == "serving"]
        return {"nodes": len(live), "rss_bytes": sum(row["rss_bytes"] for row in live)}

    def _kill(self, elapsed: float) -> None:
        """SIGKILL a serving node, once every slot has its copies (else the kill would be
        beyond what r = 1 tolerates, not what this soak measures)."""
        deadline = time.monotonic() + 60
        while True:
            rows = [row for row in self._statuses() if row.get("role") == "serving"]
            if sum(row.get("under_replicated_slots", 0) for row in rows) == 0:
                break
            if time.monotonic() > deadline:
                self.events.append({"t": elapsed, "event": "kill skipped: under-replicated"})
                return
            time.sleep(0.5)
        victim = self.rng.choice(sorted(rows, key=lambda row: row["node"]))
        os.kill(victim["pid"], signal.SIGKILL)
        self.events.append({"t": elapsed, "event": "kill", "node": victim["node"]})
        print(f"  {elapsed:6.1f} s: killed {victim['node']}", flush=True)

    def _join(self, elapsed: float) -> None:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "smr", "scale", "out", "--cluster", str(self.cluster_dir)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        outcome = (done.stdout.strip().splitlines() or [done.stderr.strip()])[-1]
        self.events.append(
            {
                "t": elapsed,
                "event": "join",
                "exit": done.returncode,
                "outcome": outcome,
                "took_s": time.monotonic() - started,
            }
        )
        print(f"  {elapsed:6.1f} s: scale out exited {done.returncode}: {outcome}", flush=True)


def main() -> None:
    import psutil

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--replication", type=int, default=1)
    parser.add_argument(
        "--fault-every-s",
        type=float,
        help="Kill a node and join a new one every this many seconds [default: no faults].",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or RESULTS / ("soak_faults.json" if args.fault_every_s else "soak.json")
    words = load_words(200_000)
    load_before = os.getloadavg()
    samples: dict[str, list[tuple[float, int]]] = {}
    faults = None
    check = None
    with local_cluster(args.nodes, args.replication) as (cluster_dir, spec):
        processes = {n.id: psutil.Process(n.pid) for n in spec.nodes}
        if args.fault_every_s:
            faults = Faults(cluster_dir, args.fault_every_s)
        started = time.monotonic()
        with feeder_process(
            _feeder, str(cluster_dir), words, args.replication, args.seconds
        ) as feeder:
            while feeder.process.is_alive() or feeder.results.empty():
                elapsed = time.monotonic() - started
                _sample(cluster_dir, processes, samples, elapsed)
                if faults is not None and elapsed < args.seconds:
                    faults.tick(elapsed)
                time.sleep(1.0)
                if elapsed > args.seconds + 300:
                    feeder.process.kill()
                    raise SystemExit("soak: the feeder did not finish in time")
            fed = feeder.result(timeout_s=60)
        if faults is not None:
            expected = dict(stream_counts(words, fed["tuples"]))
            check = check_counts(dump_counts([str(cluster_dir)]), expected)
    half = args.seconds / 2
    nodes = {}
    for node_id, series in samples.items():
        second_half = [rss for t, rss in series if t >= half]
        nodes[node_id] = {
            "peak_rss_bytes": max(rss for _, rss in series),
            "final_rss_bytes": series[-1][1],
            "second_half_growth_bytes": (second_half[-1] - second_half[0]) if second_half else 0,
            "samples": series,
        }
    report = {
        "benchmark": "soak",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**machine(), "loadavg_before": load_before},
        "versions": versions(),
        "seconds": args.seconds,
        "nodes_count": args.nodes,
        "replication": args.replication,
        "feed": fed,
        "tuples_per_s": fed["tuples"] / args.seconds,
        "nodes": nodes,
    }
    if faults is not None:
        assert check is not None
        first, last = faults.ring_rss[0], faults.ring_rss[-1]
        report["faults"] = {
            "every_s": args.fault_every_s,
            "events": faults.events,
            "ring_rss": faults.ring_rss,
            "ring_rss_growth": (last["rss_bytes"] - first["rss_bytes"]) / first["rss_bytes"],
            "check": check,
        }
        print(
            f"ring RSS before each kill: {first['rss_bytes'] / 2**20:.0f} MiB "
            f"({first['nodes']} nodes) -> {last['rss_bytes'] / 2**20:.0f} MiB "
            f"({last['nodes']} nodes): {report['faults']['ring_rss_growth']:+.1%}; "
            f"counts exact: {check['exact']}"
        )
    write_report(report, out, plot)
    for node_id, summary in nodes.items():
        print(
            f"{node_id}: peak {summary['peak_rss_bytes'] / 2**20:.0f} MiB, final "
            f"{summary['final_rss_bytes'] / 2**20:.0f} MiB, second-half growth "
            f"{summary['second_half_growth_bytes'] / 2**20:+.1f} MiB"
        )
    print(f"fed {fed['tuples']:,} tuples in {args.seconds:.0f} s; results in {out}")


def _sample(
    cluster_dir: Path,
    processes: dict[str, Any],
    samples: dict[str, list[tuple[float, int]]],
    elapsed: float,
) -> None:
    """One RSS sample of every node process alive, the ones a join added included."""
    import psutil

    from smr.spec.parse import read_spec

    for node in read_spec(cluster_dir).nodes:
        if node.id not in processes and node.pid is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                processes[node.id] = psutil.Process(node.pid)
    for node_id, process in list(processes.items()):
        try:
            rss = process.memory_info().rss
        except psutil.NoSuchProcess:
            rss = 0
        if rss == 0:  # killed (a zombie until reaped has none): its line ends here
            del processes[node_id]
            continue
        samples.setdefault(node_id, []).append((elapsed, rss))


def plot(report: dict[str, Any], path: Path) -> None:
    """RSS of every node over time."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for node_id, summary in report["nodes"].items():
        times = [t for t, _ in summary["samples"]]
        rss = [r / 2**20 for _, r in summary["samples"]]
        axes.plot(times, rss, label=node_id)
    axes.set_xlabel("seconds into the feed")
    axes.set_ylabel("RSS (MiB)")
    axes.set_title(
        f"smr soak: {report['nodes_count']} nodes, r={report['replication']}, "
        f"{report['tuples_per_s'] / 1e3:.0f} k tuples/s"
    )
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
