"""The output table against a real PostgreSQL server: exactly once per origin, whoever
writes, and nothing dropped when the server cannot be reached."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from smr.output import table as output_table
from smr.output.table import TableError, TableSink, TableTarget


def _rows(dsn: str, table: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as connection:
        return dict(connection.execute(f"SELECT key, value FROM {table}").fetchall())


def _positions(dsn: str, table: str) -> dict[tuple[str, int], int]:
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(f"SELECT mapper, slot, seq FROM {table}_positions").fetchall()
    return {(mapper, slot): seq for mapper, slot, seq in rows}


def test_added_values_count_each_origin_once_whoever_writes_them(postgres_dsn: str) -> None:
    target = TableTarget(postgres_dsn, "added", "add")
    first = TableSink(target)
    first.add([("a", 1, "m", 3, 1, 0), ("b", 2, "m", 3, 2, 0), ("a", 5, "n", 7, 1, 0)])
    assert first.commit() and first.backlog == 0
    first.add([("a", 1, "m", 3, 3, 0)])
    assert first.commit()
    # A takeover's replay from before seq 3 of (m, 3), by another node: only the new ones.
    second = TableSink(target)
    second.add(
        [
            ("b", 2, "m", 3, 2, 0),
            ("a", 1, "m", 3, 3, 0),
            ("c", 4, "m", 3, 4, 0),
            ("a", 5, "n", 7, 1, 0),
        ]
    )
    assert second.commit()
    assert second.repeats_dropped == 3 and second.records_written == 1
    assert _rows(postgres_dsn, "added") == {"a": 7, "b": 2, "c": 4}
    assert _positions(postgres_dsn, "added") == {("m", 3): 4, ("n", 7): 1}
    first.close()
    second.close()


def test_replaced_values_keep_the_last_applied(postgres_dsn: str) -> None:
    sink = TableSink(TableTarget(postgres_dsn, "replaced", "replace"))
    sink.add([("k", {"n": 1}, "m", 0, 1, 0), ("j", "x", "n", 1, 1, 0), ("k", [2], "n", 1, 2, 0)])
    assert sink.commit()
    sink.add([("k", {"n": 9}, "m", 0, 1, 0)])  # a repeat: the row keeps [2]
    assert sink.commit()
    assert _rows(postgres_dsn, "replaced") == {"k": [2], "j": "x"}
    assert sink.report()["output_table_repeats"] == 1
    sink.close()


def test_an_unreachable_server_keeps_every_record_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(output_table, "BACKLOG_RECORDS_MAX", 3)
    sink = TableSink(TableTarget("host=127.0.0.1 port=1 user=smr dbname=postgres", "t", "add"))
    sink.add([("a", 1, "m", 0, 1, 0), ("a", 1, "m", 0, 2, 0)])
    assert not sink.commit()
    assert sink.backlog == 2 and not sink.backlogged and sink.errors == 1
    assert "cannot connect to PostgreSQL" in sink.last_error
    sink.add([("a", 1, "m", 0, 3, 0)])
    assert sink.backlogged


def test_bad_targets_are_refused_with_the_reason(postgres_dsn: str) -> None:
    with pytest.raises(TableError, match="table name"):
        TableTarget(postgres_dsn, "Robert'); DROP TABLE x; --")
    with pytest.raises(TableError, match="merge"):
        TableTarget(postgres_dsn, "t", "sum")
    TableTarget(postgres_dsn, "typed", "replace").prepare()
    with pytest.raises(TableError, match="holds values of type jsonb"):
        TableTarget(postgres_dsn, "typed", "add").prepare()
    with pytest.raises(TypeError, match="finite numbers"):
        TableTarget(postgres_dsn, "typed", "add").check_value("seven")
    TableTarget(postgres_dsn, "typed", "add").check_value(7.5)


@pytest.mark.parametrize("value", ["a\x00b", "\ud800", {"k": ["x", "\udc00"]}, {"\x00": 1}])
def test_a_value_jsonb_cannot_hold_fails_its_reduce_call_in_replace(value: object) -> None:
    with pytest.raises(TypeError, match="jsonb"):
        TableTarget("host=127.0.0.1", "t", "replace").check_value(value)


@pytest.mark.parametrize(
    "value", [b"\x00\xff", float("nan"), float("-inf"), "\u00e9\U0001f600", {"base64": "AP8="}]
)
def test_values_json_has_no_plain_form_for_go_to_the_table_in_replace(value: object) -> None:
    TableTarget("host=127.0.0.1", "t", "replace").check_value(value)


def test_a_commit_that_hangs_holds_the_caller_briefly_and_completes_later(
    postgres_dsn: str,
) -> None:
    target = TableTarget(postgres_dsn, "hung", "add")
    target.prepare()
    sink = TableSink(target)
    sink.add([("a", 1, "m", 0, 1, 0)])
    with psycopg.connect(postgres_dsn) as blocker:
        # Another session holds the positions table: the commit waits for its lock.
        blocker.execute("LOCK TABLE hung_positions IN ACCESS EXCLUSIVE MODE")
        assert not sink.commit(wait_s=0.3)
        assert "more than 0.3 s" in sink.last_error and sink.backlog == 1
        # While it hangs, later calls return at once instead of waiting again.
        started = time.monotonic()
        assert not sink.commit(wait_s=5)
        assert time.monotonic() - started < 0.5 and sink.errors == 1
        sink.add([("a", 2, "m", 0, 2, 0)])  # applied meanwhile
        assert sink.backlog == 2
        blocker.rollback()
    # The running commit ends, and a later call (the next checkpoint's) commits the rest.
    deadline = time.monotonic() + 10
    while not sink.commit() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sink.backlog == 0
    assert _rows(postgres_dsn, "hung") == {"a": 3}
    assert _positions(postgres_dsn, "hung") == {("m", 0): 2}
    sink.close()


def test_a_new_cluster_refuses_a_table_holding_an_earlier_clusters_output(
    postgres_dsn: str,
) -> None:
    target = TableTarget(postgres_dsn, "earlier", "add")
    target.prepare()  # empty: fine, and again
    target.prepare()
    sink = TableSink(target)
    sink.add([("a", 1, "m", 0, 1, 0)])
    assert sink.commit()
    sink.close()
    with pytest.raises(TableError, match="holds the output of an earlier cluster"):
        target.prepare()
