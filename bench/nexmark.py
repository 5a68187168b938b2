"""Nexmark Q5 and Q7: smr's windowed jobs, **in-process** (``smr.testing.run_job``: the ring
does not carry windows yet), against Spark Structured Streaming over the same event files,
in the same run; results compared window by window with each other and with plain Python.

1. Write the events once (``bench/nexmark_events.py``, seeded; reused if already written).
2. Per query, per repeat: smr reads the files (JSON per line), maps, folds per window and
   closes every window (``run_job``); Spark runs the query to the end of the files
   (``availableNow``) at each trigger size (``maxFilesPerTrigger``), its best one reported.
3. The first stage's windows must be equal (smr, Spark, plain Python): otherwise the run
   exits 1 after writing its results.

Events/s is events read (all kinds) per second of wall time, Spark's session start excluded.
No latency figure: in-process there is no feed in real time to measure a window's end to its
result against; that waits for the ring. Writes ``bench/results/nexmark.json`` and its plot.

    flock /tmp/smr-heavy.lock .venv/bin/python bench/nexmark.py --events 300000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import nexmark_model, nexmark_spark, spark_queries  # noqa: E402
from bench.common import RESULTS, machine, source, spread  # noqa: E402
from bench.harness import pyplot, write_report  # noqa: E402
from bench.nexmark_events import NexmarkConfig, read_events, write_events  # noqa: E402
from examples.nexmark import SLIDE_MS, WINDOW_MS, q5, q7  # noqa: E402
from smr.testing import run_job  # noqa: E402

LABEL = "smr in-process (smr.testing.run_job), until the ring carries windows"
JOBS = {"q5": (q5, "count"), "q7": (q7, "max")}


def smr_windows(name: str, paths: list[Path]) -> tuple[dict[Any, int], float]:
    """Query ``name`` through smr in-process: its windows as the model writes them, and the
    wall time."""
    job, field = JOBS[name]
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


def model_windows(name: str, paths: list[Path]) -> dict[Any, int]:
    if name == "q5":
        return nexmark_model.bid_counts(read_events(paths), WINDOW_MS, SLIDE_MS)
    return nexmark_model.bid_maxima(read_events(paths), WINDOW_MS)


def measure(
    name: str, paths: list[Path], spark: Any, repeats: int, triggers: Sequence[int | None]
) -> dict[str, Any]:
    """One query: smr's and Spark's events/s per repeat, and whether their windows equal the
    model's."""
    events = sum(1 for _ in read_events(paths))
    expected = model_windows(name, paths)
    smr_rates, equal = [], True
    for _ in range(repeats):
        windows, seconds = smr_windows(name, paths)
        smr_rates.append(events / seconds)
        equal &= windows == expected
    spark_by_trigger: dict[str, Any] = {}
    for trigger in triggers:
        rates, batches = [], 0
        for _ in range(repeats):
            run = nexmark_spark.run_query(spark, name, paths[0].parent, trigger)
            rates.append(events / run.seconds)
            batches = run.batches
            equal &= run.windows == expected
        spark_by_trigger[str(trigger or "all")] = {
            "events_per_s": spread(rates),
            "batches": batches,
        }
    best = max(spark_by_trigger, key=lambda t: spark_by_trigger[t]["events_per_s"]["median"])
    smr_median = spread(smr_rates)["median"]
    spark_median = spark_by_trigger[best]["events_per_s"]["median"]
    return {
        "events": events,
        "windows": len(expected),
        "equal_windows": equal,
        "smr": {"events_per_s": spread(smr_rates), "how": LABEL},
        "spark": {"by_max_files_per_trigger": spark_by_trigger, "best": best},
        "ratio_smr_to_spark_best": smr_median / spark_median,
    }


def plot(report: dict[str, Any], out: Path) -> None:
    plt = pyplot()
    names = list(report["queries"])
    smr = [report["queries"][n]["smr"]["events_per_s"]["median"] / 1000 for n in names]
    spark = []
    for n in names:
        query = report["queries"][n]["spark"]
        spark.append(
            query["by_max_files_per_trigger"][query["best"]]["events_per_s"]["median"] / 1000
        )
    figure, axes = plt.subplots(figsize=(6, 3.5))
    positions = range(len(names))
    axes.bar([p - 0.2 for p in positions], smr, 0.4, label="smr, in-process (run_job)")
    axes.bar(
        [p + 0.2 for p in positions], spark, 0.4, label="Spark Structured Streaming, best trigger"
    )
    axes.set_xticks(list(positions), [n.upper() for n in names])
    axes.set_ylabel("thousand events/s")
    axes.set_title(f"Nexmark, {report['config']['events']:,} events (in-process smr)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS / "nexmark.json")
    args = parser.parse_args(argv)
    config = NexmarkConfig(seed=args.seed, events=args.events)
    data_dir = (
        args.data_dir or Path(tempfile.gettempdir()) / f"smr-nexmark-{args.seed}-{args.events}"
    )
    paths = write_events(config, data_dir, args.files)
    before = machine()
    spark = spark_queries.spark_session("default", app_name="smr-nexmark")
    try:
        queries = {
            name: measure(name, paths, spark, args.repeats, (1, None)) for name in ("q5", "q7")
        }
    finally:
        spark.stop()
    report = {
        "label": LABEL,
        "config": {**config.__dict__, "files": args.files, "repeats": args.repeats},
        "queries": queries,
        "machine": {**before, "loadavg_after": machine()["loadavg"]},
        "source": source(),
        "versions": spark_queries.spark_versions(),
    }
    write_report(report, args.out, plot)
    for name, query in queries.items():
        print(
            f"{name}: smr {query['smr']['events_per_s']['median']:,.0f} events/s in-process, "
            f"Spark {query['spark']['best']} files a batch: "
            f"{query['ratio_smr_to_spark_best']:.2f}x; windows equal: {query['equal_windows']}"
        )
    return 0 if all(q["equal_windows"] for q in queries.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
