"""Exactly-once output over real node processes and a real PostgreSQL server: every tuple's
record reaches the table once and the files' reader once, also when a node is killed with
SIGKILL during the feed and another replays its tuples."""

from __future__ import annotations

import collections
import json
import time
from decimal import Decimal

import psycopg
import pytest

from tests.e2e.conftest import EXAMPLE_BOOKS, FEED_FLAGS, Cluster, feed_books, word_counts

pytestmark = pytest.mark.e2e

JOB = "examples.wordcount:counted"


def up_with_table(
    cluster: Cluster, dsn: str, table: str, merge: str = "add", job: str = JOB, *extra: str
) -> None:
    """Three nodes of ``job`` writing their output to ``table`` too (``extra``: more flags)."""
    cluster.up(
        3, job, *extra, "--output-postgres", dsn, "--output-table", table, "--output-merge", merge
    )


def table_counts(dsn: str, table: str) -> dict[str, int]:
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(f"SELECT key, value FROM {table}").fetchall()
    return {key: int(value) for key, value in rows if value == Decimal(int(value))}


def wait_for_table(dsn: str, table: str, expected: dict[str, int]) -> dict[str, int]:
    """The table once it equals ``expected``, or as it is after 20 s (commits come with
    checkpoints, each second)."""
    deadline = time.monotonic() + 20
    while (found := table_counts(dsn, table)) != expected and time.monotonic() < deadline:
        time.sleep(0.3)
    return found


def file_output(cluster: Cluster, merge: str = "add") -> tuple[dict[str, int], str]:
    """What ``smr output`` reads from every node's file, merged per word (summed, or the
    largest for running counts), and its report."""
    result = cluster.smr("output", "--cluster", str(cluster.dir))
    merged: collections.Counter[str] = collections.Counter()
    for line in result.stdout.splitlines():
        record = json.loads(line)
        key, value = record["key"], record["value"]
        merged[key] = merged[key] + value if merge == "add" else max(merged[key], value)
    return dict(merged), result.stderr


@pytest.mark.parametrize(
    ("job", "merge"),
    [
        ("examples.wordcount:counted", "add"),
        pytest.param("examples.wordcount:published", "replace", marks=pytest.mark.slow),
    ],
)
def test_the_table_and_the_files_hold_each_record_once(
    cluster: Cluster, postgres_dsn: str, job: str, merge: str
) -> None:
    table = f"plain_{merge}"
    up_with_table(cluster, postgres_dsn, table, merge, job)
    cluster.feed(EXAMPLE_BOOKS[0], job=job)
    expected = word_counts(EXAMPLE_BOOKS[:1])
    assert wait_for_table(postgres_dsn, table, expected) == expected
    assert file_output(cluster, merge)[0] == expected
    rows = cluster.status()
    assert sum(row["output_table_records"] for row in rows.values()) == sum(
        row["output_records"] for row in rows.values()
    )
    assert all(row["output_table_backlog"] == 0 for row in rows.values())
    assert all(row["output_table_errors"] == 0 for row in rows.values())


def test_an_unreachable_database_stops_cluster_up_with_the_reason(cluster: Cluster) -> None:
    result = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--nodes", "2", "--job", JOB,
        "--output-postgres", "host=127.0.0.1 port=1 user=smr dbname=postgres",
        check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "cannot connect to PostgreSQL (host 127.0.0.1 port 1" in result.stderr
    assert cluster.pids() == []


@pytest.mark.slow
def test_a_node_killed_during_the_feed_loses_and_repeats_no_record(
    cluster: Cluster, postgres_dsn: str
) -> None:
    up_with_table(cluster, postgres_dsn, "killed", "add", JOB, "--replication", "1")
    books = feed_books()
    feed = cluster.feed_in_background(*books, job=JOB, extra=FEED_FLAGS)
    time.sleep(3)
    assert feed.poll() is None, "the feed ended before the kill: give it more text"
    cluster.smr("fault", "kill", "n1", "--cluster", str(cluster.dir))
    cluster.wait_feed(feed)
    expected = word_counts(books)
    assert wait_for_table(postgres_dsn, "killed", expected) == expected
    files, report = file_output(cluster)
    assert files == expected
    # The killed node had written records of tuples after its last checkpoint; the node
    # that replayed those tuples wrote them again, and the reader dropped them.
    repeats = int(report.split(" records, ")[1].split()[0])
    assert repeats > 0, report
    assert sum(row.get("takeovers", 0) for row in cluster.status().values()) == 1


@pytest.mark.slow
def test_a_database_that_hangs_then_drops_its_connections_loses_no_record(
    cluster: Cluster, postgres_dsn: str
) -> None:
    up_with_table(cluster, postgres_dsn, "hung_feed", "add", JOB, "--replication", "1")
    books = feed_books()
    feed = cluster.feed_in_background(*books, job=JOB, extra=FEED_FLAGS)
    time.sleep(1.5)
    with psycopg.connect(postgres_dsn) as blocker:
        # Every node's commit waits for this lock: checkpoints are held, the nodes go on.
        blocker.execute("LOCK TABLE hung_feed_positions IN ACCESS EXCLUSIVE MODE")
        time.sleep(4)
        rows = cluster.status()
        assert sum(row["checkpoints_held"] for row in rows.values()) > 0, rows
        assert sum(row["output_table_backlog"] for row in rows.values()) > 0
        blocker.rollback()
        # Then the server drops every connection of the nodes: they connect again.
        blocker.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    cluster.wait_feed(feed)
    expected = word_counts(books)
    assert wait_for_table(postgres_dsn, "hung_feed", expected) == expected
    deadline = time.monotonic() + 10
    rows = cluster.status()
    while any(row["output_table_backlog"] for row in rows.values()):
        assert time.monotonic() < deadline, rows
        time.sleep(0.3)
        rows = cluster.status()
    assert sum(row.get("takeovers", 0) for row in rows.values()) == 0
    assert cluster.counts() == expected


@pytest.mark.slow
def test_a_restart_from_disk_writes_no_record_twice(cluster: Cluster, postgres_dsn: str) -> None:
    data_dir = str(cluster.dir.parent / "data")
    up_with_table(
        cluster, postgres_dsn, "restarted", "add", JOB, "--replication", "1", "--data-dir", data_dir
    )
    cluster.feed(EXAMPLE_BOOKS[0], job=JOB)
    cluster.smr("cluster", "down", "--dir", str(cluster.dir))
    cluster.smr("cluster", "up", "--dir", str(cluster.dir), "--job", JOB)
    # The restarted nodes write to the same table; a rerun of the feed changes nothing, and
    # the next book's records come once.
    cluster.feed(EXAMPLE_BOOKS[0], job=JOB)
    cluster.feed(*EXAMPLE_BOOKS[1:], job=JOB)
    expected = word_counts(EXAMPLE_BOOKS)
    assert wait_for_table(postgres_dsn, "restarted", expected) == expected
    assert file_output(cluster)[0] == expected
    assert cluster.counts() == expected
