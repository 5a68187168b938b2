"""Running a Spark baseline and measuring it, in this process's session: input words per
second (``measure_throughput``), how long a fresh driver takes to get a session
(``measure_session_start``), and end-to-end latency per file (``measure_latency``).

Each ``measure_*`` is one run and returns a plain dict; each ``*_benchmark`` repeats it
``runs`` times, round-robin over the baselines, and summarises with ``bench.common.spread``.
Recovery after a SIGKILL of the driver needs a driver of its own: ``bench.spark_driver_kill``.
"""

from __future__ import annotations

import datetime
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import check_counts, percentile, spread
from bench.spark_input import (
    BATCH_TIMEOUT_S,
    POLL_S,
    CheckpointLog,
    Dripper,
    book_lines,
    directory_counts,
    publish,
    python_counts,
    split_lines,
    visible_files,
)
from bench.spark_queries import (
    BASELINES,
    BASELINES_SCRIPT,
    SESSION_TIMEOUT_S,
    read_sink_counts,
    spark_session,
    start_query,
)

__all__ = [
    "latency_benchmark",
    "measure_latency",
    "measure_session_start",
    "measure_throughput",
    "run_error",
    "say",
    "session_probe_main",
    "throughput_benchmark",
]


def _progress_time(timestamp: str) -> float:
    """A progress event's ``timestamp`` (ISO 8601, UTC, ms) as Unix seconds."""
    parsed = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


# -- throughput and session start ------------------------------------------------------------


def measure_throughput(
    spark: Any,
    baseline: str,
    input_dir: Path,
    workdir: Path,
    max_files_per_trigger: int,
    state_store: str = "rocksdb",
    batches_max: int | None = None,
) -> dict[str, Any]:
    """One throughput run: a fresh checkpoint, every file of ``input_dir`` (or the first
    ``batches_max`` batches' worth) read ``max_files_per_trigger`` files per batch with the
    available-now trigger. Words/s = the words of the committed batches / (last commit − the
    first batch's trigger start, from the query progress); ``steady_words_per_s`` leaves the
    first batch (planning, cold Python workers) out. Counts checked against plain Python's over
    the files those batches took."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{baseline}-", dir=workdir))
    checkpoint_dir, sink_dir = run_dir / "checkpoint", run_dir / "sink"
    log = CheckpointLog(checkpoint_dir)
    query = start_query(
        spark,
        baseline,
        input_dir,
        checkpoint_dir,
        sink_dir,
        state_store,
        max_files_per_trigger=max_files_per_trigger,
        available_now=True,
    )
    try:
        while query.isActive:
            if batches_max is not None and len(log.committed()) >= batches_max:
                query.stop()
                break
            query.awaitTermination(POLL_S)
        if query.exception() is not None:
            raise RuntimeError(f"{baseline} query failed: {query.exception()}")
    finally:
        if query.isActive:
            query.stop()
    progress = {p.batchId: p for p in query.recentProgress}
    batches = {b: batch for b, batch in log.batches().items() if batch.committed_at_unix_s}
    if batches_max is not None:
        batches = {b: batch for b, batch in batches.items() if b < batches_max}
    if not batches or 0 not in progress:
        raise RuntimeError(f"{baseline}: no batch committed (checkpoint {checkpoint_dir})")
    words_of = {f["name"]: f["words"] for f in _file_words(input_dir)}
    batch_words = {b: sum(words_of[n] for n in batch.files) for b, batch in batches.items()}
    first_start = _progress_time(progress[0].timestamp)
    commits = [batches[b].committed_at_unix_s or 0.0 for b in sorted(batches)]
    words = sum(batch_words.values())
    elapsed_s = commits[-1] - first_start
    steady_words = words - batch_words[0]
    steady_s = commits[-1] - commits[0]
    expected = directory_counts(input_dir, [n for batch in batches.values() for n in batch.files])
    counted = read_sink_counts(sink_dir, batches)
    record = {
        "baseline": baseline,
        "state_store": state_store,
        "max_files_per_trigger": max_files_per_trigger,
        "batches": len(batches),
        "words": words,
        "batch_words": spread(list(batch_words.values())),
        "first_batch_started_unix_s": first_start,
        "last_commit_unix_s": commits[-1],
        "elapsed_s": elapsed_s,
        "words_per_s": words / elapsed_s,
        "first_batch_s": commits[0] - first_start,
        "steady_words_per_s": steady_words / steady_s if len(commits) > 1 else None,
        "batch_s": [
            round(b - a, 3) for a, b in zip([first_start, *commits], commits, strict=False)
        ],
        **check_counts(counted, expected),
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return record


_WORDS_CACHE: dict[tuple[str, str, int, int], int] = {}


def _file_words(directory: Path) -> list[dict[str, Any]]:
    """Each visible file's name and word count (cached by path, size and mtime)."""
    records = []
    for name in visible_files(directory):
        stat = (directory / name).stat()
        key = (str(directory), name, stat.st_size, stat.st_mtime_ns)
        if key not in _WORDS_CACHE:
            with open(directory / name, encoding="utf-8", errors="replace") as text:
                _WORDS_CACHE[key] = sum(python_counts(text).values())
        records.append({"name": name, "words": _WORDS_CACHE[key]})
    return records


