"""Nexmark Q5 and Q7: the generator is seeded and ordered, smr's windowed jobs (in-process)
equal a plain-Python model window by window, and (slow, Spark) so do Spark Structured
Streaming's queries over the same files."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench import nexmark_model
from bench.nexmark_events import NexmarkConfig, event, events, read_events, write_events
from examples.nexmark import SLIDE_MS, WINDOW_MS, hottest, q5, q7
from smr.testing import run_job
from smr.windows import Window

CONFIG = NexmarkConfig(seed=7, events=30_000, events_per_second=500)  # a minute of event time


def as_windows(model: dict[Any, int], field: str) -> dict[Any, Any]:
    """The model's ``(auction, (start, end)) -> value`` as smr's windows."""
    return {
        (auction, Window(*bounds)): {field: value} for (auction, bounds), value in model.items()
    }


@pytest.fixture(scope="module")
def event_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_events(CONFIG, tmp_path_factory.mktemp("nexmark"), files=3)


def test_events_are_seeded_in_event_time_order_and_in_beams_proportions(event_files):
    generated = list(events(CONFIG))
    assert list(read_events(event_files)) == generated  # the files hold exactly the events
    assert event(CONFIG, 12_345) == generated[12_345]  # each event stands alone
    assert (
        event(NexmarkConfig(seed=8, events=30_000, events_per_second=500), 12_345)
        != generated[12_345]
    )
    times = [e["date_time"] for e in generated]
    assert times == sorted(times) and times[-1] - times[0] == 59_998  # 500 events a second
    kinds = Counter(e["kind"] for e in generated)
    assert (kinds["person"], kinds["auction"], kinds["bid"]) == (600, 1_800, 27_600)
    bids = [e for e in generated if e["kind"] == "bid"]
    to_hot = [b for b in bids if (b["auction"] - 1000) % 100 == 0]
    assert 0.45 < len(to_hot) / len(bids) < 0.55  # hot auctions draw half the bids (ratio 2)
    assert all(100 <= b["price"] <= 100_000_000 for b in bids)


def test_q5_and_q7_in_process_equal_the_plain_model_window_by_window(event_files):
    q5_run = run_job(q5, read_events(event_files))
    q5_model = nexmark_model.bid_counts(read_events(event_files), WINDOW_MS, SLIDE_MS)
    assert q5_run.windows == as_windows(q5_model, "count") and q5_run.late_dropped == 0
    q7_run = run_job(q7, read_events(event_files))
    q7_model = nexmark_model.bid_maxima(read_events(event_files), WINDOW_MS)
    assert q7_run.windows == as_windows(q7_model, "max") and q7_run.late_dropped == 0
    hot = hottest(q5_run.windows, "count")
    assert len(hot) == len({w for _, w in q5_run.windows})  # every window has its hottest
    assert all(w.end_ms - w.start_ms == WINDOW_MS for w in hot)


def test_results_leave_window_by_window_as_the_watermark_passes(event_files):
    """With small batches, Q7's windows leave one after the other while the feed goes on,
    not all at its end: each result leaves once, in end order."""
    records = itertools.islice(read_events(event_files), 20_000)
    run = run_job(q7, records, batch_size=100, finish=False)
    ends = [result.window.end_ms for result in run.window_results]
    assert ends == sorted(ends) and run.window_results  # closed while feeding, in order
    assert all(result.is_final for result in run.window_results)
    assert len({(r.key, r.window) for r in run.window_results}) == len(run.window_results)


@pytest.mark.slow
def test_spark_structured_streaming_gives_the_same_windows(event_files):
    pytest.importorskip("pyspark", reason="the Spark comparison needs pyspark (the spark extra)")
    from bench import nexmark_spark, spark_queries

    spark = spark_queries.spark_session("default", app_name="smr-nexmark-test")
    try:
        input_dir = event_files[0].parent
        for name, job, field in (("q5", q5, "count"), ("q7", q7, "max")):
            spark_run = nexmark_spark.run_query(spark, name, input_dir, max_files_per_trigger=1)
            smr_windows = run_job(job, read_events(event_files)).windows
            assert as_windows(spark_run.windows, field) == smr_windows, name
            assert hottest(as_windows(spark_run.windows, field), field) == hottest(
                smr_windows, field
            )
    finally:
        spark.stop()
