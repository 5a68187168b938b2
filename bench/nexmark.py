"""Nexmark Q5 and Q7: smr's windowed jobs **on a cluster** of real node processes on 127.0.0.1
(``bench/nexmark_cluster.py``; in-process, ``smr.testing.run_job``, as an extra row) against
Spark Structured Streaming over the same event files, in the same run; every window compared
with plain Python's (``bench/nexmark_model.py``) and with Spark's.

1. Write the events once (``bench/nexmark_events.py``, seeded; reused if already written):
   the throughput events, and the paced events (fewer per second of event time, so that a
   paced run of a few seconds passes many window ends) in files of one Spark trigger each.
2. Events/s, per query, per repeat (the cluster already up: ``nodes``, ``r``, the slots and
   the checkpoint interval are options): a fresh cluster, the events read from the files
   (JSON per line) and sent through ``smr.connect(job=...)`` with their event time, until
   the last window's result is read from the output; in-process, ``run_job`` over the same
   files; Spark, to the end of the files (``availableNow``) at each trigger size
   (``maxFilesPerTrigger``), its best reported. Events/s counts every event read (all kinds).
3. Latency, per query: the paced events sent in real time (event time over ``--speedup``)
   to a fresh cluster; per window, the wall time from the send of the tuple that lets the
   watermark pass its end to its result read from the output file (``nexmark_cluster``'s
   docstring says exactly what it holds); p50 and p99. Spark over the same paced events, one
   file a micro-batch (a file holds the events of ``--spark-trigger-ms`` of wall time): its
   figure is that trigger interval plus each batch's own time from its progress reports,
   the least a window's result waits with a processing-time trigger of that interval when
   the window's end arrives just after a trigger (a final result in append mode waits one
   batch more, for the watermark: not counted).
4. Q5's second stage (the most bids over a window's auctions) is not chained in the ring, one
   job per cluster: it is ``examples.nexmark.hottest`` over the first stage's windows read
   from the cluster's output, as in-process and for Spark, and compared with the model's.
5. Every window of every run must equal the model's (cluster, in-process, Spark; and the
   second stage): otherwise the run exits 1 after writing its results.

Writes ``bench/results/nexmark.json`` and its plot.

    flock /tmp/smr-heavy.lock .venv/bin/python bench/nexmark.py --events 200000
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import nexmark_model, nexmark_spark, spark_queries  # noqa: E402
from bench.common import RESULTS, machine, percentile, source, spread  # noqa: E402
from bench.harness import pyplot, write_report  # noqa: E402
from bench.nexmark_cluster import JOBS, ClusterOptions, run_paced, run_unpaced  # noqa: E402
from bench.nexmark_events import NexmarkConfig, read_events, write_events  # noqa: E402
from examples.nexmark import SLIDE_MS, WINDOW_MS, hottest  # noqa: E402
from smr.testing import run_job  # noqa: E402
from smr.windows import Window  # noqa: E402

LABEL = "smr on a local cluster of real node processes (127.0.0.1), fed through smr.connect"
IN_PROCESS_LABEL = "smr in-process (smr.testing.run_job): no node, no network"
Windows = dict[Any, int]


def in_process_windows(name: str, paths: list[Path]) -> tuple[Windows, float]:
    """Query ``name`` through smr in-process: its windows as the model writes them, and the
    wall time."""
    job, field, _ = JOBS[name]
    started = time.perf_counter()
    run = run_job(job, read_events(paths))
    seconds = time.perf_counter() - started
    if run.late_dropped:
        raise RuntimeError(f"{name}: {run.late_dropped} bids dropped as late in ordered input")
    windows = {
        (auction, (w.start_ms, w.end_ms)): state[field]
        for (auction, w), state in run.windows.items()
    }
    return windows, seconds


def model_windows(name: str, paths: list[Path]) -> Windows:
    if name == "q5":
        return nexmark_model.bid_counts(read_events(paths), WINDOW_MS, SLIDE_MS)
    return nexmark_model.bid_maxima(read_events(paths), WINDOW_MS)


def second_stage(name: str, windows: Windows) -> dict[Any, Any]:
    """Step 4: per window, the largest value over its auctions and the auctions that reach
    it (``examples.nexmark.hottest`` over the first stage's windows)."""
    field = JOBS[name][1]
    return hottest(
        {
            (auction, Window(*bounds)): {field: value}
            for (auction, bounds), value in windows.items()
        },
        field,
    )


def spark_throughput(
    name: str, paths: list[Path], spark: Any, repeats: int, expected: Windows, events: int
) -> tuple[dict[str, Any], bool]:
    """Spark's events/s per trigger size (one file a batch, all files a batch), and whether
    each run's windows equal ``expected``."""
    by_trigger: dict[str, Any] = {}
    equal = True
    for trigger in (1, None):
        rates, batches = [], 0
        for _ in range(repeats):
            run = nexmark_spark.run_query(spark, name, paths[0].parent, trigger)
            rates.append(events / run.seconds)
            batches = run.batches
            equal &= run.windows == expected
        by_trigger[str(trigger or "all")] = {"events_per_s": spread(rates), "batches": batches}
    best = max(by_trigger, key=lambda t: by_trigger[t]["events_per_s"]["median"])
    return {"by_max_files_per_trigger": by_trigger, "best": best}, equal


def measure_throughput(
    name: str, paths: list[Path], spark: Any, repeats: int, options: ClusterOptions
) -> dict[str, Any]:
    """Step 2 for one query: events/s of the cluster, in-process and Spark per repeat, and
    whether their windows (and the cluster's second stage) equal the model's."""
    events = sum(1 for _ in read_events(paths))
    expected = model_windows(name, paths)
    cluster_rates, in_process_rates, equal, corrections = [], [], True, 0
    equal_second_stage = True
    for _ in range(repeats):
        run = run_unpaced(name, read_events(paths), len(expected), options)
        cluster_rates.append(events / run.seconds)
        equal &= run.complete and run.windows == expected
        equal_second_stage &= second_stage(name, run.windows) == second_stage(name, expected)
        corrections += run.corrections
        windows, seconds = in_process_windows(name, paths)
        in_process_rates.append(events / seconds)
        equal &= windows == expected
    spark, spark_equal = spark_throughput(name, paths, spark, repeats, expected, events)
    spark_best = spark["by_max_files_per_trigger"][spark["best"]]["events_per_s"]["median"]
    return {
        "events": events,
        "windows": len(expected),
        "equal_windows": equal and spark_equal and equal_second_stage,
        "equal_second_stage": equal_second_stage,
        "corrections": corrections,
        "smr": {"events_per_s": spread(cluster_rates), "how": LABEL},
        "smr_in_process": {"events_per_s": spread(in_process_rates), "how": IN_PROCESS_LABEL},
        "spark": spark,
        "ratio_smr_to_spark_best": spread(cluster_rates)["median"] / spark_best,
        "ratio_in_process_to_spark_best": spread(in_process_rates)["median"] / spark_best,
    }


def quantiles(values: Sequence[float]) -> dict[str, float | int | None]:
    return {
        "p50": percentile(values, 0.5),
        "p99": percentile(values, 0.99),
        "max": max(values, default=None),
        "count": len(values),
    }


def measure_latency(
    name: str,
    paths: list[Path],
    spark: Any,
    speedup: float,
    spark_trigger_ms: int,
    options: ClusterOptions,
) -> dict[str, Any]:
    """Step 3 for one query: the cluster's window-end-to-result latencies over the paced
    events, and Spark's trigger plus batch time over the same files, one a batch."""
    expected = model_windows(name, paths)
    run = run_paced(name, read_events(paths), len(expected), speedup, options)
    spark_run = nexmark_spark.run_query(spark, name, paths[0].parent, max_files_per_trigger=1)
    return {
        "events": sum(1 for _ in read_events(paths)),
        "windows": len(expected),
        "equal_windows": run.complete and run.windows == expected and spark_run.windows == expected,
        "corrections": run.corrections,
        "smr": {
            "latency_ms": quantiles(run.latencies_ms),
            "window_ends": len(run.latencies_by_end_ms),
            "closed_at_finish": run.closed_at_finish,
            "behind_pace_ms_max": run.behind_pace_ms_max,
        },
        "spark": {
            "trigger_ms": spark_trigger_ms,
            "batch_ms": quantiles(spark_run.batch_ms),
            "latency_ms": quantiles([spark_trigger_ms + ms for ms in spark_run.batch_ms]),
        },
    }


def plot(report: dict[str, Any], out: Path) -> None:
    """Events/s per query (cluster, in-process, Spark's best) and latency p50/p99 (cluster,
    Spark's trigger plus batch)."""
    plt = pyplot()
    queries = report["queries"]
    names = list(queries)
    figure, (rates, delays) = plt.subplots(1, 2, figsize=(10, 3.8))
    positions = range(len(names))
    bars = {
        "smr, cluster": [queries[n]["smr"]["events_per_s"]["median"] for n in names],
        "smr, in-process": [queries[n]["smr_in_process"]["events_per_s"]["median"] for n in names],
        "Spark, best trigger": [_spark_best(queries[n]) for n in names],
    }
    for offset, (label, values) in zip((-0.27, 0, 0.27), bars.items(), strict=True):
        rates.bar([p + offset for p in positions], [v / 1000 for v in values], 0.27, label=label)
    rates.set_xticks(list(positions), [n.upper() for n in names])
    rates.set_ylabel("thousand events/s")
    rates.set_title(f"{report['config']['events']:,} events, unpaced")
    rates.legend(fontsize=8)
    for offset, who, label in ((-0.2, "smr", "smr, cluster"), (0.2, "spark", "Spark")):
        latency = [queries[n]["latency"][who]["latency_ms"] for n in names]
        delays.bar(
            [p + offset for p in positions],
            [q["p99"] or 0 for q in latency],
            0.4,
            label=f"{label}, p99",
            alpha=0.5,
        )
        delays.bar(
            [p + offset for p in positions],
            [q["p50"] or 0 for q in latency],
            0.4,
            label=f"{label}, p50",
        )
    delays.set_xticks(list(positions), [n.upper() for n in names])
    delays.set_ylabel("window end to result, ms")
    delays.set_title(f"paced, {report['config']['speedup']}x event time")
    delays.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)


