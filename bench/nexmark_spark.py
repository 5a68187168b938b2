"""Nexmark Q5 and Q7's first stage as Spark Structured Streaming queries over the event files
``bench/nexmark_events.py`` writes, for comparison with smr's windowed jobs
(``examples/nexmark.py``) window by window.

- Q5: bids counted per auction in ``window(ts, "10 seconds", "2 seconds")``;
- Q7: the highest price per auction in ``window(ts, "10 seconds")``;

both with a watermark of 0 s on the bid's time (the events are in event-time order), in
update mode, each micro-batch's updated rows collected by ``foreachBatch`` on the driver, so
the latest row per ``(auction, window)`` is the window's result. The second stage (the
maximum over a window's auctions) is ``examples.nexmark.hottest``, as for smr.

Importing this module needs no pyspark: every pyspark import is inside the function that
needs it.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

__all__ = ["QUERIES", "SparkRun", "run_query"]

EVENT_SCHEMA: Final = "kind STRING, auction LONG, bidder LONG, price LONG, date_time LONG"
QUERIES: Final = ("q5", "q7")


# Progress reports a query keeps (Spark's default is 100): one per micro-batch of a run.
PROGRESS_KEPT: Final = 100_000


@dataclass
class SparkRun:
    """A query's windows ``(auction, (start_ms, end_ms)) -> value``, its wall time from
    start to the last batch's end, how many micro-batches it ran, and each batch's time as
    its progress report gives it (``durationMs.triggerExecution``: planning, reading,
    state, the sink) for the batches that read rows."""

    windows: dict[tuple[int, tuple[int, int]], int]
    seconds: float
    batches: int
    batch_ms: list[float] = field(default_factory=list)


def _bids(spark: Any, input_dir: Path, max_files_per_trigger: int | None) -> Any:
    from pyspark.sql import functions as F

    reader = spark.readStream.schema(EVENT_SCHEMA)
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    events = reader.json(str(input_dir))
    bids = events.where(F.col("kind") == "bid")
    return bids.withColumn("ts", F.timestamp_millis(F.col("date_time"))).withWatermark(
        "ts", "0 seconds"
    )


def _query_frame(name: str, bids: Any) -> Any:
    from pyspark.sql import functions as F

    if name == "q5":
        window = F.window("ts", "10 seconds", "2 seconds")
        frame = bids.groupBy(window, "auction").agg(F.count("*").alias("value"))
    elif name == "q7":
        frame = bids.groupBy(F.window("ts", "10 seconds"), "auction").agg(
            F.max("price").alias("value")
        )
    else:
        raise ValueError(f"query must be one of {QUERIES}, not {name!r}")
    return frame.select(
        "auction",
        F.unix_millis(F.col("window.start")).alias("start_ms"),
        F.unix_millis(F.col("window.end")).alias("end_ms"),
        "value",
    )


def run_query(
    spark: Any, name: str, input_dir: Path, max_files_per_trigger: int | None = None
) -> SparkRun:
    """Run query ``name`` over every file in ``input_dir`` to its end (``availableNow``) and
    return its windows and wall time."""
    windows: dict[tuple[int, tuple[int, int]], int] = {}
    batches = 0

    def collect(batch: Any, batch_id: int) -> None:
        nonlocal batches
        batches += 1
        for row in batch.collect():
            windows[(row.auction, (row.start_ms, row.end_ms))] = row.value

    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(PROGRESS_KEPT))
    frame = _query_frame(name, _bids(spark, input_dir, max_files_per_trigger))
    with tempfile.TemporaryDirectory(prefix=f"smr-nexmark-{name}-") as checkpoint:
        started = time.perf_counter()
        query = (
            frame.writeStream.outputMode("update")
            .foreachBatch(collect)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        seconds = time.perf_counter() - started
    return SparkRun(windows, seconds, batches, _batch_ms(query.recentProgress))


def _batch_ms(progress: list[Any]) -> list[float]:
    """Each progress report's ``triggerExecution`` time (ms), for batches that read rows
    (a report is a dict in older PySpark, an object with the same fields in newer)."""
    times = []
    for report in progress:
        rows = report["numInputRows"] if isinstance(report, dict) else report.numInputRows
        durations = report["durationMs"] if isinstance(report, dict) else report.durationMs
        if rows and "triggerExecution" in durations:
            times.append(float(durations["triggerExecution"]))
    return times