def measure_session_start(runs: int = 3) -> dict[str, Any]:
    """How long a fresh driver process takes to get a SparkSession (``spark_session``), in
    ``runs`` new processes one after another: the spawn → session ready, and the builder's own
    ``getOrCreate`` (JVM launch included)."""
    samples = []
    for _ in range(runs):
        started = time.time()
        result = subprocess.run(
            [sys.executable, str(BASELINES_SCRIPT), "session-probe"],
            capture_output=True,
            text=True,
            check=True,
            timeout=SESSION_TIMEOUT_S,
        )
        probe = json.loads(result.stdout.strip().splitlines()[-1])
        probe["spawn_to_session_s"] = probe["session_ready_unix_s"] - started
        samples.append(probe)
    return {
        "how": "python bench/spark_baselines.py session-probe in a fresh process, one after "
        "another: spawn → spark_session() returned, and spark_session() itself",
        "spawn_to_session_s": spread([s["spawn_to_session_s"] for s in samples]),
        "session_s": spread([s["session_s"] for s in samples]),
        "samples": samples,
    }


def throughput_benchmark(
    spark: Any,
    input_dir: Path,
    baselines: Sequence[str] = tuple(BASELINES),
    runs: int = 3,
    max_files_per_trigger: int = 2,
    batches_max: Mapping[str, int | None] | None = None,
    state_store: str = "rocksdb",
) -> dict[str, Any]:
    """``measure_throughput`` ``runs`` times per baseline, round-robin over the baselines, on
    the files already in ``input_dir``; ``batches_max[baseline]`` bounds the slow ones. Per
    baseline: the spread of words/s, steady words/s, first batch, and exactness."""
    workdir = Path(tempfile.mkdtemp(prefix="smr-spark-throughput-"))
    batches_max = batches_max or {}
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    try:
        for run in range(runs):
            for baseline in baselines:
                try:
                    record = measure_throughput(
                        spark,
                        baseline,
                        input_dir,
                        workdir,
                        max_files_per_trigger,
                        state_store,
                        batches_max.get(baseline),
                    )
                except Exception as error:  # recorded; the other runs still count
                    errors.append(run_error(run, baseline, error))
                    continue
                record["run"] = run
                results.append(record)
                say(
                    f"throughput run {run} {baseline}: {record['words']:,} words in "
                    f"{record['batches']} batches, {record['words_per_s']:,.0f} words/s "
                    f"(steady {record['steady_words_per_s'] or 0:,.0f}), exact {record['exact']}"
                )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = {}
    for baseline in baselines:
        mine = [r for r in results if r["baseline"] == baseline]
        summary[baseline] = {
            "operator": BASELINES[baseline].operator,
            "state_store": state_store,
            "runs": len(mine),
            "exact": sum(1 for r in mine if r["exact"]),
            "words": spread([r["words"] for r in mine]),
            "batches": spread([r["batches"] for r in mine]),
            "batch_words": spread([r["batch_words"]["median"] for r in mine]),
            "words_per_s": spread([r["words_per_s"] for r in mine]),
            "steady_words_per_s": spread([r["steady_words_per_s"] for r in mine]),
            "first_batch_s": spread([r["first_batch_s"] for r in mine]),
        }
    return {
        "how": "one SparkSession (started once, excluded); per run a fresh checkpoint over the "
        "same input directory, text file source with maxFilesPerTrigger and the available-now "
        "trigger; words/s = input words of the committed batches / (last commits/<batch> mtime "
        "- batch 0's trigger start from the query progress); steady_words_per_s leaves batch 0 "
        "out (commit 0 → last commit); runs round-robin over the baselines; counts compared "
        "with plain Python's over the files those batches took",
        "max_files_per_trigger": max_files_per_trigger,
        "batches_max": dict(batches_max),
        "summary": summary,
        "runs": results,
        "errors": errors,
    }