def _spark_best(query: dict[str, Any]) -> float:
    spark = query["spark"]
    return float(spark["by_max_files_per_trigger"][spark["best"]]["events_per_s"]["median"])


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=ClusterOptions.nodes)
    parser.add_argument("--replication", type=int, default=ClusterOptions.replication)
    parser.add_argument("--slot-bits", type=int, default=ClusterOptions.slot_bits)
    parser.add_argument(
        "--checkpoint-interval-ms",
        type=int,
        default=ClusterOptions.checkpoint_interval_ms,
        help="the nodes' checkpoint interval in the unpaced runs",
    )
    parser.add_argument(
        "--paced-checkpoint-interval-ms",
        type=int,
        default=20,
        help="the nodes' checkpoint interval in the paced runs (windows close in its cycle)",
    )
    parser.add_argument("--linger-ms", type=float, default=ClusterOptions.linger_ms)
    parser.add_argument("--paced-events", type=int, default=60_000)
    parser.add_argument(
        "--paced-events-per-second",
        type=int,
        default=1_000,
        help="event-time rate of the paced events",
    )
    parser.add_argument(
        "--speedup",
        type=float,
        default=4.0,
        help="event time runs this much faster than the wall clock when paced",
    )
    parser.add_argument("--spark-trigger-ms", type=int, default=500)
    parser.add_argument("--queries", default="q5,q7")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS / "nexmark.json")
    return parser.parse_args(argv)


