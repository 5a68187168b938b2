"""The pure-Spark word counts smr is compared with, as Structured Streaming queries on
``local[2]``: the ``BASELINES`` (native aggregation, ``applyInPandasWithState``,
``transformWithStateInPandas``), the session they run in, the sink they write, and the check
that Spark tokenises the books exactly as plain Python does.

A query reads text files (``bench.spark_input``), tokenises each line with
``regexp_extract_all(lower(line), "[a-z0-9']+")``, counts per word in update mode with its
state in the chosen state store provider, and writes each micro-batch's updated
``(word, count)`` rows through ``BatchFileSink``, exactly once. Measuring the queries is
``bench.spark_runners``'s and ``bench.spark_driver_kill``'s job.

Importing this module needs no pyspark: every pyspark import is inside the function that
needs it.
"""

from __future__ import annotations

import atexit
import collections
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import WORD, check_counts, versions
from bench.spark_input import book_paths, python_counts, raw_lines, visible_files

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
DEFAULT_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
STATE_STORES = {"rocksdb": ROCKSDB_PROVIDER, "default": DEFAULT_PROVIDER}
# The Spark tokeniser: the Java regex is the Python one, applied to Spark's lower().
WORD_PATTERN = WORD.pattern
# One shuffle partition per core: Spark's default of 200 made the stateful word count 10x
# slower on this 2-core machine (PERF-NOTES).
CORES = 2
# A bound on the wait for a driver process's session (6-8 s here); past it the run fails
# with an error instead of hanging.
SESSION_TIMEOUT_S = 120.0
# The command line whose ``driver`` and ``session-probe`` subcommands run a query or a bare
# session in a fresh process.
BASELINES_SCRIPT = Path(__file__).resolve().with_name("spark_baselines.py")

__all__ = [
    "BASELINES",
    "BASELINES_SCRIPT",
    "CORES",
    "DEFAULT_PROVIDER",
    "ROCKSDB_PROVIDER",
    "SESSION_TIMEOUT_S",
    "STATE_STORES",
    "Baseline",
    "BatchFileSink",
    "check_tokenisation",
    "quiet_spark_environment",
    "read_sink_counts",
    "spark_conf",
    "spark_session",
    "spark_versions",
    "start_query",
    "word_counts_query",
    "word_stream",
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


# -- the session -----------------------------------------------------------------------------

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
"""


def quiet_spark_environment() -> None:
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
    quiet_spark_environment()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf(state_store).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# -- the queries -----------------------------------------------------------------------------


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
    for name in sorted(visible_files(directory)):
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


# -- the tokenisation check ------------------------------------------------------------------


def check_tokenisation(spark: Any, paths: Sequence[Path] | None = None) -> dict[str, Any]:
    """Spark's tokenisation (``word_stream``'s expression, as a batch job over the book files
    as they are on disk) against plain Python's ``WORD.findall(line.lower())`` over the same
    files: equal counts, or the words where they differ."""
    from pyspark.sql import functions as F

    paths = list(paths) if paths is not None else book_paths()
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


def spark_versions() -> dict[str, str]:
    """The versions that shape these figures, with ``bench.common.versions``."""
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    return {
        **versions(),
        **{name: importlib.metadata.version(name) for name in ("pyspark", "pandas", "pyarrow")},
        "protobuf": importlib.metadata.version("protobuf"),
        "java": (java.stderr.splitlines() or ["unknown"])[0],
    }
