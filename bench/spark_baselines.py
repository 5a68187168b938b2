"""Pure-Spark baselines for smr's benchmarks: the word count as Structured Streaming queries on
``local[2]``, with their throughput, latency and recovery after a SIGKILL of the driver.

The life of one word in a baseline:

1. **Input.** ``write_input_files`` (or a ``Dripper``, at a words/s rate) publishes text files
   in an input directory: each is written under a hidden name (``.x.tmp``, which the file
   source ignores) and renamed into place, so Spark never sees half a file.
2. **Source.** The text file source lists the directory each trigger and takes the new files
   (at most ``maxFilesPerTrigger``, oldest modification time first); each line is a row.
3. **Tokenise.** ``regexp_extract_all(lower(line), "[a-z0-9']+")`` exploded into one row per
   word: the same words as plain Python's ``WORD.findall(line.lower())`` (checked over the whole
   corpus by ``check_tokenisation``; the GITenberg BOM and CRLF endings are not word characters
   on either side).
4. **Count.** One of the ``BASELINES``: ``native`` (``groupBy(word).count()``), ``pandas_state``
   (``applyInPandasWithState``, a count per word) or ``tws_pandas``
   (``transformWithStateInPandas``, a ``ValueState`` per word); update mode, state in the
   chosen state store provider, checkpointed to a local directory.
5. **Sink.** ``BatchFileSink`` (``foreachBatch``) writes each micro-batch's updated
   ``(word, count)`` rows to ``<sink>/<batch>.json``, atomically, named by the batch id: a batch
   replayed after a crash overwrites its own file with the same rows, so the sink is exactly
   once. ``read_sink_counts`` replays the files of the committed batches in order; in update
   mode a word's last row is its count.
6. **Commit.** Spark writes ``<checkpoint>/commits/<batch>``; ``CheckpointLog`` reads which
   files each batch took (``sources/0``), when it was planned (``offsets/<batch>``'s mtime) and
   when it committed (``commits/<batch>``'s mtime). Every latency and recovery figure is read
   from those mtimes, never from a poll.

Measurements (each one run returns a plain dict; ``*_benchmark`` repeats it ``runs`` times,
round-robin over the baselines, and summarises with ``bench.common.spread``):

- ``measure_throughput``: input words per second from the first batch's trigger start to the
  last commit, at a fixed batch size (``maxFilesPerTrigger`` files), session start excluded
  (``measure_session_start`` times it separately, in fresh processes).
- ``measure_latency``: files dripped at a words/s rate; per file, its publication time to the
  commit of the micro-batch that took it; p50/p95/p99/max.
- ``measure_recovery``: the query in a separate driver process (``driver`` subcommand), preloaded
  with ``keys_n`` distinct keys, fed by a dripper, SIGKILLed (its whole process group: Python
  driver, JVM and Python workers) mid-stream and restarted from its checkpoint; kill → first
  commit after restart, and restart → that commit; counts checked exact at the end.

    python bench/spark_baselines.py throughput|latency|recovery|tokenisation|all [options]

Results go to ``bench/results/spark_baselines.json`` (one section per measurement, each with
the machine, versions and how it was measured) and ``bench/results/spark_baselines.png``.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import datetime
import gzip
import importlib.metadata
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if sys.path[0] != str(REPO):
    sys.path.insert(0, str(REPO))

from bench.common import (  # noqa: E402 (needs the path set above)
    RESULTS,
    SHARED_TEXT,
    WORD,
    check_counts,
    machine,
    percentile,
    source,
    spread,
    versions,
)

RESULTS_JSON = RESULTS / "spark_baselines.json"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
DEFAULT_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
STATE_STORES = {"rocksdb": ROCKSDB_PROVIDER, "default": DEFAULT_PROVIDER}
# The Spark tokeniser: the Java regex is the Python one, applied to Spark's lower().
WORD_PATTERN = WORD.pattern
# One shuffle partition per core: Spark's default of 200 made the stateful word count 10x
# slower on this 2-core machine (PERF-NOTES).
CORES = 2
# How often the harness looks at the checkpoint. Figures come from file mtimes, so this only
# bounds how late the harness notices a commit, not the precision of a figure.
POLL_S = 0.05
# Bounds on waits for things that take seconds; past them the run fails with an error that
# says what it waited for, instead of hanging.
SESSION_TIMEOUT_S = 120.0
BATCH_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
KILL_TIMEOUT_S = 15.0

__all__ = [
    "BASELINES",
    "CORES",
    "DEFAULT_PROVIDER",
    "ROCKSDB_PROVIDER",
    "STATE_STORES",
    "Baseline",
    "Batch",
    "BatchFileSink",
    "CheckpointLog",
    "Dripper",
    "DriverProcess",
    "book_lines",
    "check_tokenisation",
    "directory_counts",
    "drip_files",
    "latency_benchmark",
    "measure_latency",
    "measure_recovery",
    "measure_session_start",
    "measure_throughput",
    "percentile",
    "plot",
    "python_counts",
    "raw_lines",
    "read_sink_counts",
    "recovery_benchmark",
    "save_section",
    "spark_conf",
    "spark_session",
    "spark_versions",
    "split_lines",
    "start_query",
    "synthetic_lines",
    "throughput_benchmark",
    "word_counts_query",
    "write_input_files",
]


@dataclass(frozen=True)
class Baseline:
    """One way to count words in Structured Streaming; ``state_stores`` are the providers it
    runs on here, ``note`` what it needs or refuses (recorded in the results)."""

    name: str
    operator: str
    state_stores: tuple[str, ...]
    note: str = ""


BASELINES: dict[str, Baseline] = {
    "native": Baseline("native", "groupBy(word).count()", ("rocksdb", "default")),
    "pandas_state": Baseline(
        "pandas_state",
        "applyInPandasWithState, a count per word",
        ("rocksdb", "default"),
        "one pandas call per word and batch in a Python worker, through Arrow",
    ),
    "tws_pandas": Baseline(
        "tws_pandas",
        "transformWithStateInPandas, a ValueState per word",
        ("rocksdb",),
        "needs the RocksDB provider: on HDFSBackedStateStoreProvider (the default) PySpark "
        "4.3 fails the query with UNSUPPORTED_FEATURE.STORE_BACKEND_NOT_SUPPORTED_FOR_TWS "
        "('Please use RocksDBStateStoreProvider'); needs protobuf in the Python workers (state "
        "calls go over a local socket to the JVM's state server, one round trip per get/update)",
    ),
}


# -- 1. input -------------------------------------------------------------------------------


def _book_paths() -> list[Path]:
    """The shared books when present, else the two shipped ones (as ``book_words`` does)."""
    return sorted(SHARED_TEXT.glob("pg*.txt")) or sorted((REPO / "examples" / "data").glob("*.gz"))


def raw_lines(path: Path) -> Generator[str, None, None]:
    """A book's lines as they are on disk: BOM and CRLF endings kept (``newline=""``),
    undecodable bytes replaced as ``book_words`` replaces them."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as text:
        yield from text


