"""The Spark baselines smr's benchmarks compare against: their input files hold exactly the
corpus, their counts equal plain Python's, and a SIGKILLed driver restarted from its
checkpoint loses no count.

One SparkSession serves the whole module (a session takes 6-8 s to start); the recovery test
starts its own driver processes and stops them, and every test's files live in a temporary
directory removed at its end.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import spark_input, spark_queries, spark_runners
from bench.common import REPO, percentile
from bench.spark_driver_kill import measure_recovery

EXAMPLE_BOOKS = sorted((REPO / "examples" / "data").glob("*.txt.gz"))


def example_lines(lines_per_book: int) -> list[str]:
    """The first lines of each shipped book as on disk: BOM, CRLF endings."""
    lines: list[str] = []
    for book in EXAMPLE_BOOKS:
        with contextlib.closing(spark_input.raw_lines(book)) as book_lines:
            lines += itertools.islice(book_lines, lines_per_book)
    return lines


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_queries.spark_session()
    yield session
    session.stop()


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="smr-test-spark-") as directory:
        yield Path(directory)


def test_book_lines_keep_the_bom_and_crlf_endings_spark_must_tokenise() -> None:
    with contextlib.closing(spark_input.raw_lines(EXAMPLE_BOOKS[0])) as book_lines:
        lines = list(itertools.islice(book_lines, 3))
    assert lines[0].startswith("\ufeff")
    assert all(line.endswith("\r\n") for line in lines)


def test_input_files_hold_every_line_once_with_about_equal_words(workdir: Path) -> None:
    lines = example_lines(400)
    written = spark_input.write_input_files(lines, workdir, 4)
    names = [f["name"] for f in written["files"]]
    assert names == [f"part-{i:06d}.txt" for i in range(4)]
    on_disk = ""
    for name in names:
        with open(workdir / name, encoding="utf-8", newline="") as text:
            on_disk += text.read()
    assert on_disk == "".join(lines)
    assert written["words"] == sum(f["words"] for f in written["files"])
    share = written["words"] / 4
    assert all(abs(f["words"] - share) < 0.1 * share for f in written["files"])
    mtimes = [(workdir / n).stat().st_mtime_ns for n in names]
    assert mtimes == sorted(mtimes), "maxFilesPerTrigger must take the files in number order"
    assert spark_input.directory_counts(workdir) == dict(spark_input.python_counts(lines))


def test_dripper_publishes_each_file_when_its_words_are_due(workdir: Path) -> None:
    files = spark_input.split_lines(
        spark_input.synthetic_lines(500, words_per_line=10), words_per_file=100
    )
    assert [sum(len(line.split()) for line in f) for f in files] == [100] * 5
    published = spark_input.drip_files(files, workdir, words_per_s=2_000)
    started = published[0]["published_at_unix_s"] - 100 / 2_000
    for index, record in enumerate(published):
        due = started + 100 * (index + 1) / 2_000
        assert record["published_at_unix_s"] >= due - 0.01
        assert record["published_at_unix_s"] < due + 0.05
    assert sorted(p.name for p in workdir.iterdir()) == [f"drip-{i:06d}.txt" for i in range(5)]


def _source_log_entries(*pairs: tuple[str, int]) -> str:
    """A file source log file: ``v1``, then a JSON line per (file name, source log id)."""
    rows = [json.dumps({"path": f"file:///in/{n}", "timestamp": 0, "batchId": b}) for n, b in pairs]
    return "v1\n" + "\n".join(rows) + "\n"


def _write_batches(workdir: Path, log_offsets: dict[int, int], committed: set[int]) -> None:
    """``offsets/<batch>`` with the file source's ``logOffset``, and ``commits/<batch>``."""
    for sub in ("offsets", "commits"):
        (workdir / sub).mkdir(exist_ok=True)
    for batch, offset in log_offsets.items():
        (workdir / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0}}\n{{"logOffset":{offset}}}'
        )
        if batch in committed:
            (workdir / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_checkpoint_log_maps_files_to_batches_through_compact_files(workdir: Path) -> None:
    sources = workdir / "sources" / "0"
    sources.mkdir(parents=True)
    (sources / "9.compact").write_text(_source_log_entries(("a.txt", 0), ("b.txt", 9)))
    (sources / "10").write_text(_source_log_entries(("c%20d.txt", 10)))
    (sources / ".11.tmp").write_text("v1\n{not json")
    _write_batches(workdir, {0: 0, 9: 9, 10: 10, 11: 10}, committed={0, 9, 10})
    batches = spark_input.CheckpointLog(workdir).batches()
    assert {b: batch.files for b, batch in batches.items()} == {
        0: ["a.txt"],
        9: ["b.txt"],
        10: ["c d.txt"],
        11: [],
    }
    assert batches[11].committed_at_unix_s is None
    assert batches[10].committed_at_unix_s is not None


def test_checkpoint_log_maps_files_by_log_offset_after_a_driver_killed_between_logs(
    workdir: Path,
) -> None:
    # The killed driver wrote source log entry 1 but not offsets/1; the restarted one listed
    # c.txt as entry 2 and planned batch 1 up to it, so the source's ids run one ahead.
    sources = workdir / "sources" / "0"
    sources.mkdir(parents=True)
    for log_id, name in enumerate(["a.txt", "b.txt", "c.txt", "d.txt"]):
        (sources / str(log_id)).write_text(_source_log_entries((name, log_id)))
    _write_batches(workdir, {0: 0, 1: 2}, committed={0, 1})
    log = spark_input.CheckpointLog(workdir)
    assert {b: batch.files for b, batch in log.batches().items()} == {
        0: ["a.txt"],
        1: ["b.txt", "c.txt"],
    }
    commits = log.file_commits()
    assert set(commits) == {"a.txt", "b.txt", "c.txt"}  # d.txt is in no planned batch yet
    assert commits["c.txt"][0] == 1
    assert commits["c.txt"][1] is not None


def test_sink_counts_come_from_committed_batches_only(workdir: Path) -> None:
    (workdir / "000000000.json").write_text(json.dumps([["a", 1], ["b", 2]]))
    (workdir / "000000001.json").write_text(json.dumps([["a", 3]]))
    (workdir / "000000002.json").write_text(json.dumps([["a", 99]]))  # interrupted batch
    assert spark_queries.read_sink_counts(workdir, {0, 1}) == {"a": 3, "b": 2}


def test_percentile_interpolates_between_closest_ranks() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert percentile([1.0, 2.0], 1.0) == 2.0
    assert percentile([], 0.5) is None


@pytest.mark.slow
def test_transform_with_state_is_refused_on_the_default_state_store(
    spark: Any, workdir: Path
) -> None:
    with pytest.raises(ValueError, match="rocksdb"):
        spark_queries.start_query(
            spark, "tws_pandas", workdir, workdir / "c", workdir / "s", "default"
        )


@pytest.mark.slow
def test_native_counts_equal_python_counter_on_book_lines(spark: Any, workdir: Path) -> None:
    lines = example_lines(300)
    written = spark_input.write_input_files(lines, workdir / "input", 2)
    record = spark_runners.measure_throughput(
        spark, "native", workdir / "input", workdir, max_files_per_trigger=1
    )
    assert record["batches"] == 2
    assert record["words"] == written["words"] == sum(spark_input.python_counts(lines).values())
    assert record["exact"], record["examples"]
    assert record["first_batch_started_unix_s"] < record["last_commit_unix_s"] < time.time()


@pytest.mark.slow(reason="two Spark driver processes start one after the other: 30-100 s")
def test_recovery_after_sigkill_of_the_driver_keeps_counts_exact(workdir: Path) -> None:
    record = measure_recovery(
        "native",
        keys_n=1_000,
        workdir=workdir,
        words_per_s=2_000,
        kill_after_s=1.0,
        after_restart_s=0.5,
        words_per_file=500,
        batch_timeout_s=60.0,  # each wait fails with what it waited for, within the test's time
    )
    assert record["processes_killed"] >= 2  # the Python driver and its JVM at least
    assert record["stragglers"] == []
    assert record["first_batch_after_restart"] > record["last_batch_before_kill"]
    assert 0 < record["restart_to_commit_s"] < record["kill_to_commit_s"]
    assert record["stopped_cleanly"]
    assert record["exact"], record["examples"]
    assert record["keys_dumped"] >= 1_000
