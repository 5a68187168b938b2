"""Restart from disk: how long a whole cluster takes to come back with its state.

For each size in ``--keys`` (100 k and 1 M by default), on a local cluster of 3 nodes with
``r = 1`` keeping its state on disk (``--data-dir``): feed that many distinct keys once each,
then ``smr cluster down`` and ``smr cluster up`` on the same directory. Measured in the same
run, against the way back without disk (a new empty cluster, and the whole input fed again):

- the restart from disk: ``up`` until every node answers (the nodes restore before they
  listen), and each node's own restore time (``restore_s`` in its status);
- the baseline: ``up`` of an empty cluster plus the feed of the same keys.

The state after the restart is checked against the keys fed, every count exact. The JSON in
``bench/results/restore.json``; a plot goes beside it.

    python bench/restore.py [--keys 100000 1000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, check_counts, machine, versions
from bench.harness import dump_counts, local_cluster, pyplot, write_report

NODES = 3
REPLICATION = 1
JOB = "examples.wordcount:job"
CHUNK = 50_000


def feed_keys(cluster_dir: Path, keys: int) -> float:
    """Emit ``k0`` .. ``k{keys-1}`` once each and flush; the seconds it took."""
    import smr

    started = time.monotonic()
    with smr.connect(cluster_dir) as cluster:
        for start in range(0, keys, CHUNK):
            cluster.emit_many([(f"k{i}", 1) for i in range(start, min(keys, start + CHUNK))])
        cluster.flush()
    return time.monotonic() - started


def measure(keys: int) -> dict[str, Any]:
    """One size: the restart from disk, and the baseline, in this order."""
    import smr
    from smr.cluster.local import down, up
    from smr.spec.parse import read_spec

    with tempfile.TemporaryDirectory(prefix="smr-restore-") as work:
        data_dir = Path(work) / "data"
        with local_cluster(NODES, REPLICATION, data_dir=data_dir) as (cluster_dir, _spec):
            feed_s = feed_keys(cluster_dir, keys)
            time.sleep(1.5)  # the last checkpoint is on disk, and the copies have it
            started = time.monotonic()
            down(cluster_dir)
            down_s = time.monotonic() - started
            started = time.monotonic()
            up(cluster_dir, NODES, REPLICATION, JOB, ready_timeout_s=300)
            up_s = time.monotonic() - started
            with smr.connect(cluster_dir) as watcher:
                rows = watcher.status()
            spec = read_spec(cluster_dir)
            check = check_counts(dump_counts([str(cluster_dir)]), {f"k{i}": 1 for i in range(keys)})
            nodes = {
                row["node"]: {
                    "restore_s": row.get("restore_s"),
                    "restored_keys": row.get("restored_keys"),
                    "snapshot_bytes": row.get("disk_snapshot_bytes"),
                    "log_bytes": row.get("disk_log_bytes"),
                }
                for row in rows
            }
            assert spec.data_dir() == data_dir.resolve()
        # The baseline: a new empty cluster, and the same keys fed again.
        started = time.monotonic()
        with local_cluster(NODES, REPLICATION) as (cluster_dir, _spec):
            cold_up_s = time.monotonic() - started
            refeed_s = feed_keys(cluster_dir, keys)
    print(
        f"  {keys:,} keys: restart from disk {up_s:.2f} s (down {down_s:.2f} s); "
        f"empty cluster {cold_up_s:.2f} s + feed {refeed_s:.2f} s; exact {check['exact']}",
        flush=True,
    )
    return {
        "keys": keys,
        "first_feed_s": feed_s,
        "down_s": down_s,
        "restart_up_s": up_s,
        "restore_s_max": max(n["restore_s"] or 0 for n in nodes.values()),
        "nodes": nodes,
        "baseline_up_s": cold_up_s,
        "baseline_feed_s": refeed_s,
        "ratio": (cold_up_s + refeed_s) / up_s,
        "check": check,
    }


def plot(report: dict[str, Any], path: Path) -> None:
    """Seconds to have the state back, from disk and by feeding again, per size."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, 4))
    runs = report["runs"]
    labels = [f"{run['keys'] // 1000:,} k keys" for run in runs]
    positions = range(len(runs))
    axes.bar(
        [p - 0.2 for p in positions],
        [r["restart_up_s"] for r in runs],
        0.4,
        label="restart from disk",
    )
    axes.bar(
        [p + 0.2 for p in positions],
        [r["baseline_up_s"] + r["baseline_feed_s"] for r in runs],
        0.4,
        label="empty cluster + feed again",
    )
    axes.set_xticks(list(positions), labels)
    axes.set_ylabel("seconds")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--out", type=Path, default=RESULTS / "restore.json")
    args = parser.parse_args()
    report = {
        "benchmark": "restore",
        "nodes": NODES,
        "replication": REPLICATION,
        "runs": [measure(keys) for keys in args.keys],
        "machine": machine(),
        "versions": versions(),
    }
    write_report(report, args.out, plot)


if __name__ == "__main__":
    main()