def book_lines(words_n: int, paths: Sequence[Path] | None = None) -> list[str]:
    """Lines of the books, in order and wrapping around, until they hold at least ``words_n``
    words; every line ends with a line break (so files can be concatenated safely)."""
    paths = list(paths) if paths is not None else _book_paths()
    lines: list[str] = []
    words = 0
    while words < words_n:
        before = words
        for path in paths:
            for line in raw_lines(path):
                lines.append(line if line.endswith(("\n", "\r")) else line + "\n")
                words += len(WORD.findall(line.lower()))
                if words >= words_n:
                    return lines
        if words == before:
            raise RuntimeError(f"no words in the books {[str(p) for p in paths]}")
    return lines


def synthetic_lines(keys_n: int, words_per_line: int = 10, prefix: str = "k") -> list[str]:
    """``keys_n`` distinct keys (``k0000000``, ...), each once, ``words_per_line`` to a line:
    a state of exactly ``keys_n`` keys for the recovery benchmark."""
    width = max(7, len(str(keys_n - 1)))
    keys = [f"{prefix}{i:0{width}d}" for i in range(keys_n)]
    return [" ".join(keys[i : i + words_per_line]) + "\n" for i in range(0, keys_n, words_per_line)]


def python_counts(lines: Iterable[str]) -> collections.Counter[str]:
    """Plain Python's word count: ``WORD.findall(line.lower())`` over every line."""
    counts: collections.Counter[str] = collections.Counter()
    for line in lines:
        counts.update(WORD.findall(line.lower()))
    return counts


def directory_counts(directory: Path, names: Iterable[str] | None = None) -> dict[str, int]:
    """Plain Python's word count of the visible files of ``directory`` (or only ``names``),
    decoded as the books are."""
    counts: collections.Counter[str] = collections.Counter()
    chosen = sorted(names) if names is not None else _visible_files(directory)
    for name in chosen:
        with open(directory / name, encoding="utf-8", errors="replace") as text:
            counts.update(python_counts(text))
    return dict(counts)


def _visible_files(directory: Path) -> list[str]:
    """The files the file source sees: not hidden (``.``) nor private (``_``)."""
    return sorted(
        entry.name
        for entry in os.scandir(directory)
        if entry.is_file() and not entry.name.startswith((".", "_"))
    )


def _publish(directory: Path, name: str, lines: Sequence[str], mtime_ns: int | None = None) -> None:
    """Write ``lines`` to ``directory/name`` atomically: a hidden temporary file renamed
    into place, so the file source never lists a partial file."""
    temporary = directory / f".{name}.tmp"
    with open(temporary, "w", encoding="utf-8", newline="") as out:
        out.writelines(lines)
    if mtime_ns is not None:
        os.utime(temporary, ns=(mtime_ns, mtime_ns))
    os.rename(temporary, directory / name)


def split_lines(lines: Sequence[str], words_per_file: int) -> list[list[str]]:
    """Consecutive groups of lines holding ``words_per_file`` words each (the last group
    what is left); a line is never split."""
    if words_per_file < 1:
        raise ValueError(f"words_per_file must be >= 1, got {words_per_file}")
    groups: list[list[str]] = []
    group: list[str] = []
    words = 0
    for line in lines:
        group.append(line)
        words += len(WORD.findall(line.lower()))
        if words >= words_per_file:
            groups.append(group)
            group, words = [], 0
    if group:
        groups.append(group)
    return groups


def write_input_files(
    lines: Sequence[str], directory: Path, files_n: int, prefix: str = "part-"
) -> dict[str, Any]:
    """Split ``lines`` into ``files_n`` numbered files of about equal word counts in
    ``directory`` (created if needed): ``part-000000.txt``, ... Each file is published
    atomically and its modification time is 1 ms after the previous one, so a file source
    with ``maxFilesPerTrigger`` takes them in number order. Returns the files' names, words
    and lines, and the totals."""
    if files_n < 1:
        raise ValueError(f"files_n must be >= 1, got {files_n}")
    directory.mkdir(parents=True, exist_ok=True)
    words_per_line = [len(WORD.findall(line.lower())) for line in lines]
    total = sum(words_per_line)
    files: list[dict[str, Any]] = []
    start = 0
    done_words = 0
    base_ns = time.time_ns() - files_n * 1_000_000
    for index in range(files_n):
        target = total * (index + 1) / files_n
        end = start
        words = 0
        while end < len(lines) and (done_words + words < target or index == files_n - 1):
            words += words_per_line[end]
            end += 1
        name = f"{prefix}{index:06d}.txt"
        _publish(directory, name, lines[start:end], mtime_ns=base_ns + index * 1_000_000)
        files.append({"name": name, "words": words, "lines": end - start})
        done_words += words
        start = end
    return {
        "directory": str(directory),
        "files_n": files_n,
        "words": total,
        "lines": len(lines),
        "files": files,
    }


class Dripper:
    """Publishes files into a directory at ``words_per_s``, in a thread: file ``i`` appears
    when the words of files ``0..i`` are due (``start + words_so_far / words_per_s``), like a
    log rolled whenever it holds a file's worth. Each file is renamed into place atomically;
    ``published`` records its name, words and publication time (``time.time()`` right after
    the rename). Stops after the last file or at ``stop()``; behind schedule, it publishes
    the files that are due at once (an open-loop source)."""

    def __init__(
        self,
        files: Sequence[Sequence[str]],
        directory: Path,
        words_per_s: float,
        prefix: str = "drip-",
    ) -> None:
        if words_per_s <= 0:
            raise ValueError(f"words_per_s must be > 0, got {words_per_s}")
        self.files = files
        self.directory = directory
        self.words_per_s = words_per_s
        self.prefix = prefix
        self.published: list[dict[str, Any]] = []
        self.started_at_unix_s: float | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dripper", daemon=True)

    def start(self) -> Dripper:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the last file; True if the dripper is done."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            start = time.time()
            self.started_at_unix_s = start
            words_due = 0
            for index, lines in enumerate(self.files):
                words = sum(len(WORD.findall(line.lower())) for line in lines)
                words_due += words
                delay = start + words_due / self.words_per_s - time.time()
                if delay > 0 and self._stop.wait(delay):
                    return
                if self._stop.is_set():
                    return
                name = f"{self.prefix}{index:06d}.txt"
                _publish(self.directory, name, lines)
                self.published.append(
                    {"name": name, "words": words, "published_at_unix_s": time.time()}
                )
        except BaseException as error:  # reported by whoever reads the records
            self.error = error


def drip_files(
    files: Sequence[Sequence[str]], directory: Path, words_per_s: float, prefix: str = "drip-"
) -> list[dict[str, Any]]:
    """Publish ``files`` into ``directory`` at ``words_per_s`` (see ``Dripper``), blocking
    until the last one; returns each file's name, words and publication time."""
    dripper = Dripper(files, directory, words_per_s, prefix).start()
    dripper.join()
    if dripper.error is not None:
        raise dripper.error
    return dripper.published