# -- latency ---------------------------------------------------------------------------------


def measure_latency(
    spark: Any,
    baseline: str,
    files: Sequence[Sequence[str]],
    words_per_s: float,
    workdir: Path,
    trigger_ms: int = 0,
    state_store: str = "rocksdb",
    warmup_lines: Sequence[str] = ("warm up the query\n",),
) -> dict[str, Any]:
    """One latency run: start the query on a directory holding one small warm-up file and
    wait for its commit (the cold first batch is not measured), then drip ``files`` at
    ``words_per_s``; per file, latency = its batch's commit (``commits/<batch>`` mtime) − its
    publication (after its rename into the directory). Counts checked at the end."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{baseline}-", dir=workdir))
    input_dir, checkpoint_dir, sink_dir = (
        run_dir / "input",
        run_dir / "checkpoint",
        run_dir / "sink",
    )
    input_dir.mkdir()
    publish(input_dir, "warmup.txt", list(warmup_lines))
    log = CheckpointLog(checkpoint_dir)
    query = start_query(
        spark, baseline, input_dir, checkpoint_dir, sink_dir, state_store, trigger_ms=trigger_ms
    )
    dripper = Dripper(files, input_dir, words_per_s)

    def check_active() -> None:
        if not query.isActive:
            raise RuntimeError(f"{baseline} query stopped: {query.exception()}")

    try:
        log.wait_committed(["warmup.txt"], BATCH_TIMEOUT_S, f"{baseline} warm-up", check_active)
        dripper.start()
        while not dripper.join(POLL_S):
            check_active()
        if dripper.error is not None:
            raise dripper.error
        log.wait_committed(
            [f["name"] for f in dripper.published],
            BATCH_TIMEOUT_S,
            f"{baseline} drained",
            check_active,
        )
    finally:
        dripper.stop()
        query.stop()
    commits = log.file_commits()
    latencies_ms = []
    batches_taking: set[int] = set()
    for published in dripper.published:
        batch_id, committed_at = commits[published["name"]]
        batches_taking.add(batch_id)
        latencies_ms.append(((committed_at or math.nan) - published["published_at_unix_s"]) * 1000)
    batches = log.batches()
    committed = {b for b, batch in batches.items() if batch.committed_at_unix_s}
    first, last = dripper.published[0], dripper.published[-1]
    drip_s = last["published_at_unix_s"] - (dripper.started_at_unix_s or 0.0)
    record = {
        "baseline": baseline,
        "state_store": state_store,
        "trigger": f"{trigger_ms} ms" if trigger_ms else "default",
        "words_per_s": words_per_s,
        "achieved_words_per_s": sum(f["words"] for f in dripper.published) / drip_s,
        "files": len(dripper.published),
        "words_per_file": spread([f["words"] for f in dripper.published]),
        "batches": len(batches_taking),
        "files_per_batch_max": max(
            sum(1 for f in dripper.published if commits[f["name"]][0] == b) for b in batches_taking
        ),
        "first_published_unix_s": first["published_at_unix_s"],
        "latency_ms": {
            "p50": percentile(latencies_ms, 0.50),
            "p95": percentile(latencies_ms, 0.95),
            "p99": percentile(latencies_ms, 0.99),
            "max": max(latencies_ms),
            "min": min(latencies_ms),
        },
        **check_counts(read_sink_counts(sink_dir, committed), directory_counts(input_dir)),
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return record


def latency_benchmark(
    spark: Any,
    rates: Mapping[str, float],
    runs: int = 3,
    triggers_ms: Sequence[int] = (0, 500),
    duration_s: float = 20.0,
    files_per_s: float = 4.0,
    state_store: str = "rocksdb",
) -> dict[str, Any]:
    """``measure_latency`` ``runs`` times for each baseline in ``rates`` (words/s it is fed at)
    and each trigger (0 = Spark's default), round-robin; files of ``rate / files_per_s`` words
    of book text, for ``duration_s``. Per (baseline, trigger): the spread over the runs of each
    run's p50/p95/p99/max."""
    workdir = Path(tempfile.mkdtemp(prefix="smr-spark-latency-"))
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    files_by_baseline = {
        baseline: split_lines(book_lines(int(rate * duration_s)), max(1, round(rate / files_per_s)))
        for baseline, rate in rates.items()
    }
    try:
        for run in range(runs):
            for baseline, rate in rates.items():
                for trigger_ms in triggers_ms:
                    try:
                        record = measure_latency(
                            spark,
                            baseline,
                            files_by_baseline[baseline],
                            rate,
                            workdir,
                            trigger_ms,
                            state_store,
                        )
                    except Exception as error:
                        errors.append({**run_error(run, baseline, error), "trigger_ms": trigger_ms})
                        continue
                    record["run"] = run
                    results.append(record)
                    latency = record["latency_ms"]
                    say(
                        f"latency run {run} {baseline} trigger {record['trigger']}: "
                        f"{record['files']} files at {record['achieved_words_per_s']:,.0f} words/s,"
                        f" p50 {latency['p50']:.0f} p99 {latency['p99']:.0f} max "
                        f"{latency['max']:.0f} ms, exact {record['exact']}"
                    )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = []
    for baseline, rate in rates.items():
        for trigger_ms in triggers_ms:
            label = f"{trigger_ms} ms" if trigger_ms else "default"
            mine = [r for r in results if r["baseline"] == baseline and r["trigger"] == label]
            summary.append(
                {
                    "baseline": baseline,
                    "trigger": label,
                    "words_per_s": rate,
                    "runs": len(mine),
                    "exact": sum(1 for r in mine if r["exact"]),
                    "files": spread([r["files"] for r in mine]),
                    "batches": spread([r["batches"] for r in mine]),
                    **{
                        f"latency_{q}_ms": spread([r["latency_ms"][q] for r in mine])
                        for q in ("p50", "p95", "p99", "max")
                    },
                }
            )
    return {
        "how": "per run a fresh checkpoint and input directory, one session for all runs; the "
        "query starts on one warm-up file and its commit is awaited (the cold first batch is "
        "not measured); then book text is dripped in files at the given words/s (file i "
        "renamed into the directory when files 0..i are due); latency per file = mtime of "
        "commits/<batch> of the batch whose sources/0 log lists the file - time.time() right "
        "after the rename; percentiles over the files of a run, then the spread over runs",
        "duration_s": duration_s,
        "files_per_s": files_per_s,
        "summary": summary,
        "runs": results,
        "errors": errors,
    }


def session_probe_main() -> int:
    """The ``session-probe`` subcommand: start a session, print its timing as JSON, stop."""
    started = time.time()
    spark = spark_session()
    ready = time.time()
    spark.stop()
    print(json.dumps({"session_s": ready - started, "session_ready_unix_s": ready}))
    return 0


def run_error(run: int, baseline: str, error: BaseException) -> dict[str, Any]:
    say(f"run {run} {baseline} failed: {type(error).__name__}: {error}")
    return {"run": run, "baseline": baseline, "error": f"{type(error).__name__}: {error}"}


def say(text: str) -> None:
    print(text, flush=True)
