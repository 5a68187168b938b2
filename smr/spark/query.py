"""Spark as the mapper tier (docs/design/architecture.md#spark): a Structured Streaming query runs
the job's ``map`` and emits into the ring. The only module that imports pyspark.

A committed micro-batch is on ``r + 1`` nodes, and a retried task or a batch run again from
the query's checkpoint emits the same ``(mapper, slot, seq)`` identities, which the nodes drop
(exactly-once state from a replayable source); the steps and what they need:
docs/design/architecture.md#spark-batch.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any, Final

try:
    # Checked at import, so a machine without the spark extra gets one line saying what to
    # install rather than a traceback from deep inside a query (pyspark first: a machine
    # with neither is told of it); the modules of pyspark are imported where they are used.
    import pyspark  # noqa: F401
    import pyarrow  # noqa: F401  # isort: skip
except ModuleNotFoundError as missing:
    from smr.spark.setup import SparkMissing

    raise SparkMissing(missing.name or "pyspark") from None

from smr.api import JobLoadError, load_job
from smr.client.control import NodeUnreachable, fetch_view
from smr.mapper.emitter import BATCH_SIZE_DEFAULT, WINDOW_BATCHES_DEFAULT
from smr.spark.partitions import FeedSettings, emit_records, worker_problem
from smr.spark.setup import MASTER_DEFAULT, SparkFeedError
from smr.spec.parse import read_spec
from smr.transport.security import KeysError
from smr.transport.zeromq import use_keys_of
from smr.windows import refuse_windowed

JAVA_MAJOR_MIN: Final = 17
LOG4J2_CONFIG: Final = Path(__file__).with_name("log4j2.properties")


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch sent: its records, the tuples ``map`` emitted (before
    ``combine``), and the seconds from the sink's call to the last ack."""

    batch_id: int
    records: int
    tuples: int
    elapsed_s: float


# -- the driver: environment, session, query -------------------------------------------------


def check_java(java_home: str | None = None) -> str:
    """The ``java`` PySpark will start, checked to be Java 17 or newer; SparkFeedError if it
    is missing, does not run, or is older."""
    home = java_home if java_home is not None else os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home}" if home else "PATH"
        raise SparkFeedError(
            f"Java not found (looked in {where}): PySpark needs Java {JAVA_MAJOR_MIN} or newer; "
            "install a JDK or JRE (for example openjdk-17-jre-headless) or set JAVA_HOME"
        )
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SparkFeedError(f"{java} -version failed: {error}") from None
    major = java_major_version(done.stderr + done.stdout)
    if major is None:
        raise SparkFeedError(f"cannot tell the version of {java}: {done.stderr.strip()!r}")
    if major < JAVA_MAJOR_MIN:
        raise SparkFeedError(
            f"{java} is Java {major}; PySpark needs Java {JAVA_MAJOR_MIN} or newer "
            "(set JAVA_HOME to a newer JDK)"
        )
    return java