# -- 2. session ------------------------------------------------------------------------------

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
"""


def _quiet_spark_environment() -> None:
    """Before the JVM starts: Python workers use this interpreter, Spark binds to 127.0.0.1
    (no hostname warning) and logs only errors from the first line (a log4j2 configuration in
    a private ``SPARK_CONF_DIR``, removed at exit), unless the caller set these already."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if "SPARK_CONF_DIR" not in os.environ:
        conf_dir = tempfile.mkdtemp(prefix="smr-spark-conf-")
        atexit.register(shutil.rmtree, conf_dir, True)
        Path(conf_dir, "log4j2.properties").write_text(_LOG4J2)
        os.environ["SPARK_CONF_DIR"] = conf_dir


def spark_conf(state_store: str = "rocksdb") -> dict[str, str]:
    """The Spark settings of every baseline session."""
    if state_store not in STATE_STORES:
        raise ValueError(f"state_store must be one of {sorted(STATE_STORES)}, got {state_store!r}")
    return {
        "spark.master": f"local[{CORES}]",
        "spark.sql.shuffle.partitions": str(CORES),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.stateStore.providerClass": STATE_STORES[state_store],
        # Every batch's progress stays readable (the default keeps the last 100).
        "spark.sql.streaming.numRecentProgressUpdates": "100000",
        # Every batch's offsets, commit and file list stay in the checkpoint (the default
        # keeps the last 100), so that latency is read for every file of a long run.
        "spark.sql.streaming.minBatchesToRetain": "100000",
        "spark.driver.memory": "2g",
    }


def spark_session(state_store: str = "rocksdb", app_name: str = "smr-spark-baselines") -> Any:
    """A SparkSession for the baselines (``spark_conf``): ``local[2]``, 2 shuffle partitions,
    no UI, errors-only logs, ``state_store`` (``rocksdb`` or ``default``) as the default
    provider. ``start_query`` sets the provider per query, so one session serves both."""
    _quiet_spark_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf(state_store).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# -- 3. the queries --------------------------------------------------------------------------


def word_stream(spark: Any, input_dir: Path, max_files_per_trigger: int | None = None) -> Any:
    """The words of the text files in ``input_dir`` as a streaming DataFrame ``(word)``:
    ``regexp_extract_all(lower(line), "[a-z0-9']+")``, exploded."""
    from pyspark.sql import functions as F

    reader = spark.readStream.format("text")
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    lines = reader.load(str(input_dir))
    tokens = F.regexp_extract_all(F.lower(F.col("value")), F.lit(WORD_PATTERN), F.lit(0))
    return lines.select(F.explode(tokens).alias("word"))


def _pandas() -> Any:
    """pandas, imported where a Python worker needs it (it has no type stubs here)."""
    import pandas  # type: ignore[import-untyped]

    return pandas


def _count_with_pandas_state(key: tuple[str], batches: Iterator[Any], state: Any) -> Iterator[Any]:
    """``applyInPandasWithState``: add the batch's rows of this word to its count."""
    pd = _pandas()

    total = state.get[0] if state.exists else 0
    for batch in batches:
        total += len(batch)
    state.update((total,))
    yield pd.DataFrame({"word": [key[0]], "count": [total]})


def _count_processor() -> Any:
    """A ``StatefulProcessor`` for ``transformWithStateInPandas``: a ``ValueState`` named
    ``count`` per word. Built here so that importing this module needs no pyspark."""
    pd = _pandas()
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class CountProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            total = self.count.get()[0] if self.count.exists() else 0
            for batch in rows:
                total += len(batch)
            self.count.update((total,))
            yield pd.DataFrame({"word": [key[0]], "count": [total]})

        def close(self) -> None:
            pass

    return CountProcessor()


def word_counts_query(baseline: str, words: Any) -> Any:
    """The running ``(word, count)`` rows of ``words`` by ``baseline``, for update mode: each
    batch yields the new total of every word it saw."""
    if baseline == "native":
        return words.groupBy("word").count()
    if baseline == "pandas_state":
        from pyspark.sql.streaming.state import GroupStateTimeout

        return words.groupBy("word").applyInPandasWithState(
            _count_with_pandas_state,
            outputStructType="word string, count long",
            stateStructType="count long",
            outputMode="Update",
            timeoutConf=GroupStateTimeout.NoTimeout,
        )
    if baseline == "tws_pandas":
        return words.groupBy("word").transformWithStateInPandas(
            statefulProcessor=_count_processor(),
            outputStructType="word string, count long",
            outputMode="Update",
            timeMode="None",
        )
    raise ValueError(f"baseline must be one of {sorted(BASELINES)}, got {baseline!r}")


