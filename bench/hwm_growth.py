"""Dedup memory against short feeds: what many short-lived mappers leave behind in the nodes.

Every mapper id that writes to a slot keeps a high-water mark there, at the slot's primary and
in each copy; a mapper that finished is retired after a lease and leaves one entry per store
(``smr.node.retirement``). This measures both, in one run, on local clusters of 3 nodes with
``r = 1`` and a mapper lease of ``--lease-s``:

- ``kept`` (the baseline): ``--baseline-feeds`` short feeds whose ids the program names
  (``mapper_id=``), which never say they finished: their hwms stay.
- ``retired``: ``--feeds`` short feeds with ids of their own, which do.

Each feed is a new connection writing ``--words`` words of the books and closing. After every
``--every`` feeds, the nodes' ``hwm_entries`` (their status) and RSS are read; the retired run
is read once more after a last lease. At the end each run's counts are checked against plain
Python. The JSON in ``bench/results/hwm_growth.json`` has every sample; a plot goes beside it.

    python bench/hwm_growth.py [--feeds 10000] [--baseline-feeds 2000] [--every 500]
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


def run_mode(mode: str, feeds: int, words_per_feed: int, every: int, lease_s: float) -> Any:
    """``feeds`` short feeds on a fresh cluster, sampled every ``every``; the run's report."""
    import smr

    words = load_words(words_per_feed * 50)
    expected: Counter[str] = Counter()
    samples = []
    lease_ms = round(lease_s * 1000)
    with local_cluster(NODES, REPLICATION, mapper_lease_ms=lease_ms) as (cluster_dir, _spec):
        with smr.connect(cluster_dir, mapper_id="watcher") as watcher:
            started = time.monotonic()
            samples.append(sample(watcher, 0, started))
            for index in range(feeds):
                start = (index * words_per_feed) % (len(words) - words_per_feed)
                chunk = words[start : start + words_per_feed]
                named = f"short-{index}" if mode == "kept" else None
                with smr.connect(cluster_dir, mapper_id=named) as feed:
                    feed.emit_many([(word, 1) for word in chunk])
                expected.update(chunk)
                if (index + 1) % every == 0:
                    time.sleep(1.5)  # a checkpoint carries the last hwms to the copies
                    samples.append(sample(watcher, index + 1, started))
                    last = samples[-1]
                    print(
                        f"  {mode} {index + 1:6} feeds: {last['hwm_entries']:,} hwm entries, "
                        f"RSS {last['rss_bytes'] / 2**20:.0f} MiB",
                        flush=True,
                    )
            if mode == "retired":
                time.sleep(lease_s + 2.5)  # the last feeds' lease, and a checkpoint
                samples.append(sample(watcher, feeds, started))
        check = check_counts(dump_counts([str(cluster_dir)]), dict(expected))
    first, last = samples[1], samples[-1]
    return {
        "feeds": feeds,
        "samples": samples,
        "hwm_entries_per_feed": (last["hwm_entries"] - first["hwm_entries"])
        / max(1, last["feeds"] - first["feeds"]),
        "rss_growth": (last["rss_bytes"] - first["rss_bytes"]) / first["rss_bytes"],
        "check": check,
    }


def run(feeds: int, baseline_feeds: int, words_per_feed: int, every: int, lease_s: float) -> Any:
    """Both runs, the baseline first; the report."""
    return {
        "benchmark": "hwm_growth",
        "nodes": NODES,
        "replication": REPLICATION,
        "words_per_feed": words_per_feed,
        "mapper_lease_s": lease_s,
        "runs": {
            "kept": run_mode("kept", baseline_feeds, words_per_feed, every, lease_s),
            "retired": run_mode("retired", feeds, words_per_feed, every, lease_s),
        },
        "machine": machine(),
        "versions": versions(),
    }


def plot(report: dict[str, Any], path: Path) -> None:
    """hwm entries and RSS of the whole ring against feeds run, for both runs."""
    plt = pyplot()
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for mode, color in (("kept", "tab:red"), ("retired", "tab:blue")):
        samples = report["runs"][mode]["samples"]
        feeds = [s["feeds"] for s in samples]
        label = "ids never finished" if mode == "kept" else "finished, retired"
        top.plot(feeds, [s["hwm_entries"] / 1000 for s in samples], color=color, label=label)
        bottom.plot(feeds, [s["rss_bytes"] / 2**20 for s in samples], color=color, label=label)
    top.set_ylabel("hwm entries, thousands")
    bottom.set_ylabel("RSS of the 3 nodes, MiB")
    bottom.set_xlabel("short feeds run (each a new mapper id)")
    top.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feeds", type=int, default=10_000)
    parser.add_argument("--baseline-feeds", type=int, default=2_000)
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--lease-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "hwm_growth.json")
    args = parser.parse_args()
    report = run(args.feeds, args.baseline_feeds, args.words, args.every, args.lease_s)
    write_report(report, args.out, plot)
    for mode, result in report["runs"].items():
        print(
            f"{mode}: {result['feeds']} feeds, {result['hwm_entries_per_feed']:.1f} hwm entries "
            f"per feed; ring RSS {result['rss_growth']:+.1%}; counts exact "
            f"{result['check']['exact']}"
        )


if __name__ == "__main__":
    main()
