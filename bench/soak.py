"""Soak: node memory stays bounded under a sustained full-rate feed with peer backup.

A local cluster of ``--nodes`` nodes with replication ``--replication`` takes a feed that
loops over the books at full speed (no pacing, no combine) for ``--seconds``; every second
the resident memory (RSS) of every node process is sampled with psutil. If tuple-backup
eviction or checkpoint merging leaked, RSS would climb with the tuples fed; bounded memory
shows as a plateau. Reported: peak and final RSS per node, the RSS growth over the second
half of the run, tuples fed, and a plot of RSS over time (``bench/results/soak.json`` and
``soak.png``).

    python bench/soak.py [--seconds 120] [--nodes 3] [--replication 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import RESULTS, load_words, machine, versions  # noqa: E402
from bench.harness import (  # noqa: E402
    cluster_emitter,
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


def main() -> None:
    import psutil

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--replication", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    args = parser.parse_args()
    words = load_words(200_000)
    load_before = os.getloadavg()
    samples: dict[str, list[tuple[float, int]]] = {}
    with local_cluster(args.nodes, args.replication) as (cluster_dir, spec):
        processes = {n.id: psutil.Process(n.pid) for n in spec.nodes}
        started = time.monotonic()
        with feeder_process(
            _feeder, str(cluster_dir), words, args.replication, args.seconds
        ) as feeder:
            while feeder.process.is_alive() or feeder.results.empty():
                elapsed = time.monotonic() - started
                for node_id, process in processes.items():
                    samples.setdefault(node_id, []).append((elapsed, process.memory_info().rss))
                time.sleep(1.0)
                if elapsed > args.seconds + 120:
                    feeder.process.kill()
                    raise SystemExit("soak: the feeder did not finish in time")
            fed = feeder.result(timeout_s=60)
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
    write_report(report, args.out, plot)
    for node_id, summary in nodes.items():
        print(
            f"{node_id}: peak {summary['peak_rss_bytes'] / 2**20:.0f} MiB, final "
            f"{summary['final_rss_bytes'] / 2**20:.0f} MiB, second-half growth "
            f"{summary['second_half_growth_bytes'] / 2**20:+.1f} MiB"
        )
    print(f"fed {fed['tuples']:,} tuples in {args.seconds:.0f} s; results in {args.out}")


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
