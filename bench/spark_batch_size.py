"""Throughput against micro-batch size: smr's Spark feeder and Spark's native count, each
at the same sizes, in one session.

Spark's native count gets cheaper per word as its micro-batches grow (a batch costs about
half a second whatever it holds), and so does a feeder that rides on its micro-batches. So
both run at every size of ``--files-per-trigger`` (files of the same input, 50 k words each
by default): the native ``groupBy(word).count()`` on RocksDB and ``smr.spark.emit`` of the
fast word count (``map_batch`` and the built-in count) into 3 nodes at ``r = 1``; words/s
from the first batch's start to the last commit (Spark) or the last batch's last ack (smr),
``--runs`` times round-robin, counts checked against plain Python. The headline is smr's
median over native's median at each size, and smr's best over native's best.

    python bench/spark_batch_size.py [--runs 3] [--words 1000000] [--files-per-trigger 4,10,20]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import spark_input, spark_queries, spark_runners
from bench.common import RESULTS, machine, spread, versions
from bench.harness import pyplot, write_report
from bench.spark_throughput import run_spark_feeder

REPLICATION = 1


def plot(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    sizes = list(report["sizes"])
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for system, colour in (("smr", "tab:green"), ("native", "tab:orange")):
        medians = [report["sizes"][s][system]["words_per_s"]["median"] or 0 for s in sizes]
        axis.plot(sizes, medians, marker="o", color=colour, label=system)
    axis.set_xlabel("words per micro-batch")
    axis.set_ylabel("input words per second (median)")
    axis.set_title("smr's Spark feeder (fast word count, r=1) vs Spark's native count")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--files-per-trigger", default="4,10,20")
    parser.add_argument("--out", type=Path, default=RESULTS / "spark_batch_size.json")
    args = parser.parse_args()
    sizes = [int(f) for f in args.files_per_trigger.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="smr-bench-batch-size-"))
    runs: list[dict[str, Any]] = []
    try:
        input_dir = workdir / "input"
        written = spark_input.write_input_files(
            spark_input.book_lines(args.words), input_dir, args.files
        )
        words_per_file = written["words"] // args.files
        spark = spark_queries.spark_session("rocksdb")
        for run_index in range(args.runs):
            for files in sizes:
                smr = run_spark_feeder(spark, input_dir, REPLICATION, True, files, "fast")
                native = spark_runners.measure_throughput(
                    spark, "native", input_dir, workdir, files
                )
                for system, result in (("smr", smr), ("native", native)):
                    runs.append({**result, "run": run_index, "files": files, "system": system})
                    print(
                        f"run {run_index + 1} {files * words_per_file:>9,} words/batch "
                        f"{system:7} {result['words_per_s']:>10,.0f} words/s "
                        f"exact={result['exact']}",
                        flush=True,
                    )
        spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "benchmark": "spark_batch_size",
        "machine": machine(),
        "versions": {**versions(), **spark_queries.spark_versions()},
        "config": {
            "nodes": 3,
            "replication": REPLICATION,
            "words": written["words"],
            "files": args.files,
            "runs": args.runs,
            "spark_master": "local[2]",
            "job": "examples.wordcount:fast",
        },
        **summarise(runs, sizes, words_per_file),
        "runs": runs,
    }
    write_report(report, args.out, plot, json_default=str)
    print(f"best smr / best native: {report['best']['ratio']:.2f}; wrote {args.out}")


def summarise(runs: list[dict[str, Any]], sizes: list[int], words_per_file: int) -> dict[str, Any]:
    """Per size (in words per batch): each system's spread of words/s, exactness and smr's
    median over native's; and the best median of each, and their ratio."""
    summary: dict[int, dict[str, Any]] = {}
    for files in sizes:
        row: dict[str, Any] = {}
        for system in ("smr", "native"):
            mine = [r for r in runs if r["files"] == files and r["system"] == system]
            row[system] = {
                "words_per_s": spread([r["words_per_s"] for r in mine]),
                "exact": all(r["exact"] for r in mine),
            }
        smr_median, native_median = (row[s]["words_per_s"]["median"] for s in ("smr", "native"))
        row["ratio"] = smr_median / native_median if smr_median and native_median else None
        summary[files * words_per_file] = row
    best = {
        system: max(row[system]["words_per_s"]["median"] or 0 for row in summary.values())
        for system in ("smr", "native")
    }
    ratio = best["smr"] / best["native"] if best["native"] else None
    return {"sizes": summary, "best": {**best, "ratio": ratio}}


if __name__ == "__main__":
    main()
