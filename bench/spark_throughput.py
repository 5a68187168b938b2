"""Throughput: input words per second through smr (Python and Spark feeders) against the
pure-Spark word counts, all over the same files in one run.

What is measured (``--runs`` times each, round-robin, on a fresh cluster and checkpoint):

- **smr, Python feeder**: ``smr feed``'s loop (the job's ``map`` over every line, then the
  emitter) in its own process into a local cluster of 3 nodes, for ``r`` = 0, 1, 2, with and
  without the job's ``combine``: words from the first record to the last ack.
- **smr, fast form** (``examples.wordcount:fast``): the same, for the word count written
  with ``map_batch`` and the built-in count (it folds by itself: no separate combine).
- **smr, Spark feeder**: ``smr.spark.emit`` in a Spark session on ``local[2]`` (the same
  session as the baselines), the files read ``--files-per-trigger`` at a time with the
  available-now trigger, for the same ``r`` and ``combine``: words from the first batch's
  start to the last batch's last ack.
- **Spark baselines** (``bench/spark_queries.py``): (a) native ``groupBy(word).count()``
  on RocksDB, at several micro-batch sizes (``--native-files-per-trigger``; its cost per
  word falls as batches grow, so its best size in the run is the baseline), (b1)
  ``applyInPandasWithState``, (b2) ``transformWithStateInPandas``: words of the committed
  batches from the first batch's start to the last commit. The Python-state baselines are
  slow, so they run only the first ``--python-batches`` batches.

Every run's final counts are checked against plain Python's over the files it consumed. The
headline is each row's median words/s as a ratio of baseline (a)'s best median in the run.
JSON in ``bench/results/spark_throughput.json``, plot beside it.

    python bench/spark_throughput.py [--runs 3] [--words 1000000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import spark_input, spark_queries, spark_runners
from bench.common import FAST_JOB, JOB, RESULTS, check_counts, machine, spread, versions
from bench.harness import (
    cluster_emitter,
    dump_counts,
    local_cluster,
    pyplot,
    run_feeder,
    write_report,
)

NODES = 3
REPLICATIONS = (0, 1, 2)


# The two forms of the word count (examples/wordcount.py): per line and per tuple, or
# map_batch with the built-in count (aggregators fold on the mapper side by themselves).
JOBS = {"": JOB, "fast": FAST_JOB}


def _python_feeder(
    cluster_dir: str, paths: list[str], combine: bool, job_ref: str, results: Any
) -> None:
    from smr.api import load_job
    from smr.feed.records import feed

    job = load_job(job_ref)
    emitter = cluster_emitter(
        cluster_dir,
        f"bench-{uuid.uuid4().hex[:8]}",
        combine=job.combine if combine else None,
    )
    result = feed(job, emitter, paths, lambda line: None)
    results.put({"words": result.tuples_emitted, "elapsed_s": result.elapsed_s})


def run_python_feeder(
    paths: list[str], replication: int, combine: bool, form: str = ""
) -> dict[str, Any]:
    """One ``smr feed`` run of the word count's ``form`` into a fresh 3-node cluster; counts
    checked."""
    with local_cluster(NODES, replication, job=JOBS[form]) as (cluster_dir, spec):
        result: dict[str, Any] = run_feeder(
            _python_feeder, str(cluster_dir), paths, combine, JOBS[form], timeout_s=900
        )
        counted = dump_counts([n.addr for n in spec.nodes])
    expected = spark_input.directory_counts(Path(paths[0]).parent)
    return {
        "system": "smr-python",
        "replication": replication,
        "combine": combine,
        "form": form,
        "words_per_s": result["words"] / result["elapsed_s"],
        **result,
        **check_counts(counted, expected),
    }


def run_spark_feeder(
    spark: Any,
    input_dir: Path,
    replication: int,
    combine: bool,
    files_per_trigger: int,
    form: str = "",
) -> dict[str, Any]:
    """One ``smr.spark.emit`` run (available-now) of the word count's ``form`` into a fresh
    3-node cluster; counts checked."""
    from smr import spark as smr_spark

    reports: list[tuple[float, smr_spark.BatchReport]] = []
    with (
        local_cluster(NODES, replication, job=JOBS[form]) as (cluster_dir, spec),
        tempfile.TemporaryDirectory(prefix="smr-bench-spark-feed-") as checkpoint,
    ):
        query = smr_spark.emit(
            smr_spark.text_files(spark, input_dir, files_per_trigger),
            JOBS[form],
            cluster_dir,
            query=f"bench-{uuid.uuid4().hex[:8]}",
            checkpoint_dir=Path(checkpoint),
            available_now=True,
            combine=combine,
            on_batch=lambda report: reports.append((time.monotonic(), report)),
        )
        smr_spark.await_query(query)
        counted = dump_counts([n.addr for n in spec.nodes])
    expected = spark_input.directory_counts(input_dir)
    first_start = reports[0][0] - reports[0][1].elapsed_s
    last_end = reports[-1][0]
    words = sum(report.tuples for _, report in reports)
    steady_words = words - reports[0][1].tuples
    steady_s = last_end - reports[0][0]
    return {
        "system": "smr-spark",
        "replication": replication,
        "combine": combine,
        "form": form,
        "words": words,
        "batches": len(reports),
        "elapsed_s": last_end - first_start,
        "words_per_s": words / (last_end - first_start),
        "steady_words_per_s": steady_words / steady_s if len(reports) > 1 else None,
        "batch_s": [round(report.elapsed_s, 3) for _, report in reports],
        **check_counts(counted, expected),
    }


def label(run: dict[str, Any]) -> str:
    """A row's name: system, and for smr the replication and combine (or the fast form);
    for Spark's native count its micro-batch size when several were run."""
    if run["system"] in ("smr-python", "smr-spark"):
        if run.get("form"):
            return f"{run['system']} r={run['replication']} {run['form']}"
        return f"{run['system']} r={run['replication']}{' combine' if run['combine'] else ''}"
    if run.get("files_per_trigger_label"):
        return f"spark-{run['system']} {run['files_per_trigger_label']}"
    return f"spark-{run['system']}"