class BatchFileSink:
    """A ``foreachBatch`` sink that makes the latest counts readable and survives a crash:
    each batch's rows go to ``<directory>/<batch id>.json``, written to a hidden file and
    renamed. A batch Spark replays after a crash reads the same files and the same state
    version, so it rewrites the same rows: exactly once. One action per batch (``collect``),
    so the stateful plan runs once."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def __call__(self, batch: Any, batch_id: int) -> None:
        rows = [[row[0], row[1]] for row in batch.collect()]
        name = f"{batch_id:09d}.json"
        temporary = self.directory / f".{name}.tmp"
        temporary.write_text(json.dumps(rows))
        os.replace(temporary, self.directory / name)


def read_sink_counts(directory: Path, batches: Iterable[int] | None = None) -> dict[str, int]:
    """Every word's count from a ``BatchFileSink``: the batches' rows replayed in batch order,
    the last row of a word winning (update mode). ``batches``: only these (pass the committed
    ones: a batch interrupted before its commit may have written rows that do not count)."""
    chosen = set(batches) if batches is not None else None
    counts: dict[str, int] = {}
    for name in sorted(_visible_files(directory)):
        batch_id = int(name.split(".")[0])
        if chosen is None or batch_id in chosen:
            counts.update(
                (word, count) for word, count in json.loads((directory / name).read_text())
            )
    return counts


def start_query(
    spark: Any,
    baseline: str,
    input_dir: Path,
    checkpoint_dir: Path,
    sink_dir: Path,
    state_store: str = "rocksdb",
    max_files_per_trigger: int | None = None,
    trigger_ms: int = 0,
    available_now: bool = False,
) -> Any:
    """Start ``baseline``'s word count over ``input_dir``: update mode, ``BatchFileSink`` into
    ``sink_dir``, checkpoint in ``checkpoint_dir``, ``state_store`` as the provider (fixed by
    the checkpoint from the first batch on). Trigger: ``available_now`` (every file present
    now, in batches of ``max_files_per_trigger``, then stop), else every ``trigger_ms``, else
    (0) Spark's default: the next batch as soon as the last one is done and there is input."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {sorted(BASELINES)}, got {baseline!r}")
    if state_store not in BASELINES[baseline].state_stores:
        raise ValueError(
            f"{baseline} runs on {BASELINES[baseline].state_stores} here, not {state_store!r}"
        )
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", STATE_STORES[state_store])
    counts = word_counts_query(baseline, word_stream(spark, input_dir, max_files_per_trigger))
    writer = (
        counts.writeStream.outputMode("update")
        .foreachBatch(BatchFileSink(sink_dir))
        .option("checkpointLocation", str(checkpoint_dir))
        .queryName(f"{baseline}-{state_store}-{checkpoint_dir.name}")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_ms > 0:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    return writer.start()


# -- the checkpoint as a record of the batches -----------------------------------------------


@dataclass
class Batch:
    """One micro-batch as the checkpoint records it."""

    batch_id: int
    files: list[str]
    planned_at_unix_s: float | None  # offsets/<batch> written (the batch's input is fixed)
    committed_at_unix_s: float | None  # commits/<batch> written


class CheckpointLog:
    """Reads a query's checkpoint: which files each batch took (``sources/0``, including the
    ``.compact`` files the file source rolls up every 10 batches), when it was planned and when
    it committed (the mtimes of ``offsets/<batch>`` and ``commits/<batch>``, which Spark writes
    to a temporary file and renames). Source log files never change once written, so they are
    parsed once."""

    def __init__(self, checkpoint_dir: Path) -> None:
        self.checkpoint_dir = checkpoint_dir
        self._parsed: dict[str, list[tuple[str, int]]] = {}

    def _mtimes(self, sub: str) -> dict[int, float]:
        directory = self.checkpoint_dir / sub
        if not directory.is_dir():
            return {}
        return {
            int(entry.name): entry.stat().st_mtime
            for entry in os.scandir(directory)
            if entry.name.isdigit()
        }

    def committed(self) -> dict[int, float]:
        """Commit time of every committed batch."""
        return self._mtimes("commits")

    def batches(self) -> dict[int, Batch]:
        """Every batch the checkpoint knows of, by id."""
        files: dict[int, set[str]] = collections.defaultdict(set)
        log_dir = self.checkpoint_dir / "sources" / "0"
        if log_dir.is_dir():
            for entry in os.scandir(log_dir):
                if entry.name.startswith("."):
                    continue
                if entry.name not in self._parsed:
                    self._parsed[entry.name] = _parse_source_log(Path(entry.path))
                for name, batch_id in self._parsed[entry.name]:
                    files[batch_id].add(name)
        planned = self._mtimes("offsets")
        committed = self.committed()
        return {
            batch_id: Batch(
                batch_id,
                sorted(files.get(batch_id, ())),
                planned.get(batch_id),
                committed.get(batch_id),
            )
            for batch_id in sorted(set(files) | set(planned) | set(committed))
        }

    def file_commits(self) -> dict[str, tuple[int, float | None]]:
        """Each file the source took: its batch and that batch's commit time (None if not yet
        committed)."""
        return {
            name: (batch.batch_id, batch.committed_at_unix_s)
            for batch in self.batches().values()
            for name in batch.files
        }

    def wait_committed(self, names: Iterable[str], timeout_s: float, what: str) -> None:
        """Wait until every file of ``names`` is in a committed batch; TimeoutError saying
        how many are missing otherwise."""
        wanted = set(names)
        deadline = time.monotonic() + timeout_s
        while True:
            done = {n for n, (_, at) in self.file_commits().items() if at is not None}
            if wanted <= done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what}: {len(wanted - done)} of {len(wanted)} files not committed after "
                    f"{timeout_s:.0f} s (checkpoint {self.checkpoint_dir})"
                )
            time.sleep(POLL_S)


def _parse_source_log(path: Path) -> list[tuple[str, int]]:
    """``(file name, batch id)`` of each entry of a file source log file (``v1`` then one
    JSON object per line with ``path`` as a URI and ``batchId``)."""
    entries = []
    for line in path.read_text().splitlines()[1:]:
        if line.strip():
            record = json.loads(line)
            name = Path(urllib.parse.unquote(urllib.parse.urlparse(record["path"]).path)).name
            entries.append((name, int(record["batchId"])))
    return entries


def _progress_time(timestamp: str) -> float:
    """A progress event's ``timestamp`` (ISO 8601, UTC, ms) as Unix seconds."""
    parsed = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