def java_major_version(version_output: str) -> int | None:
    """The major version in ``java -version`` output: ``"1.8.0_392"`` is 8, ``"17.0.15"`` 17."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if match is None:
        return None
    first = int(match.group(1))
    if first == 1 and match.group(2) is not None:
        return int(match.group(2))
    return first


def session(
    app_name: str = "smr", master: str = MASTER_DEFAULT, jvm_log: Path | None = None
) -> Any:
    """A SparkSession for feeding the ring (checked Java; workers run this Python).

    Shuffle partitions are the core count (Spark's default of 200 makes small stateful
    queries ten times slower here), speculation is off (see the module docstring), the UI is
    off and logs are quiet. With ``jvm_log``, what the JVM writes to its standard error
    (its start-up warnings, Spark's log) is appended to that file, not the terminal.
    """
    check_java()
    # Workers must run this interpreter, which has smr and the job's dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Local mode talks to itself on loopback (Spark would pick the first interface's address).
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    with _standard_error_to(jvm_log):
        spark = (
            SparkSession.builder.master(master)
            .appName(app_name)
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}")
            .config("spark.sql.shuffle.partitions", str(os.cpu_count() or 2))
            .config("spark.speculation", "false")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def _standard_error_to(log: Path | None) -> Iterator[None]:
    """While inside, file descriptor 2 is ``log`` (appended): a process started meanwhile
    (the JVM) keeps it as its standard error for its life; this process gets its own back
    after. Nothing changes when ``log`` is None."""
    if log is None:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log_fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log_fd)


def check_input_dir(directory: Path) -> None:
    """SparkFeedError unless ``directory`` is a readable directory."""
    if not directory.exists():
        raise SparkFeedError(f"input directory {str(directory)!r} does not exist")
    if not directory.is_dir():
        what = "a file" if directory.is_file() else "not a directory"
        raise SparkFeedError(
            f"input {str(directory)!r} is {what}; --input takes a directory of text files "
            "(Spark's file source streams the files of a directory: put the file in one, or "
            "feed it with smr feed)"
        )
    if not os.access(directory, os.R_OK | os.X_OK):
        raise SparkFeedError(f"input directory {str(directory)!r} is not readable")


def text_files(spark: Any, directory: Path, max_files_per_trigger: int) -> Any:
    """A streaming DataFrame of the lines of the text files (``.gz`` too) in ``directory``,
    at most ``max_files_per_trigger`` files per micro-batch; SparkFeedError if the
    directory is missing or not a directory."""
    check_input_dir(directory)
    return (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", max_files_per_trigger)
        .load(str(directory.resolve()))
    )


def parse_socket_ref(input_ref: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``socket://HOST:PORT`` input, None for anything else (a path);
    SparkFeedError if it starts with ``socket://`` but is not a host and a port."""
    if not input_ref.startswith("socket://"):
        return None
    host, sep, port = input_ref.removeprefix("socket://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SparkFeedError(f"input {input_ref!r} must look like socket://HOST:PORT")
    return host, int(port)


def socket_lines(spark: Any, host: str, port: int) -> Any:
    """A streaming DataFrame of the lines a TCP server at ``host:port`` sends (Spark's
    socket source). For demos: the source keeps nothing, so a restarted query does not see
    again what it had read, and exactly-once does not hold across restarts."""
    return spark.readStream.format("socket").option("host", host).option("port", port).load()


def feed_settings(
    cluster_dir: Path,
    job_ref: str,
    query: str | None,
    combine: bool,
    batch_size: int,
    window_batches: int,
    single_column: bool,
) -> FeedSettings:
    """The settings for a query feeding the cluster in ``cluster_dir``, checked on the
    driver: the job loads, and the cluster answers (SparkFeedError otherwise)."""
    try:
        job = refuse_windowed(load_job(job_ref), "smr spark-feed")
    except JobLoadError as error:
        raise SparkFeedError(str(error)) from None
    spec = read_spec(cluster_dir)
    addrs = tuple(spec.seeds)
    try:
        keys = use_keys_of(cluster_dir)
    except KeysError as error:
        raise SparkFeedError(str(error)) from None
    try:
        fetch_view(addrs)
    except NodeUnreachable as error:
        raise SparkFeedError(f"the cluster in {cluster_dir} is unreachable: {error}") from None
    module_part = job_ref.rpartition(":")[0]
    if module_part.endswith(".py") or "/" in module_part:
        # A file path must mean the same file on the workers, whatever their directory.
        job_ref = f"{Path(module_part).resolve()}:{job_ref.rpartition(':')[2]}"
    return FeedSettings(
        query=query or f"smr-{job.name}",
        job_ref=job_ref,
        job_cwd=str(Path.cwd()),
        addrs=addrs,
        slot_bits=spec.slot_bits,
        replication=spec.replication,
        combine=combine and job.combine is not None,
        batch_size=batch_size,
        window_batches=window_batches,
        single_column=single_column,
        arrow=job.map_batch is not None,
        keys=None if keys is None else keys.client_material(),
    )


def check_workers(spark: Any, settings: FeedSettings) -> None:
    """Run one task that loads the job and reaches the cluster the way every feeding task
    will; SparkFeedError naming what failed on the worker."""
    problems = (
        spark.sparkContext.parallelize([0], 1).map(lambda _: worker_problem(settings)).collect()
    )
    if problems[0] is not None:
        raise SparkFeedError(problems[0])


def emit(
    df: Any,
    job_ref: str,
    cluster_dir: Path,
    query: str | None = None,
    checkpoint_dir: Path | None = None,
    available_now: bool = False,
    trigger_ms: int | None = None,
    combine: bool = True,
    batch_size: int = BATCH_SIZE_DEFAULT,
    window_batches: int = WINDOW_BATCHES_DEFAULT,
    on_batch: Callable[[BatchReport], None] | None = None,
) -> Any:
    """Start a query that emits the rows of streaming DataFrame ``df`` into the ring of
    ``cluster_dir`` through the ``map`` of job ``job_ref`` (``module:attr``), and return the
    started ``StreamingQuery``.

    A row is passed to ``map`` as its value when ``df`` has one column, else as a dict.
    ``query`` names the query and its mapper ids (default ``smr-<job name>``): keep it, and
    ``checkpoint_dir``, the same across restarts to resume exactly once. ``available_now``
    processes what the source has now and stops; ``trigger_ms`` sets a processing-time
    trigger. ``on_batch`` runs on the driver after every batch, once all its tuples are
    acked. Raises SparkFeedError before starting if the job does not load (on the driver or
    on a worker) or the cluster does not answer.
    """
    spark = df.sparkSession
    settings = feed_settings(
        cluster_dir, job_ref, query, combine, batch_size, window_batches, len(df.columns) == 1
    )
    check_workers(spark, settings)
    records = spark.sparkContext.accumulator(0)
    tuples = spark.sparkContext.accumulator(0)

    def run_batch(batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        if settings.arrow:
            counts = batch_df.mapInArrow(
                partial(_emit_arrow_partition, settings, batch_id), "records long, tuples long"
            ).collect()
            batch_records = sum(row["records"] for row in counts)
            batch_tuples = sum(row["tuples"] for row in counts)
        else:
            records_before, tuples_before = records.value, tuples.value
            batch_df.rdd.foreachPartition(
                partial(_emit_partition, settings, batch_id, records, tuples)
            )
            batch_records = records.value - records_before
            batch_tuples = tuples.value - tuples_before
        if on_batch is not None:
            on_batch(BatchReport(batch_id, batch_records, batch_tuples, time.monotonic() - started))

    writer = df.writeStream.queryName(settings.query).foreachBatch(run_batch)
    if checkpoint_dir is not None:
        writer = writer.option("checkpointLocation", str(checkpoint_dir.resolve()))
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger_ms is not None:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    return writer.start()


class SparkQueryError(Exception):
    """The query stopped with an error (a task failed past its retries, say)."""


def await_query(query: Any) -> None:
    """Wait until ``query`` ends; SparkQueryError with the root cause's line if it failed."""
    from pyspark.errors import StreamingQueryException

    try:
        query.awaitTermination()
    except StreamingQueryException as error:
        cause = root_cause(str(error))
        raise SparkQueryError(f"the Spark query {query.name} failed: {cause}") from None


def root_cause(message: str) -> str:
    """The most telling line of a Spark error: the last Python exception line if there is
    one (the user's ``map`` raising, say), else the first line."""
    python_errors = re.findall(r"^(\w+(?:Error|Exception): .*)$", message, re.MULTILINE)
    if python_errors:
        return str(python_errors[-1])
    return message.strip().splitlines()[0] if message.strip() else "unknown error"


# -- the workers ----------------------------------------------------------------------------


def _emit_partition(
    settings: FeedSettings, batch_id: int, records_done: Any, tuples_done: Any, rows: Iterable[Any]
) -> None:
    """One task over Spark rows (``foreachPartition``): steps 2-4 of the module docstring
    for partition ``p`` of batch ``batch_id``, counted in the accumulators."""
    records_in = (row[0] for row in rows) if settings.single_column else (r.asDict() for r in rows)
    records, tuples = emit_records(settings, batch_id, _partition_id(), records_in)
    records_done.add(records)
    tuples_done.add(tuples)


def _emit_arrow_partition(
    settings: FeedSettings, batch_id: int, batches: Iterator[Any]
) -> Iterator[Any]:
    """One task over Arrow record batches (``mapInArrow``, for a job with ``map_batch``):
    the records come as Arrow columns, turned into Python values a column at a time, not as
    Spark rows one by one. Yields one row: the records and the tuples emitted."""
    import pyarrow as pa

    if settings.single_column:
        records_in = chain.from_iterable(batch.column(0).to_pylist() for batch in batches)
    else:
        records_in = chain.from_iterable(batch.to_pylist() for batch in batches)
    records, tuples = emit_records(settings, batch_id, _partition_id(), records_in)
    yield pa.RecordBatch.from_pydict({"records": [records], "tuples": [tuples]})


def _partition_id() -> int:
    """The partition of the Spark task this runs in."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None, "runs only inside a Spark task"
    return context.partitionId()
