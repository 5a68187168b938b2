"""The Spark feeder end to end: real node processes, a real Spark driver through
``smr spark-feed``, and the dump compared with plain Python key by key.

Exactly-once is checked where it is at risk: a task that fails after emitting and is retried,
and a driver SIGKILLed in the middle of a batch and restarted from its checkpoint. Both must
make the nodes drop re-sent tuples (their duplicate counters rise) and leave exact counts.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest

from examples.demo import split_books
from tests.e2e.conftest import JOB, REPO, Cluster, word_counts
from tests.e2e.jobs import FAIL_MARKER_ENV

pytestmark = pytest.mark.e2e

SPARK_TIMEOUT_S = 240


def spark_feed_args(cluster: Cluster, input_dir: Path, job: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "smr",
        "spark-feed",
        "--cluster",
        str(cluster.dir),
        "--job",
        job,
        "--input",
        str(input_dir),
        *extra,
    ]


def spark_feed(
    cluster: Cluster,
    input_dir: Path,
    job: str = JOB,
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``smr spark-feed --once`` to the end; it must exit 0."""
    result = subprocess.run(
        spark_feed_args(cluster, input_dir, job, "--once", *extra),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=SPARK_TIMEOUT_S,
    )
    assert result.returncode == 0, f"spark-feed exited {result.returncode}:\n{result.stderr}"
    return result


def duplicates_dropped(cluster: Cluster) -> int:
    return sum(row["tuples_duplicate"] for row in cluster.status().values())


@pytest.mark.slow
def test_spark_feed_delivers_every_word_exactly(cluster: Cluster, tmp_path: Path) -> None:
    paths = split_books(tmp_path / "input", files=12)
    cluster.up(3, JOB, "--replication", "1")
    result = spark_feed(cluster, tmp_path / "input", extra=("--max-files-per-trigger", "4"))
    assert "batch 2:" in result.stdout  # 12 files, 4 per batch: three batches
    total_words = sum(word_counts(paths).values())
    assert f"fed {total_words:,} tuples from " in result.stdout
    assert re.search(
        r"records read in 3 batches \(every tuple acked\), [\d.]+ s in all", result.stdout
    )
    assert cluster.counts() == word_counts(paths)
    # The JVM's start-up warnings are kept in the cluster's logs, off the terminal.
    for jvm_line in ("Using incubator modules", "Setting default log level"):
        assert jvm_line not in result.stderr, result.stderr
    assert (cluster.dir / "logs" / "spark-feed.log").is_file()


@pytest.mark.slow
def test_a_task_that_fails_after_emitting_is_retried_exactly_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    paths = split_books(tmp_path / "input", files=4)
    marker = tmp_path / "failed-once"
    # The nodes run the feeding job (its reduce is word count's): smr refuses another job.
    cluster.up(3, "tests.e2e.jobs:failing_once", "--replication", "1")
    spark_feed(
        cluster,
        tmp_path / "input",
        job="tests.e2e.jobs:failing_once",
        # Without combine, tuples leave in batches while the task runs, before it fails.
        extra=("--no-combine", "--max-files-per-trigger", "4"),
        env={FAIL_MARKER_ENV: str(marker)},
    )
    assert marker.exists(), "the injected failure never ran"
    assert duplicates_dropped(cluster) > 0, "the retry re-sent nothing already applied"
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
def test_a_map_batch_job_feeds_through_arrow_exactly(cluster: Cluster, tmp_path: Path) -> None:
    paths = split_books(tmp_path / "input", files=6)
    cluster.up(3, "examples.wordcount:fast", "--replication", "1")
    result = spark_feed(
        cluster,
        tmp_path / "input",
        job="examples.wordcount:fast",
        extra=("--max-files-per-trigger", "3"),
    )
    total_words = sum(word_counts(paths).values())
    assert f"fed {total_words:,} tuples from " in result.stdout
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow(reason="a second Spark driver after the Arrow feed's: 30 s")
def test_a_map_batch_task_that_fails_after_emitting_is_retried_exactly_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    # One file in one partition: more records than a map_batch call takes, so the task
    # emits its first chunk before its second call fails.
    paths = split_books(tmp_path / "input", files=1)
    marker = tmp_path / "failed-once"
    cluster.up(3, "tests.e2e.jobs:failing_once_fast", "--replication", "1")
    spark_feed(
        cluster,
        tmp_path / "input",
        job="tests.e2e.jobs:failing_once_fast",
        env={FAIL_MARKER_ENV: str(marker)},
    )
    assert marker.exists(), "the injected failure never ran"
    assert duplicates_dropped(cluster) > 0, "the retry re-sent nothing already applied"
    assert cluster.counts() == word_counts(paths)