def event_files(
    args: argparse.Namespace,
) -> tuple[NexmarkConfig, list[Path], NexmarkConfig, list[Path]]:
    """Step 1: the throughput events in ``--files`` files, and the paced events in files of
    one Spark trigger's wall time each."""
    base = args.data_dir or Path(tempfile.gettempdir())
    config = NexmarkConfig(seed=args.seed, events=args.events)
    paths = write_events(config, base / f"smr-nexmark-{args.seed}-{args.events}", args.files)
    paced = NexmarkConfig(
        seed=args.seed, events=args.paced_events, events_per_second=args.paced_events_per_second
    )
    per_trigger = max(
        1, round(paced.events_per_second * args.speedup * args.spark_trigger_ms / 1000)
    )
    paced_files = -(-paced.events // per_trigger)
    paced_dir = base / f"smr-nexmark-paced-{args.seed}-{paced.events}-{paced_files}"
    return config, paths, paced, write_events(paced, paced_dir, paced_files)


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    options = ClusterOptions(
        nodes=args.nodes,
        replication=args.replication,
        slot_bits=args.slot_bits,
        checkpoint_interval_ms=args.checkpoint_interval_ms,
        linger_ms=args.linger_ms,
    )
    paced_options = dataclasses.replace(
        options, checkpoint_interval_ms=args.paced_checkpoint_interval_ms
    )
    config, paths, paced, paced_paths = event_files(args)
    before = machine()
    spark = spark_queries.spark_session("default", app_name="smr-nexmark")
    queries: dict[str, Any] = {}
    try:
        for name in args.queries.split(","):
            queries[name] = measure_throughput(name, paths, spark, args.repeats, options)
            queries[name]["latency"] = measure_latency(
                name, paced_paths, spark, args.speedup, args.spark_trigger_ms, paced_options
            )
    finally:
        spark.stop()
    report = {
        "label": LABEL,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "config": {
            **config.__dict__,
            "files": args.files,
            "repeats": args.repeats,
            "cluster": options.__dict__,
            "paced": {
                **paced.__dict__,
                "files": len(paced_paths),
                "checkpoint_interval_ms": paced_options.checkpoint_interval_ms,
            },
            "speedup": args.speedup,
            "spark_trigger_ms": args.spark_trigger_ms,
        },
        "queries": queries,
        "machine": {**before, "loadavg_after": machine()["loadavg"]},
        "source": source(),
        "versions": spark_queries.spark_versions(),
    }
    write_report(report, args.out, plot)
    for name, query in queries.items():
        print(summary(name, query))
    equal = all(q["equal_windows"] and q["latency"]["equal_windows"] for q in queries.values())
    return 0 if equal else 1


def summary(name: str, query: dict[str, Any]) -> str:
    latency = query["latency"]
    smr_ms, spark_ms = latency["smr"]["latency_ms"], latency["spark"]["latency_ms"]
    return (
        f"{name}: cluster {query['smr']['events_per_s']['median']:,.0f} events/s "
        f"({query['ratio_smr_to_spark_best']:.2f}x Spark's best, {query['spark']['best']} "
        f"files a batch; in-process {query['ratio_in_process_to_spark_best']:.2f}x); "
        f"latency p50/p99 {smr_ms['p50'] or 0:.0f}/{smr_ms['p99'] or 0:.0f} ms over "
        f"{smr_ms['count']} windows, "
        f"Spark {spark_ms['p50'] or 0:.0f}/{spark_ms['p99'] or 0:.0f} ms; "
        f"windows equal: {query['equal_windows'] and latency['equal_windows']}"
    )


if __name__ == "__main__":
    sys.exit(main())