# -- 4a. throughput --------------------------------------------------------------------------


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
    for name in _visible_files(directory):
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
            [sys.executable, str(Path(__file__).resolve()), "session-probe"],
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
                    errors.append(_error(run, baseline, error))
                    continue
                record["run"] = run
                results.append(record)
                _say(
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


# -- 4b. latency -----------------------------------------------------------------------------


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
    _publish(input_dir, "warmup.txt", list(warmup_lines))
    log = CheckpointLog(checkpoint_dir)
    query = start_query(
        spark, baseline, input_dir, checkpoint_dir, sink_dir, state_store, trigger_ms=trigger_ms
    )
    dripper = Dripper(files, input_dir, words_per_s)
    try:
        log.wait_committed(["warmup.txt"], BATCH_TIMEOUT_S, f"{baseline} warm-up")
        dripper.start()
        while not dripper.join(POLL_S):
            if not query.isActive:
                raise RuntimeError(f"{baseline} query stopped: {query.exception()}")
        if dripper.error is not None:
            raise dripper.error
        log.wait_committed(
            [f["name"] for f in dripper.published], BATCH_TIMEOUT_S, f"{baseline} drained"
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
                        errors.append({**_error(run, baseline, error), "trigger_ms": trigger_ms})
                        continue
                    record["run"] = run
                    results.append(record)
                    latency = record["latency_ms"]
                    _say(
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


# -- 4c. recovery ----------------------------------------------------------------------------


class DriverProcess:
    """A baseline query in its own driver process (``python bench/spark_baselines.py
    driver``), in a new session so that its process group holds the Python driver, the JVM and
    the Python workers. It records its steps in a JSON-lines events file; ``stop`` asks it to
    stop (a stop file), ``kill`` SIGKILLs the whole group by its id."""

    def __init__(self, workdir: Path, label: str, args: Sequence[str]) -> None:
        self.events_path = workdir / f"{label}.events.jsonl"
        self.stop_path = workdir / f"{label}.stop"
        self.log_path = workdir / f"{label}.log"
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "driver",
            *args,
            "--events",
            str(self.events_path),
            "--stop-file",
            str(self.stop_path),
        ]
        # Nothing of a SIGKILLed driver outlives workdir: the log4j2 configuration comes from
        # this process, Spark's scratch (block manager, RocksDB working copies) goes to
        # SPARK_LOCAL_DIRS and the JVM's and Python's temporary files to the same place.
        _quiet_spark_environment()
        local_dir = workdir / f"{label}.spark-local"
        local_dir.mkdir(exist_ok=True)
        environment = {
            **os.environ,
            "SPARK_LOCAL_DIRS": str(local_dir),
            "TMPDIR": str(local_dir),
            "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={local_dir}",
        }
        self.spawned_at_unix_s = time.time()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=environment,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def events(self) -> dict[str, dict[str, Any]]:
        """The driver's events so far, by name."""
        if not self.events_path.exists():
            return {}
        lines = self.events_path.read_text().splitlines()
        return {e["event"]: e for e in (json.loads(line) for line in lines if line.strip())}

    def wait_event(self, name: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            events = self.events()
            if name in events:
                return events[name]
            if "failed" in events or self.process.poll() is not None:
                raise RuntimeError(
                    f"driver {self.pid} ended before {name!r}: {events.get('failed')}; log "
                    f"{self.log_path}: {self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"driver {self.pid}: no {name!r} after {timeout_s:.0f} s")
            time.sleep(POLL_S)

    def log_tail(self, lines: int = 15) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def group(self) -> list[Any]:
        """The live processes of the driver's process group (whose id is the driver's PID),
        including the ones orphaned when the driver exited (the JVM outlives it briefly)."""
        import psutil

        members = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getpgid(process.pid) == self.pid and _alive(process):
                    members.append(process)
        return members

    def kill(self) -> dict[str, Any]:
        """SIGKILL the driver's process group by its id and wait until every process of it is
        gone (a zombie counts as gone); any still there is killed by its own PID."""
        members = self.group()
        killed_at = time.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(KILL_TIMEOUT_S)
        stragglers = _wait_gone(members, KILL_TIMEOUT_S)
        for straggler in stragglers:
            with contextlib.suppress(Exception):
                straggler.kill()
        return {
            "killed_at_unix_s": killed_at,
            "gone_after_s": time.time() - killed_at,
            "processes": len(members),
            "stragglers": [p.pid for p in stragglers],
        }

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Ask the driver to stop its query and session (the stop file) and wait until its
        whole group has exited; SIGKILL the group if it has not after ``timeout_s``. True if
        it stopped by itself."""
        members = self.group()
        self.stop_path.touch()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return False
        if _wait_gone(members, timeout_s):
            self.kill()
            return False
        return True

    def ensure_stopped(self) -> None:
        """Kill whatever is left of the group (for ``finally`` blocks)."""
        if self.process.poll() is None or self.group():
            self.kill()


def _alive(process: Any) -> bool:
    """Running and not a zombie (a killed process init has not reaped yet is gone)."""
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _wait_gone(processes: Sequence[Any], timeout_s: float) -> list[Any]:
    """Wait until none of ``processes`` is alive; the ones still alive after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in processes if _alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def measure_recovery(
    baseline: str,
    keys_n: int,
    workdir: Path,
    words_per_s: float = 10_000.0,
    state_store: str = "rocksdb",
    trigger_ms: int = 0,
    kill_after_s: float = 3.0,
    after_restart_s: float = 2.0,
    words_per_file: int = 2_000,
    keys_per_file: int = 100_000,
) -> dict[str, Any]:
    """One recovery run, in ``workdir`` (kept for its logs; the caller removes it).

    1. Preload: ``keys_n`` distinct keys (``synthetic_lines``), files of ``keys_per_file``,
       in the input directory before the driver starts.
    2. Start driver 1; wait until the preload files are committed: the state holds
       ``keys_n`` keys (plus nothing else).
    3. Drip book text at ``words_per_s`` in files of ``words_per_file`` words.
    4. After ``kill_after_s`` of drip, and at least one committed batch of it, SIGKILL
       driver 1's process group; wait until every process of it is gone.
    5. Restart at once: driver 2 on the same checkpoint, input and sink. The drip goes on.
    6. The first batch committed after the kill (``commits/<batch>`` mtime > kill) gives
       ``kill_to_commit_s`` and ``restart_to_commit_s``; driver 2's events split the latter
       into spawn → session ready → query started → commit.
    7. Drip ``after_restart_s`` more, stop the drip, wait until every file is committed, stop
       driver 2 (stop file; SIGKILL of its group if it hangs).
    8. Counts: the sink's rows of the committed batches vs plain Python over every input file.
    """
    input_dir, checkpoint_dir, sink_dir = (
        workdir / "input",
        workdir / "checkpoint",
        workdir / "sink",
    )
    preload = write_input_files(
        synthetic_lines(keys_n), input_dir, max(1, math.ceil(keys_n / keys_per_file)), "keys-"
    )
    drip = split_lines(
        book_lines(int(words_per_s * (kill_after_s + after_restart_s + 120))), words_per_file
    )
    log = CheckpointLog(checkpoint_dir)
    driver_args = [
        "--baseline",
        baseline,
        "--state-store",
        state_store,
        "--trigger-ms",
        str(trigger_ms),
        "--input",
        str(input_dir),
        "--checkpoint",
        str(checkpoint_dir),
        "--sink",
        str(sink_dir),
    ]
    record: dict[str, Any] = {
        "baseline": baseline,
        "state_store": state_store,
        "keys_n": keys_n,
        "trigger": f"{trigger_ms} ms" if trigger_ms else "default",
        "words_per_s": words_per_s,
    }
    dripper = Dripper(drip, input_dir, words_per_s)
    drivers: list[DriverProcess] = []
    try:
        # 1.-2. preload
        first = DriverProcess(workdir, "driver1", driver_args)
        drivers.append(first)
        ready = first.wait_event("session_ready", SESSION_TIMEOUT_S)
        preload_started = time.time()
        log.wait_committed([f["name"] for f in preload["files"]], BATCH_TIMEOUT_S, "preload")
        record["preload_s"] = time.time() - preload_started
        record["first_session_s"] = ready["session_s"]
        # 3.-4. drip, then kill mid-stream
        dripper.start()
        time.sleep(kill_after_s)
        deadline = time.monotonic() + BATCH_TIMEOUT_S
        while not any(
            name.startswith("drip-") and at is not None
            for name, (_, at) in log.file_commits().items()
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("no dripped file committed before the kill")
            time.sleep(POLL_S)
        kill = first.kill()
        committed_before = log.committed()
        batches_before = log.batches()
        # 5. restart
        second = DriverProcess(workdir, "driver2", driver_args)
        drivers.append(second)
        # 6. the first commit after the kill
        deadline = time.monotonic() + BATCH_TIMEOUT_S
        while True:
            after = {b: at for b, at in log.committed().items() if at > kill["killed_at_unix_s"]}
            if after:
                break
            if second.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no commit after restart; driver 2 log: {second.log_tail()}")
            time.sleep(POLL_S)
        first_batch = min(after)
        committed_at = after[first_batch]
        events = second.events()
        batch = log.batches()[first_batch]
        # 7. more drip, then drain and stop
        time.sleep(after_restart_s)
        dripper.stop()
        if dripper.error is not None:
            raise dripper.error
        log.wait_committed(
            [f["name"] for f in dripper.published], BATCH_TIMEOUT_S, "drained after restart"
        )
        record["stopped_cleanly"] = second.stop()
        # 8. counts
        committed = log.committed()
        counted = read_sink_counts(sink_dir, committed)
        expected = directory_counts(input_dir)
        last_before = max(committed_before) if committed_before else None
        uncommitted = [
            b for b, known in batches_before.items() if known.committed_at_unix_s is None
        ]
        record.update(
            killed_at_unix_s=kill["killed_at_unix_s"],
            processes_killed=kill["processes"],
            stragglers=kill["stragglers"],
            last_batch_before_kill=last_before,
            uncommitted_batches_at_kill=uncommitted,
            first_batch_after_restart=first_batch,
            first_batch_replayed=first_batch in uncommitted,
            first_batch_files=len(batch.files),
            restarted_at_unix_s=second.spawned_at_unix_s,
            kill_to_restart_s=second.spawned_at_unix_s - kill["killed_at_unix_s"],
            kill_to_commit_s=committed_at - kill["killed_at_unix_s"],
            restart_to_commit_s=committed_at - second.spawned_at_unix_s,
            restart_to_session_s=events["session_ready"]["unix_s"] - second.spawned_at_unix_s,
            session_s=events["session_ready"]["session_s"],
            session_to_query_s=events["query_started"]["unix_s"]
            - events["session_ready"]["unix_s"],
            query_start_to_commit_s=committed_at - events["query_started"]["unix_s"],
            files_dripped=len(dripper.published),
            words_dripped=sum(f["words"] for f in dripper.published),
            batches=len(committed),
            **check_counts(counted, expected),
        )
        return record
    finally:
        dripper.stop()
        for driver in drivers:
            driver.ensure_stopped()


def recovery_benchmark(
    cases: Sequence[tuple[str, str]] = (("native", "rocksdb"), ("native", "default")),
    keys: Sequence[int] = (10_000, 100_000),
    runs: int = 3,
    words_per_s: float = 10_000.0,
    trigger_ms: int = 0,
    kill_after_s: float = 3.0,
    logs_dir: Path | None = None,
) -> dict[str, Any]:
    """``measure_recovery`` ``runs`` times for each (baseline, state store) of ``cases`` and
    each state size in ``keys``, round-robin; per (case, keys): the spread of kill → commit,
    restart → commit and its parts, and exactness. Each run's driver logs are copied under
    ``logs_dir`` if given."""
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for run in range(runs):
        for baseline, state_store in cases:
            for keys_n in keys:
                workdir = Path(tempfile.mkdtemp(prefix="smr-spark-recovery-"))
                try:
                    record = measure_recovery(
                        baseline,
                        keys_n,
                        workdir,
                        words_per_s,
                        state_store,
                        trigger_ms,
                        kill_after_s,
                    )
                except Exception as error:
                    errors.append(
                        {
                            **_error(run, baseline, error),
                            "state_store": state_store,
                            "keys_n": keys_n,
                        }
                    )
                    continue
                finally:
                    if logs_dir is not None:
                        target = logs_dir / f"run{run}-{baseline}-{state_store}-{keys_n}"
                        target.mkdir(parents=True, exist_ok=True)
                        for log in [*workdir.glob("*.log"), *workdir.glob("*.events.jsonl")]:
                            shutil.copy(log, target)
                    shutil.rmtree(workdir, ignore_errors=True)
                record["run"] = run
                results.append(record)
                _say(
                    f"recovery run {run} {baseline}/{state_store} {keys_n:,} keys: kill → commit "
                    f"{record['kill_to_commit_s']:.1f} s, restart → commit "
                    f"{record['restart_to_commit_s']:.1f} s (session {record['session_s']:.1f} s)"
                    f", exact {record['exact']}"
                )
    summary = []
    for baseline, state_store in cases:
        for keys_n in keys:
            mine = [
                r
                for r in results
                if (r["baseline"], r["state_store"], r["keys_n"]) == (baseline, state_store, keys_n)
            ]
            row: dict[str, Any] = {
                "baseline": baseline,
                "state_store": state_store,
                "keys_n": keys_n,
                "runs": len(mine),
                "exact": sum(1 for r in mine if r["exact"]),
                "first_batch_replayed": sum(1 for r in mine if r["first_batch_replayed"]),
            }
            for figure in (
                "kill_to_commit_s",
                "restart_to_commit_s",
                "kill_to_restart_s",
                "restart_to_session_s",
                "session_s",
                "session_to_query_s",
                "query_start_to_commit_s",
                "preload_s",
            ):
                row[figure] = spread([r[figure] for r in mine])
            summary.append(row)
    return {
        "how": "per run a fresh directory; the query runs in a driver process of its own "
        "(python bench/spark_baselines.py driver, new session); keys_n distinct keys are "
        "preloaded and committed, then book text is dripped at words_per_s; after kill_after_s "
        "(and a committed batch of drip) the driver's process group (Python driver, JVM, Python "
        "workers) is SIGKILLed and, once every process is gone, a new driver is started on the "
        "same checkpoint while the drip goes on. kill_to_commit_s = mtime of the first "
        "commits/<batch> written after the kill - the kill; restart_to_commit_s = that commit - "
        "the new driver's spawn; its parts from the driver's events (session ready, query "
        "started). At the end the sink's rows of the committed batches are compared with plain "
        "Python's count of every input file.",
        "words_per_s": words_per_s,
        "trigger": f"{trigger_ms} ms" if trigger_ms else "default",
        "kill_after_s": kill_after_s,
        "summary": summary,
        "runs": results,
        "errors": errors,
    }


# -- the tokenisation check ------------------------------------------------------------------


def check_tokenisation(spark: Any, paths: Sequence[Path] | None = None) -> dict[str, Any]:
    """Spark's tokenisation (``word_stream``'s expression, as a batch job over the book files
    as they are on disk) against plain Python's ``WORD.findall(line.lower())`` over the same
    files: equal counts, or the words where they differ."""
    from pyspark.sql import functions as F

    paths = list(paths) if paths is not None else _book_paths()
    plain = [p for p in paths if p.suffix != ".gz"]
    expected: collections.Counter[str] = collections.Counter()
    for path in plain:
        expected.update(python_counts(raw_lines(path)))
    tokens = F.regexp_extract_all(F.lower(F.col("value")), F.lit(WORD_PATTERN), F.lit(0))
    rows = (
        spark.read.text([str(p) for p in plain])
        .select(F.explode(tokens).alias("word"))
        .groupBy("word")
        .count()
        .collect()
    )
    counted = {row["word"]: row["count"] for row in rows}
    return {
        "how": "spark.read.text over the book files as on disk (BOM, CRLF), "
        'regexp_extract_all(lower(value), "[a-z0-9\']+"), exploded and counted, vs plain '
        "Python's WORD.findall(line.lower()) over the same files opened with newline=''",
        "files": [p.name for p in plain],
        "words": sum(expected.values()),
        **check_counts(counted, dict(expected)),
    }


# -- the driver process ----------------------------------------------------------------------


def driver_main(args: argparse.Namespace) -> int:
    """The ``driver`` subcommand: one baseline query until the stop file appears; its steps
    as JSON lines in the events file."""
    events_path: Path = args.events

    def event(name: str, **fields: Any) -> None:
        with open(events_path, "a") as out:
            out.write(json.dumps({"event": name, "unix_s": time.time(), **fields}) + "\n")

    event("started", pid=os.getpid())
    try:
        started = time.time()
        spark = spark_session(args.state_store, app_name=f"smr-baseline-{args.baseline}")
        event("session_ready", session_s=time.time() - started)
        query = start_query(
            spark,
            args.baseline,
            args.input,
            args.checkpoint,
            args.sink,
            args.state_store,
            args.max_files_per_trigger,
            args.trigger_ms,
        )
        event("query_started")
        while query.isActive:
            if args.stop_file.exists():
                query.stop()
                break
            query.awaitTermination(0.2)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        spark.stop()
        event("stopped")
        return 0
    except Exception as error:
        event("failed", error=f"{type(error).__name__}: {error}", traceback=traceback.format_exc())
        return 1


def session_probe_main() -> int:
    """The ``session-probe`` subcommand: start a session, print its timing as JSON, stop."""
    started = time.time()
    spark = spark_session()
    ready = time.time()
    spark.stop()
    print(json.dumps({"session_s": ready - started, "session_ready_unix_s": ready}))
    return 0


# -- report ----------------------------------------------------------------------------------


def spark_versions() -> dict[str, str]:
    """The versions that shape these figures, with ``bench.common.versions``."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    return {
        **versions(),
        **{name: importlib.metadata.version(name) for name in ("pyspark", "pandas", "pyarrow")},
        "protobuf": importlib.metadata.version("protobuf"),
        "java": (java.stderr.splitlines() or ["unknown"])[0],
    }


def _error(run: int, baseline: str, error: BaseException) -> dict[str, Any]:
    _say(f"run {run} {baseline} failed: {type(error).__name__}: {error}")
    return {"run": run, "baseline": baseline, "error": f"{type(error).__name__}: {error}"}


def _say(text: str) -> None:
    print(text, flush=True)


def save_section(
    name: str,
    section: dict[str, Any],
    path: Path = RESULTS_JSON,
    loadavg_before: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Put ``section`` (with when, machine, versions, source) under ``name`` in the results
    JSON, keeping the other sections, and redraw the plot; returns the whole report. The
    machine's load average is recorded after the measurement, and before it if given."""
    report: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    report.setdefault("benchmark", "spark_baselines")
    now = machine()
    now["loadavg_after"] = now.pop("loadavg")
    if loadavg_before is not None:
        now["loadavg_before"] = list(loadavg_before)
    section = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": now,
        "versions": spark_versions(),
        "source": source(),
        "spark_conf": spark_conf(),
        **section,
    }
    report[name] = section
    report["baselines"] = {
        b.name: {"operator": b.operator, "state_stores": list(b.state_stores), "note": b.note}
        for b in BASELINES.values()
    }
    report["machine"], report["versions"] = section["machine"], section["versions"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    plot(report, path.with_suffix(".png"))
    return report


def plot(report: dict[str, Any], path: Path) -> None:
    """One panel per measured section, medians with min-max bars: throughput per baseline
    (whole run and steady), latency percentiles per (baseline, trigger), and recovery per
    (case, keys) as its parts (kill → restart, restart → session, → query started, → first
    commit)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [name for name in ("throughput", "latency", "recovery") if name in report]
    if not panels:
        return
    figure, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5.5), squeeze=False)

    def bars(axis: Any, x: Sequence[float], figures: Sequence[dict[str, Any]], **kw: Any) -> None:
        medians = [f["median"] or 0 for f in figures]
        low = [
            m - (m if f["min"] is None else f["min"]) for m, f in zip(medians, figures, strict=True)
        ]
        high = [
            (m if f["max"] is None else f["max"]) - m for m, f in zip(medians, figures, strict=True)
        ]
        axis.bar(x, medians, yerr=[low, high], capsize=3, **kw)

    for axis, name in zip(axes[0], panels, strict=True):
        rows = report[name]["summary"]
        if name == "throughput":
            labels = list(rows)
            width = 0.4
            positions = range(len(labels))
            bars(
                axis,
                [i - width / 2 for i in positions],
                [rows[b]["words_per_s"] for b in labels],
                width=width,
                label="first batch start → last commit",
            )
            bars(
                axis,
                [i + width / 2 for i in positions],
                [rows[b]["steady_words_per_s"] for b in labels],
                width=width,
                label="steady (batch 0 left out)",
            )
            axis.set_xticks(
                list(positions),
                [f"{b}\n{rows[b]['batch_words']['median'] or 0:,.0f} words/batch" for b in labels],
                fontsize=8,
            )
            axis.set_yscale("log")
            axis.set_ylabel("input words/s")
            axis.set_title("throughput, local[2], session start excluded")
            axis.legend(fontsize=8)
        elif name == "latency":
            width = 0.2
            for offset, q in enumerate(("p50", "p95", "p99", "max")):
                bars(
                    axis,
                    [i + (offset - 1.5) * width for i in range(len(rows))],
                    [r[f"latency_{q}_ms"] for r in rows],
                    width=width,
                    label=q,
                )
            axis.set_xticks(
                range(len(rows)),
                [f"{r['baseline']}\n{r['trigger']}\n{r['words_per_s']:,.0f} w/s" for r in rows],
                fontsize=8,
            )
            axis.set_ylabel("file published → its batch committed (ms)")
            axis.set_title("end-to-end latency per file")
            axis.legend(fontsize=8)
        else:
            parts = (
                ("kill_to_restart_s", "kill → restart"),
                ("restart_to_session_s", "restart → session ready"),
                ("session_to_query_s", "→ query started"),
                ("query_start_to_commit_s", "→ first batch committed"),
            )
            bottom = [0.0] * len(rows)
            for key, label in parts:
                heights = [(r.get(key) or {}).get("median") or 0.0 for r in rows]
                axis.bar(range(len(rows)), heights, bottom=bottom, label=label, width=0.6)
                bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
            total = [r["kill_to_commit_s"] for r in rows]
            axis.errorbar(
                range(len(rows)),
                [t["median"] or 0 for t in total],
                yerr=[
                    [(t["median"] or 0) - (t["min"] or 0) for t in total],
                    [(t["max"] or 0) - (t["median"] or 0) for t in total],
                ],
                fmt="o",
                color="black",
                capsize=4,
                label="kill → first commit (median, min-max)",
            )
            axis.set_xticks(
                range(len(rows)),
                [f"{r['baseline']}/{r['state_store']}\n{r['keys_n']:,} keys" for r in rows],
                fontsize=8,
            )
            tallest = max([t["max"] or 0 for t in total] + bottom)
            axis.set_ylim(0, 1.45 * tallest)  # room for the legend above the bars
            axis.set_ylabel("seconds after SIGKILL of the driver")
            axis.set_title("recovery: restart from the checkpoint (medians of parts)")
            axis.legend(fontsize=8)
    figure.suptitle("Spark Structured Streaming word-count baselines (medians, min-max bars)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# -- CLI -------------------------------------------------------------------------------------


def _rates(text: str) -> dict[str, float]:
    """``name=words_per_s`` items, comma-separated."""
    rates = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name not in BASELINES or not value:
            raise SystemExit(
                f"bad item {item!r}: expected BASELINE=WORDS_PER_S, BASELINE one of "
                f"{sorted(BASELINES)}"
            )
        rates[name] = float(value)
    return rates


def _cases(text: str) -> list[tuple[str, str]]:
    """``baseline/state_store`` items, comma-separated."""
    cases = []
    for item in text.split(","):
        baseline, _, state_store = item.partition("/")
        if baseline not in BASELINES or state_store not in BASELINES[baseline].state_stores:
            raise SystemExit(
                f"bad case {item!r}: expected BASELINE/STATE_STORE, e.g. native/rocksdb; "
                f"stores per baseline: { {b: v.state_stores for b, v in BASELINES.items()} }"
            )
        cases.append((baseline, state_store))
    return cases


def run_throughput(args: argparse.Namespace) -> None:
    session = measure_session_start(args.runs)
    _say(f"session start: {session['spawn_to_session_s']['median']:.1f} s (median)")
    spark = spark_session()
    with tempfile.TemporaryDirectory(prefix="smr-spark-input-") as input_dir:
        lines = book_lines(args.words)
        written = write_input_files(
            lines, Path(input_dir), max(1, round(args.words / args.words_per_file))
        )
        batches_max = {b: args.python_batches for b in ("pandas_state", "tws_pandas")}
        section = throughput_benchmark(
            spark,
            Path(input_dir),
            args.baselines.split(","),
            args.runs,
            args.max_files_per_trigger,
            batches_max,
        )
    spark.stop()
    section.update(
        session_start=session,
        input={
            "words": written["words"],
            "files": written["files_n"],
            "lines": written["lines"],
            "words_per_file": args.words_per_file,
        },
        baselines={b: BASELINES[b].operator for b in args.baselines.split(",")},
    )
    save_section("throughput", section, args.out, args.loadavg_before)


def run_latency(args: argparse.Namespace) -> None:
    spark = spark_session()
    section = latency_benchmark(
        spark,
        _rates(args.rates),
        args.runs,
        [int(t) for t in args.triggers_ms.split(",")],
        args.duration_s,
        args.files_per_s,
    )
    spark.stop()
    save_section("latency", section, args.out, args.loadavg_before)


def run_recovery(args: argparse.Namespace) -> None:
    section = recovery_benchmark(
        _cases(args.cases),
        [int(k) for k in args.keys.split(",")],
        args.runs,
        args.rate,
        args.trigger_ms,
        args.kill_after_s,
        args.logs,
    )
    save_section("recovery", section, args.out, args.loadavg_before)


def run_tokenisation(args: argparse.Namespace) -> None:
    spark = spark_session()
    section = check_tokenisation(spark)
    spark.stop()
    _say(f"tokenisation over {section['words']:,} words: exact {section['exact']}")
    save_section("tokenisation", section, args.out, args.loadavg_before)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--out", type=Path, default=RESULTS_JSON, help="results JSON (the PNG goes next to it)"
    )

    throughput = commands.add_parser(
        "throughput", parents=[common], help="input words/s per baseline"
    )
    throughput.add_argument("--runs", type=int, default=3)
    throughput.add_argument("--words", type=int, default=1_000_000, help="input words")
    throughput.add_argument("--words-per-file", type=int, default=25_000)
    throughput.add_argument("--max-files-per-trigger", type=int, default=2)
    throughput.add_argument(
        "--python-batches",
        type=int,
        default=2,
        help="batches per run for the Python-state baselines (slow): the first N batches",
    )
    throughput.add_argument("--baselines", default=",".join(BASELINES))

    latency = commands.add_parser(
        "latency", parents=[common], help="file published → batch committed, per file"
    )
    latency.add_argument("--runs", type=int, default=3)
    latency.add_argument(
        "--rates",
        default="native=20000,pandas_state=2000,tws_pandas=1000",
        help="BASELINE=WORDS_PER_S items: each baseline's feed rate",
    )
    latency.add_argument("--triggers-ms", default="0,500", help="0 = Spark's default trigger")
    latency.add_argument("--duration-s", type=float, default=20.0)
    latency.add_argument("--files-per-s", type=float, default=4.0)

    recovery = commands.add_parser(
        "recovery", parents=[common], help="SIGKILL the driver, restart, time to commit"
    )
    recovery.add_argument("--runs", type=int, default=3)
    recovery.add_argument(
        "--cases", default="native/rocksdb,native/default", help="BASELINE/STATE_STORE items"
    )
    recovery.add_argument("--keys", default="10000,100000", help="distinct keys preloaded")
    recovery.add_argument("--rate", type=float, default=10_000.0, help="drip words/s")
    recovery.add_argument("--trigger-ms", type=int, default=0)
    recovery.add_argument("--kill-after-s", type=float, default=3.0)
    recovery.add_argument("--logs", type=Path, help="copy each run's driver logs under this dir")

    commands.add_parser(
        "tokenisation", parents=[common], help="Spark's tokens vs Python's over the whole corpus"
    )

    everything = commands.add_parser(
        "all",
        parents=[common],
        help="tokenisation, throughput, latency, recovery with their defaults",
    )
    everything.add_argument("--runs", type=int, default=3)

    driver = commands.add_parser("driver", help="(internal) one query in its own process")
    driver.add_argument("--baseline", choices=sorted(BASELINES), required=True)
    driver.add_argument("--state-store", choices=sorted(STATE_STORES), default="rocksdb")
    driver.add_argument("--input", type=Path, required=True)
    driver.add_argument("--checkpoint", type=Path, required=True)
    driver.add_argument("--sink", type=Path, required=True)
    driver.add_argument("--max-files-per-trigger", type=int)
    driver.add_argument("--trigger-ms", type=int, default=0)
    driver.add_argument("--events", type=Path, required=True)
    driver.add_argument("--stop-file", type=Path, required=True)

    commands.add_parser("session-probe", help="(internal) time one session start")
    commands.add_parser("plot", parents=[common], help="redraw the PNG from the results JSON")

    args = parser.parse_args(argv)
    if args.command == "driver":
        return driver_main(args)
    if args.command == "session-probe":
        return session_probe_main()
    if args.command == "plot":
        plot(json.loads(args.out.read_text()), args.out.with_suffix(".png"))
        return 0
    runners: dict[str, Callable[[argparse.Namespace], None]] = {
        "throughput": run_throughput,
        "latency": run_latency,
        "recovery": run_recovery,
        "tokenisation": run_tokenisation,
    }
    args.loadavg_before = machine()["loadavg"]
    if args.command == "all":
        for name in ("tokenisation", "throughput", "latency", "recovery"):
            defaults = main_parser_defaults(parser, name)
            defaults.runs = args.runs
            defaults.out = args.out
            defaults.loadavg_before = machine()["loadavg"]
            runners[name](defaults)
        return 0
    runners[args.command](args)
    return 0


def main_parser_defaults(parser: argparse.ArgumentParser, command: str) -> argparse.Namespace:
    """The defaults of ``command``'s options, as if it were run with none."""
    return parser.parse_args([command])


if __name__ == "__main__":
    sys.exit(main())