def _wait_for(condition: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.slow(reason="a Spark driver killed, then a second one started: 30-40 s")
def test_a_driver_killed_mid_batch_resumes_from_its_checkpoint_exactly_once(
    cluster: Cluster, tmp_path: Path
) -> None:
    # 6 files of 2000 lines, one per batch: at 0.5 ms a line a batch maps for about 1 s.
    paths = split_books(tmp_path / "input", files=6, lines_max=12_000)
    checkpoint = tmp_path / "checkpoint"
    job = "tests.e2e.jobs:slow_wordcount"
    cluster.up(3, job, "--replication", "1")
    extra = ("--no-combine", "--max-files-per-trigger", "1", "--checkpoint", str(checkpoint))
    driver = subprocess.Popen(
        spark_feed_args(cluster, tmp_path / "input", job, *extra),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    victims: list[psutil.Process] = []
    try:
        # Kill while batch 2 runs: after part of it is applied (the nodes' applied count has
        # grown since batch 1 committed), before it commits.
        _wait_for(lambda: (checkpoint / "commits" / "1").exists(), SPARK_TIMEOUT_S, "batch 1")
        applied_after_1 = cluster.applied()
        _wait_for(lambda: cluster.applied() > applied_after_1 + 3000, 60, "batch 2 to be applied")
        root = psutil.Process(driver.pid)
        victims = [root, *root.children(recursive=True)]
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        if driver.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert not (checkpoint / "commits" / "2").exists(), "batch 2 committed before the kill"
    _, alive = psutil.wait_procs(victims, timeout=10)
    assert not alive, f"still running after SIGKILL: {alive}"
    assert len(victims) >= 2, "the driver had no JVM child to kill"
    duplicates_before = duplicates_dropped(cluster)

    result = spark_feed(cluster, tmp_path / "input", job, extra)
    assert "batch 2:" in result.stdout, "the restart did not run the killed batch again"
    assert duplicates_dropped(cluster) > duplicates_before
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow  # Spark sessions one after another: `make test-slow`, run by CI
def test_a_failed_query_still_says_what_it_fed_before_the_error(
    cluster: Cluster, tmp_path: Path
) -> None:
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    (input_dir / "good.txt").write_text("one two\nthree\n")
    (input_dir / "bad.txt").write_text("four MAPFAIL\n")  # tests.e2e.jobs:failing_map raises
    os.utime(input_dir / "good.txt", (1_000_000_000, 1_000_000_000))  # Spark reads it first
    cluster.up(1, "tests.e2e.jobs:failing_map")
    result = subprocess.run(
        spark_feed_args(
            cluster,
            input_dir,
            "tests.e2e.jobs:failing_map",
            "--once",
            "--master",
            "local[1,2]",
            "--max-files-per-trigger",
            "1",
        ),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=SPARK_TIMEOUT_S,
    )
    assert result.returncode == 1, result.stderr
    assert re.search(
        r"^fed 3 tuples from 2 records read in 1 batch .*s in all$", result.stdout, re.M
    ), result.stdout
    assert result.stderr.strip().splitlines()[-1].startswith("smr: error: ")


@pytest.mark.slow  # Spark sessions one after another: `make test-slow`, run by CI
def test_spark_feed_after_the_cluster_restarted_empty_refuses_or_feeds_all_from_start(
    cluster: Cluster, tmp_path: Path
) -> None:
    paths = split_books(tmp_path / "input", files=4)
    cluster.up(3, JOB, "--replication", "1")
    spark_feed(cluster, tmp_path / "input")
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    cluster.up(3, JOB, "--replication", "1")

    refused = subprocess.run(
        spark_feed_args(cluster, tmp_path / "input", JOB, "--once"),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=SPARK_TIMEOUT_S,
    )
    assert refused.returncode == 2, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("smr: error: checkpoint ")
    assert "fed cluster incarnation" in line and "--from-start" in line
    assert cluster.counts() == {}

    result = spark_feed(cluster, tmp_path / "input", extra=("--from-start",))
    assert "feeding from the start" in result.stderr
    assert cluster.counts() == word_counts(paths)


@pytest.mark.slow
def test_spark_feed_after_a_restart_from_disk_resumes_from_its_checkpoint_exactly(
    cluster: Cluster, tmp_path: Path
) -> None:
    paths = split_books(tmp_path / "input", files=6)
    later = tmp_path / "later"
    later.mkdir()
    for path in paths[4:]:
        Path(path).rename(later / Path(path).name)
    cluster.up(3, JOB, "--replication", "1", "--data-dir", str(tmp_path / "data"))
    spark_feed(cluster, tmp_path / "input")
    assert cluster.counts() == word_counts(paths[:4])
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    cluster.smr("cluster", "up", "--dir", str(cluster.dir), "--job", JOB)
    # The same cluster life: the checkpoint is accepted and only the new files are read.
    for path in paths[4:]:
        (later / Path(path).name).rename(path)
    spark_feed(cluster, tmp_path / "input")
    assert cluster.counts() == word_counts(paths)
    # Nothing of the first four files came again (the nodes' counters start at the restart).
    assert duplicates_dropped(cluster) == 0


# -- errors a Spark user can act on (all found before Spark starts) ---------------------------


def _spark_feed_error(cluster: Cluster, input_dir: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        spark_feed_args(cluster, input_dir, JOB, "--once"),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("smr: error: ")
    return line


def test_missing_java_is_named_with_what_to_install(cluster: Cluster, tmp_path: Path) -> None:
    split_books(tmp_path / "input", files=1)
    cluster.up(1, JOB)
    line = _spark_feed_error(cluster, tmp_path / "input", {"JAVA_HOME": str(tmp_path / "nojdk")})
    assert "Java not found" in line and "Java 17" in line


def test_missing_input_directory_is_named(cluster: Cluster, tmp_path: Path) -> None:
    cluster.up(1, JOB)
    line = _spark_feed_error(cluster, tmp_path / "nowhere")
    assert "nowhere" in line and "does not exist" in line


def test_unreachable_cluster_is_reported(cluster: Cluster, tmp_path: Path) -> None:
    split_books(tmp_path / "input", files=1)
    cluster.up(1, JOB)
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    line = _spark_feed_error(cluster, tmp_path / "input")
    assert "answer" in line or "unreachable" in line