def summarise(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per row: the spread of words/s, whether every run was exact, and the ratio of its
    median to baseline (a)'s median."""
    rows: dict[str, dict[str, Any]] = {}
    for run in runs:
        rows.setdefault(label(run), {"runs": []})["runs"].append(run)
    for row in rows.values():
        row["words_per_s"] = spread([r.get("words_per_s") for r in row["runs"]])
        row["exact"] = all(r.get("exact", False) for r in row["runs"])
        del row["runs"]
    # The baseline is Spark's native count at its best micro-batch size in this run.
    natives = {
        name: row["words_per_s"]["median"]
        for name, row in rows.items()
        if name.startswith("spark-native") and row["words_per_s"]["median"]
    }
    best_native = max(natives, key=natives.__getitem__) if natives else None
    baseline = natives.get(best_native) if best_native else None
    for name, row in rows.items():
        median = row["words_per_s"]["median"]
        row["ratio_to_native"] = median / baseline if baseline and median else None
        row["baseline"] = name == best_native
    return rows


def plot(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rows = report["summary"]
    labels = list(rows)
    medians = [rows[k]["words_per_s"]["median"] or 0 for k in labels]
    low = [m - (rows[k]["words_per_s"]["min"] or m) for m, k in zip(medians, labels, strict=True)]
    high = [(rows[k]["words_per_s"]["max"] or m) - m for m, k in zip(medians, labels, strict=True)]
    colours = [
        "tab:blue"
        if k.startswith("smr-python")
        else "tab:green"
        if k.startswith("smr-spark")
        else "tab:orange"
        for k in labels
    ]
    figure, axis = plt.subplots(figsize=(10, 5))
    axis.barh(range(len(labels)), medians, xerr=[low, high], color=colours, capsize=3)
    axis.set_yticks(range(len(labels)), labels, fontsize=8)
    axis.invert_yaxis()
    axis.set_xlabel("input words per second (median, min-max)")
    axis.set_title("Word count throughput: smr vs Spark Structured Streaming (local[2])")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--files-per-trigger", type=int, default=4)
    parser.add_argument("--python-batches", type=int, default=2)
    parser.add_argument(
        "--native-files-per-trigger",
        default="4,10,20",
        help="micro-batch sizes for Spark's native count, in files (its best is the baseline)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "spark_throughput.json")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="smr-bench-throughput-"))
    try:
        input_dir = workdir / "input"
        written = spark_input.write_input_files(
            spark_input.book_lines(args.words), input_dir, args.files
        )
        paths = sorted(str(p) for p in input_dir.glob("*.txt"))
        print(f"input: {written['words']:,} words in {len(paths)} files", flush=True)
        spark = spark_queries.spark_session("rocksdb")
        runs: list[dict[str, Any]] = []

        def record(run: dict[str, Any]) -> None:
            runs.append(run)
            rate = run.get("words_per_s") or 0
            print(f"  {label(run):28} {rate:>12,.0f} words/s exact={run.get('exact')}", flush=True)

        for run_index in range(args.runs):
            print(f"run {run_index + 1}/{args.runs}", flush=True)
            for replication in REPLICATIONS:
                for combine, form in ((False, ""), (True, ""), (True, "fast")):
                    record(run_python_feeder(paths, replication, combine, form))
                    record(
                        run_spark_feeder(
                            spark, input_dir, replication, combine, args.files_per_trigger, form
                        )
                    )
            for files in (int(f) for f in args.native_files_per_trigger.split(",")):
                result = spark_runners.measure_throughput(
                    spark, "native", input_dir, workdir, files
                )
                words_per_batch = written["words"] * min(files, args.files) // args.files
                record(
                    {
                        "system": "native",
                        "files_per_trigger_label": f"{words_per_batch // 1000:,}k-word batches",
                        **result,
                    }
                )
            for baseline in spark_queries.BASELINES:
                if baseline == "native":
                    continue
                result = spark_runners.measure_throughput(
                    spark,
                    baseline,
                    input_dir,
                    workdir,
                    args.files_per_trigger,
                    batches_max=args.python_batches,
                )
                record({"system": baseline, **result})
        spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "benchmark": "spark_throughput",
        "machine": machine(),
        "versions": {**versions(), **spark_queries.spark_versions()},
        "config": {
            "nodes": NODES,
            "words": written["words"],
            "files": args.files,
            "files_per_trigger": args.files_per_trigger,
            "python_state_batches": args.python_batches,
            "native_files_per_trigger": args.native_files_per_trigger,
            "runs": args.runs,
            "spark_master": "local[2]",
        },
        "summary": summarise(runs),
        "runs": runs,
    }
    write_report(report, args.out, plot, json_default=str)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
