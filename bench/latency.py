"""Latency: how long a word takes from the feeder to the ring, against Spark's micro-batches,
at the same input rates.

What is measured, in one run:

1. **smr peak**: a local cluster of 3 nodes with ``r = 1``; one feeder process emits the
   books' words as fast as it can (no combine, batches of 1000); words per second from the
   first emit until every tuple is acked by both nodes of its replica set. The median of
   ``--runs`` runs is the peak.
2. **smr latency** at 10%, 50% and 80% of that peak: the feeder emits at the set rate (paced per
   millisecond) for ``--seconds``, the emitter sending open batches ``--linger-ms`` after
   their first tuple (its ``linger_ms``, paced emits come at least every millisecond); a
   tuple's latency runs from its ``emit()`` to the ack that completes its batch on all
   ``r + 1`` nodes (the primary acks only after applying it, so this bounds emit-to-applied
   from above). The first second is warm-up and left out.
3. **Spark latency** at the same rates: the native stateful word count (baseline (a) of
   ``bench/spark_queries.py``) over files dripped into its input directory at the rate;
   a file's latency runs from its publication to the commit of the micro-batch that read
   it, at Spark's default trigger (as soon as the previous batch ends).

Each figure is the median of ``--runs`` runs with min and max; the JSON in
``bench/results/latency.json`` records every run, the machine and the versions; a plot goes
to ``bench/results/latency.png``.

    python bench/latency.py [--runs 3] [--seconds 10] [--skip-spark]
"""

from __future__ import annotations

import argparse
import sys
import time
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, load_words, machine, percentile, spread, versions
from bench.harness import cluster_emitter, local_cluster, pyplot, run_feeder, write_report

NODES = 3
REPLICATION = 1
BATCH_SIZE = 1000
WARMUP_S = 1.0
PACE_SLICE_S = 0.001


def percentiles(samples: Sequence[float]) -> dict[str, float | None]:
    """p50, p95, p99 (``bench.common.percentile``) and max of ``samples``, in their unit."""
    return {
        "p50": percentile(samples, 0.50),
        "p95": percentile(samples, 0.95),
        "p99": percentile(samples, 0.99),
        "max": max(samples, default=None),
    }


def paced_feeder(
    cluster_dir: str,
    words: list[str],
    rate: float | None,
    seconds: float,
    linger_ms: float,
    results: Any,
) -> None:
    """Emit ``words`` cyclically, at ``rate`` words/s for ``seconds`` (or all of them once,
    unpaced, when ``rate`` is None), then close; put the figures on ``results``."""
    latencies_ms = array("d")
    started = 0.0

    def on_acked(rows: Sequence[Any]) -> None:
        now = time.time()
        if now - started < WARMUP_S:
            return
        latencies_ms.extend((now - row[4]) * 1000 for row in rows)

    emitter = cluster_emitter(
        cluster_dir,
        f"latency-{time.monotonic_ns()}",
        batch_size=BATCH_SIZE,
        on_acked=on_acked,
        linger_ms=linger_ms,
    )
    emit = emitter.emit
    started = time.time()
    clock_started = time.perf_counter()
    sent = 0
    if rate is None:
        for word in words:
            emit(word, 1)
        sent = len(words)
    else:
        total = int(rate * seconds)
        n = len(words)
        while sent < total:
            now = time.perf_counter()
            due = min(total, int((now - clock_started) * rate))
            while sent < due:
                emit(words[sent % n], 1)
                sent += 1
            emitter.pump(timeout_ms=0)
            if time.perf_counter() - now < PACE_SLICE_S:
                time.sleep(PACE_SLICE_S / 2)
    emitter.close()
    elapsed = time.perf_counter() - clock_started
    results.put(
        {
            "tuples": sent,
            "elapsed_s": elapsed,
            "tuples_per_s": sent / elapsed,
            "target_rate": rate,
            "latency_ms": percentiles(latencies_ms),
            "samples": len(latencies_ms),
        }
    )


def run_smr(
    words: list[str], rate: float | None, seconds: float, linger_ms: float
) -> dict[str, Any]:
    """One smr run on a fresh 3-node ``r = 1`` cluster (see steps 1 and 2)."""
    with local_cluster(NODES, REPLICATION) as (cluster_dir, _spec):
        result: dict[str, Any] = run_feeder(
            paced_feeder, str(cluster_dir), words, rate, seconds, linger_ms, timeout_s=seconds + 600
        )
    return result


