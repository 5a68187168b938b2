"""Dedup memory against short feeds: what many short-lived mappers leave behind in the nodes.

Every mapper id that ever wrote to a slot keeps a high-water mark there, at the slot's primary
and in each copy, until mapper ids are retired (not built yet). This measures how that grows:
on a local cluster of 3 nodes with ``r = 1``, ``--feeds`` short feeds in a row, each a new
connection (a new mapper id) writing ``--words`` words of the books and flushing. After every
``--every`` feeds, the nodes' ``hwm_entries`` (their status) and RSS are read. At the end the
counts are checked against plain Python. The JSON in ``bench/results/hwm_growth.json`` has
every sample; a plot goes beside it.

    python bench/hwm_growth.py [--feeds 10000] [--words 200] [--every 500]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, check_counts, load_words, machine, versions
from bench.harness import dump_counts, local_cluster, pyplot, write_report

NODES = 3
REPLICATION = 1


def sample(cluster: Any, feeds: int, started: float) -> dict[str, Any]:
    """The nodes' dedup entries and RSS now."""
    rows = cluster.status()
    return {
        "feeds": feeds,
        "elapsed_s": time.monotonic() - started,
        "hwm_entries": sum(row.get("hwm_entries", 0) for row in rows),
        "rss_bytes": sum(row.get("rss_bytes", 0) for row in rows),
    }


def run(feeds: int, words_per_feed: int, every: int) -> dict[str, Any]:
    """``feeds`` short feeds, sampled every ``every``; the report."""
    import smr

    words = load_words(words_per_feed * 50)
    expected: Counter[str] = Counter()
    samples = []
    with local_cluster(NODES, REPLICATION) as (cluster_dir, _spec):
        with smr.connect(cluster_dir) as watcher:
            started = time.monotonic()
            samples.append(sample(watcher, 0, started))
            for index in range(feeds):
                start = (index * words_per_feed) % (len(words) - words_per_feed)
                chunk = words[start : start + words_per_feed]
                with smr.connect(cluster_dir, mapper_id=f"short-{index}") as feed:
                    feed.emit_many([(word, 1) for word in chunk])
                    feed.flush()
                expected.update(chunk)
                if (index + 1) % every == 0:
                    time.sleep(1.5)  # a checkpoint carries the last hwms to the copies
                    samples.append(sample(watcher, index + 1, started))
                    last = samples[-1]
                    print(
                        f"  {index + 1:6} feeds: {last['hwm_entries']:,} hwm entries, "
                        f"RSS {last['rss_bytes'] / 2**20:.0f} MiB",
                        flush=True,
                    )
        check = check_counts(dump_counts([str(cluster_dir)]), dict(expected))
    first, last = samples[1], samples[-1]
    return {
        "benchmark": "hwm_growth",
        "nodes": NODES,
        "replication": REPLICATION,
        "feeds": feeds,
        "words_per_feed": words_per_feed,
        "samples": samples,
        "hwm_entries_per_feed": (last["hwm_entries"] - first["hwm_entries"])
        / max(1, last["feeds"] - first["feeds"]),
        "rss_growth": (last["rss_bytes"] - first["rss_bytes"]) / first["rss_bytes"],
        "check": check,
        "machine": machine(),
        "versions": versions(),
    }


def plot(report: dict[str, Any], path: Path) -> None:
    """hwm entries and RSS of the whole ring against feeds run."""
    plt = pyplot()
    figure, left = plt.subplots(figsize=(7, 4))
    feeds = [s["feeds"] for s in report["samples"]]
    left.plot(feeds, [s["hwm_entries"] / 1000 for s in report["samples"]], color="tab:blue")
    left.set_xlabel("short feeds run (each a new mapper id)")
    left.set_ylabel("hwm entries, thousands", color="tab:blue")
    right = left.twinx()
    right.plot(feeds, [s["rss_bytes"] / 2**20 for s in report["samples"]], color="tab:red")
    right.set_ylabel("RSS of the 3 nodes, MiB", color="tab:red")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feeds", type=int, default=10_000)
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--out", type=Path, default=RESULTS / "hwm_growth.json")
    args = parser.parse_args()
    report = run(args.feeds, args.words, args.every)
    write_report(report, args.out, plot)
    print(
        f"{report['hwm_entries_per_feed']:.0f} hwm entries per feed; ring RSS "
        f"{report['rss_growth']:+.1%}; counts exact {report['check']['exact']}"
    )


if __name__ == "__main__":
    main()