def run_spark(spark: Any, rate: float, seconds: float, runs: int) -> dict[str, Any]:
    """Spark's native word count at ``rate`` words/s (step 3), ``runs`` times."""
    from bench import spark_runners

    return spark_runners.latency_benchmark(
        spark, {"native": rate}, runs=runs, triggers_ms=(0,), duration_s=seconds
    )


def plot(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    labels, values = [], []
    for level in report["levels"]:
        for system in ("smr", "spark"):
            entry = level.get(system)
            if not entry:
                continue
            for q in ("p50", "p99"):
                labels.append(f"{system} {q}\n{level['fraction']:.0%} peak")
                values.append(entry["summary"][q]["median"] or 0)
    axis.bar(range(len(values)), values, color="tab:blue")
    axis.set_xticks(range(len(labels)), labels, fontsize=7)
    axis.set_yscale("log")
    axis.set_ylabel("latency (ms, log scale)")
    axis.set_title("Emit-to-acked latency: smr (3 nodes, r=1) vs Spark micro-batches")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def summarise(runs: list[dict[str, Any]], rate_key: str) -> dict[str, Any]:
    """Median and spread over runs of each latency percentile and of the achieved rate."""
    return {
        **{q: spread([r["latency_ms"][q] for r in runs]) for q in ("p50", "p95", "p99", "max")},
        "words_per_s": spread([r[rate_key] for r in runs]),
    }


def _brief(entry: dict[str, Any]) -> str:
    summary = entry["summary"]
    return ", ".join(
        f"{q} {summary[q]['median']:.1f} ms" if summary[q]["median"] is not None else f"{q} -"
        for q in ("p50", "p95", "p99", "max")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of a paced run")
    parser.add_argument("--fractions", default="0.1,0.5,0.8", help="rates, as fractions of peak")
    parser.add_argument("--linger-ms", type=float, default=10.0)
    parser.add_argument("--words", type=int, default=1_000_000, help="words in a peak run")
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "latency.json")
    args = parser.parse_args()

    words = load_words(args.words)
    spark = None
    if not args.skip_spark:
        from bench import spark_queries

        spark = spark_queries.spark_session("rocksdb")
    peak_runs = [run_smr(words, None, 0, args.linger_ms) for _ in range(args.runs)]
    peak = spread([r["tuples_per_s"] for r in peak_runs])["median"]
    assert peak is not None
    print(f"smr peak: {peak:,.0f} words/s (3 nodes, r=1, no combine)", flush=True)
    levels = []
    for fraction in (float(f) for f in args.fractions.split(",")):
        rate = peak * fraction
        smr_runs = [run_smr(words, rate, args.seconds, args.linger_ms) for _ in range(args.runs)]
        level: dict[str, Any] = {
            "fraction": fraction,
            "rate_words_per_s": rate,
            "smr": {"runs": smr_runs, "summary": summarise(smr_runs, "tuples_per_s")},
        }
        print(f"{fraction:.0%} of peak ({rate:,.0f}/s): {_brief(level['smr'])}", flush=True)
        if spark is not None:
            result = run_spark(spark, rate, args.seconds, args.runs)
            level["spark"] = {
                "runs": result["runs"],
                "errors": result["errors"],
                "how": result["how"],
                "summary": summarise(result["runs"], "achieved_words_per_s"),
            }
            print(f"  spark: {_brief(level['spark'])}", flush=True)
        levels.append(level)
    report = {
        "benchmark": "latency",
        "machine": machine(),
        "versions": versions(),
        "config": {
            "nodes": NODES,
            "replication": REPLICATION,
            "batch_size": BATCH_SIZE,
            "linger_ms": args.linger_ms,
            "seconds": args.seconds,
            "warmup_s": WARMUP_S,
            "runs": args.runs,
        },
        "how": {
            "smr": "per tuple: emit() to the ack completing its batch on all r+1 nodes "
            "(after the primary applied it); paced per millisecond; first second left out",
            "spark": "per input file: publication in the input directory to the commit of "
            "the micro-batch that read it; native groupBy(word).count(), default trigger",
        },
        "peak": {"runs": peak_runs, "words_per_s": peak},
        "levels": levels,
    }
    if spark is not None:
        spark.stop()
    write_report(report, args.out, plot)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
