"""Exactly-once output to a PostgreSQL table: each node upserts what its reducers emit, per
key, in the same transaction as the position it has reached.

The table ``TABLE (key text PRIMARY KEY, value)`` holds one row per key emitted;
``TABLE_positions (mapper, slot, seq)`` holds, per mapper and slot, the seq of the last
tuple whose records are in the table. A record is named by its origin (``smr.output``): the
tuple it was emitted for. Seqs rise per mapper and slot in the order every node applies
them, so "in the table" is one comparison with the position.

A commit (:meth:`TableSink.commit`, run before each checkpoint leaves the node):

1. Add a position row (seq 0) for every mapper and slot of the pending records that has
   none, then read and lock those rows (``FOR UPDATE``, in order: two nodes writing the same
   streams, as around a takeover, take turns).
2. Drop the records at or below their position: a replay of tuples whose records an earlier
   commit wrote (by this node or by the one it took over from).
3. Merge the rest per key in the order they were applied (``add``: their sum; ``replace``:
   the last) and upsert them (``add`` adds to the row's value).
4. Raise the positions to the last seq written, and commit. All of it or nothing: a failure
   rolls back, keeps the records, and the next commit tries again.

Since a checkpoint leaves only after the records of the state changes it carries are
committed, a node that dies loses no record: those of tuples after its last checkpoint are
emitted again by the node that replays them, and step 2 drops what was already written.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import queue
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from smr.values import is_plain_json, json_form, json_text

if TYPE_CHECKING:
    import psycopg

    from smr.output.records import Emitted

log = logging.getLogger("smr.node")

MERGES: Final = ("add", "replace")
"""How a key's new value meets its row: ``add`` sums numbers, ``replace`` keeps the last."""
BACKLOG_RECORDS_MAX: Final = 500_000
"""Records held uncommitted before the node stops applying (the table is down or slow)."""
CONNECT_TIMEOUT_S: Final = 3
COMMIT_WAIT_S: Final = 2.0
"""How long a checkpoint waits for a commit before it is held (the commit goes on)."""
OVERDUE_WAIT_S: Final = 0.05
"""How long later checkpoints wait for a commit that outlived ``COMMIT_WAIT_S``."""
STATEMENT_TIMEOUT_MS: Final = 10_000
_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,47}")


def _jsonb_refuses(form: Any) -> str | None:
    """The first string of a JSON form (keys too) that PostgreSQL's jsonb cannot hold: one
    with a NUL character or a lone surrogate; None if there is none."""
    if isinstance(form, str):
        if "\x00" in form or not (form.isascii() or _is_utf8(form)):
            return form
        return None
    if isinstance(form, dict):
        form = [*form.keys(), *form.values()]
    if isinstance(form, list):
        for item in form:
            if (refused := _jsonb_refuses(item)) is not None:
                return refused
    return None


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class TableError(Exception):
    """The table sink is misconfigured or its database refused it: what and why."""


@dataclass(frozen=True)
class TableTarget:
    """Where a cluster's output goes besides its files: a PostgreSQL connection string, a
    table name (lower case letters, digits and ``_``) and a merge (``MERGES``)."""

    dsn: str
    table: str = "smr_output"
    merge: str = "replace"

    def __post_init__(self) -> None:
        if not _TABLE_NAME.fullmatch(self.table):
            raise TableError(
                f"table name {self.table!r}: use up to 48 lower-case letters, digits and _"
            )
        if self.merge not in MERGES:
            raise TableError(f"merge {self.merge!r}: choose one of {', '.join(MERGES)}")

    def to_json(self) -> dict[str, str]:
        """The form kept in the cluster spec."""
        return {"dsn": self.dsn, "table": self.table, "merge": self.merge}

    @classmethod
    def from_json(cls, raw: Any) -> TableTarget:
        """The target a cluster spec names; TableError if it is not one."""
        if not isinstance(raw, dict) or not isinstance(raw.get("dsn"), str):
            raise TableError(f"an output table is {{dsn, table, merge}}, not {raw!r}")
        return cls(
            raw["dsn"], str(raw.get("table", "smr_output")), str(raw.get("merge", "replace"))
        )

    def check_value(self, value: Any) -> None:
        """TypeError if ``value`` cannot be merged into the table: ``add`` needs finite
        numbers, ``replace`` a value whose JSON form (``smr.values.json_form``) jsonb can
        hold (a string without NUL or a lone surrogate). Raised in the emitting reduce call,
        which then fails as a whole: a value the table would refuse at every commit."""
        if self.merge == "add":
            if not (value.__class__ is int or (value.__class__ is float and math.isfinite(value))):
                raise TypeError(
                    f"the output table adds values, so a reducer must emit finite numbers, "
                    f"not {value!r}"
                )
        elif (
            refused := _jsonb_refuses(value if is_plain_json(value) else json_form(value))
        ) is not None:
            raise TypeError(
                f"the output table keeps values as jsonb, which cannot hold the string "
                f"{refused!r} (a NUL character or a lone surrogate) of {value!r}"
            )

    def prepare(self) -> None:
        """For a new cluster: connect and create the two tables if they do not exist.
        TableError if the database cannot be reached, holds a table of the name with another
        value type, or holds an earlier cluster's output there (positions recorded): the new
        cluster's records would be merged into it (added, with ``add``) in silence."""
        sink = TableSink(self)
        try:
            connection = sink.connect()  # TableError without psycopg, so it is there below
            import psycopg

            try:
                earlier = connection.execute(
                    f"SELECT count(*) FROM {self.table}_positions"
                ).fetchone()
            except psycopg.Error as error:
                raise TableError(f"cannot read {self.table}_positions: {error}") from None
            if earlier is not None and earlier[0]:
                raise TableError(
                    f"table {self.table} holds the output of an earlier cluster "
                    f"({earlier[0]} positions in {self.table}_positions): a new cluster "
                    "would merge its records into it. Choose another --output-table, or "
                    f"drop {self.table} and {self.table}_positions"
                )
        finally:
            sink.close()


class TableSink:
    """A node's writer to the output table: :meth:`add` records as they are emitted,
    :meth:`commit` them (the protocol is in the module docstring). Holds at most
    ``BACKLOG_RECORDS_MAX`` records before :attr:`backlogged` asks the node to stop
    applying; never drops one."""

    def __init__(self, target: TableTarget) -> None:
        self.target = target
        self._pending: list[Emitted] = []
        # The commit running on the sink's thread, and the records it writes.
        self._in_flight: concurrent.futures.Future[None] | None = None
        self._in_flight_batch: list[Emitted] = []
        # One commit at a time: a batch is put only while none is in flight (bounded by that).
        self._jobs: queue.SimpleQueue[tuple[concurrent.futures.Future[None], list[Emitted]]]
        self._jobs = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        # The commit in flight outlived a caller's wait (the database hangs).
        self._overdue = False
        self._connection: psycopg.Connection[Any] | None = None
        self.commits = 0
        self.records_written = 0
        self.rows_upserted = 0
        self.repeats_dropped = 0
        self.errors = 0
        self.last_error = ""
        self.commit_seconds = 0.0
        self._error_logged_at = -math.inf

    @property
    def backlog(self) -> int:
        """Records emitted and not committed yet."""
        return len(self._pending) + len(self._in_flight_batch)

    @property
    def backlogged(self) -> bool:
        """True when the node must apply nothing more until a commit succeeds."""
        return self.backlog >= BACKLOG_RECORDS_MAX

    def add(self, records: Sequence[Emitted]) -> None:
        """Hold records (``smr.output.records.Emitted``), in application order."""
        self._pending.extend(records)

    def connect(self) -> psycopg.Connection[Any]:
        """The open connection, made (with the tables) if there is none; TableError why not."""
        if self._connection is not None and not self._connection.closed:
            return self._connection
        try:
            import psycopg
        except ImportError:
            raise TableError(
                "an output table needs psycopg: pip install 'smr-ring[postgres]'"
            ) from None
        target = self.target
        value_type = "numeric" if target.merge == "add" else "jsonb"
        try:
            connection = psycopg.connect(
                target.dsn,
                autocommit=True,  # each transaction() block is then one BEGIN ... COMMIT
                connect_timeout=CONNECT_TIMEOUT_S,
                options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            )
        except psycopg.Error as error:
            raise TableError(f"cannot connect to PostgreSQL ({_where(target)}): {error}") from None
        try:
            with connection.transaction():
                connection.execute(
                    f"CREATE TABLE IF NOT EXISTS {target.table} "
                    f"(key text PRIMARY KEY, value {value_type} NOT NULL)"
                )
                connection.execute(
                    f"CREATE TABLE IF NOT EXISTS {target.table}_positions (mapper text, "
                    "slot integer, seq bigint NOT NULL, PRIMARY KEY (mapper, slot))"
                )
                found = connection.execute(
                    "SELECT data_type FROM information_schema.columns WHERE table_name = %s "
                    "AND column_name = 'value' AND table_schema = current_schema()",
                    (target.table,),
                ).fetchone()
        except psycopg.Error as error:
            connection.close()
            raise TableError(f"cannot create the output table {target.table}: {error}") from None
        if found is None or found[0] != value_type:
            connection.close()
            raise TableError(
                f"table {target.table} holds values of type {found and found[0]}, and merge "
                f"{target.merge!r} needs {value_type}: choose another table"
            )
        self._connection = connection
        return connection

    def start_commit(self) -> None:
        """Begin committing the pending records on the sink's thread if it is idle, and
        return at once (every output flush, each tick): most of a checkpoint's records are
        then in the table before the checkpoint's own :meth:`commit` asks."""
        self._collect()
        if self._in_flight is None and self._pending:
            self._in_flight_batch, self._pending = self._pending, []
            self._in_flight = self._submit(self._in_flight_batch)

    def commit(self, wait_s: float = COMMIT_WAIT_S) -> bool:
        """Write every pending record (steps 1-4 of the module docstring) on the sink's
        thread, waiting ``wait_s`` at most: the node's loop is never held longer by a
        database that hangs. True once every record added before the call is committed;
        False if a write failed (the error counted, logged at most every 10 s, the records
        kept) or is still running (the next call waits for it first)."""
        deadline = time.monotonic() + wait_s
        submitted_here = False
        while True:
            if self._in_flight is not None:
                # A commit an earlier call gave up on is not waited for again: the loop is
                # held once per hang, not at every checkpoint while it lasts.
                timeout = OVERDUE_WAIT_S if self._overdue else max(0.0, deadline - time.monotonic())
                done, _ = concurrent.futures.wait([self._in_flight], timeout=timeout)
                if not done:
                    if not self._overdue:
                        self._overdue = True
                        self._note_error(f"a commit has run for more than {wait_s:g} s")
                    return False
                # A commit begun in the background that failed is tried again here.
                if self._collect() is False and submitted_here:
                    return False
            if not self._pending:
                return True
            self._in_flight_batch, self._pending = self._pending, []
            self._in_flight = self._submit(self._in_flight_batch)
            submitted_here = True

    def _collect(self) -> bool | None:
        """The outcome of the commit on the sink's thread once it ended (True: done;
        False: failed, its records back at the head of the backlog, the error noted), and
        None while it runs or when none was begun."""
        future = self._in_flight
        if future is None or not future.done():
            return None
        batch = self._in_flight_batch
        self._in_flight, self._in_flight_batch = None, []
        self._overdue = False
        error = future.exception()
        if error is None:
            return True
        self._pending = batch + self._pending
        self._note_error(str(error).strip().splitlines()[0] if str(error) else repr(error))
        return False

    def _note_error(self, text: str) -> None:
        now = time.monotonic()
        self.errors += 1
        self.last_error = text
        if now - self._error_logged_at >= 10.0:
            self._error_logged_at = now
            log.error(
                "cannot write %d output records to table %s (checkpoints wait): %s",
                self.backlog,
                self.target.table,
                text,
            )

    def _submit(self, batch: list[Emitted]) -> concurrent.futures.Future[None]:
        """Hand ``batch`` to the sink's thread (started on first use: a daemon, so a hung
        database never keeps the process from exiting)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="output-table", daemon=True)
            self._thread.start()
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._jobs.put((future, batch))
        return future

    def _work(self) -> None:
        """The sink's thread: one commit at a time; the connection lives here alone."""
        while True:
            future, batch = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            started = time.monotonic()
            try:
                self._commit(self.connect(), batch)
            except BaseException as error:
                self._close_connection()
                future.set_exception(error)
                continue
            self.commits += 1
            self.commit_seconds += time.monotonic() - started
            future.set_result(None)

    def _commit(self, connection: psycopg.Connection[Any], pending: list[Emitted]) -> None:
        table = self.target.table
        streams = sorted({(mapper, slot) for _, _, mapper, slot, _, _ in pending})
        mappers = [mapper for mapper, _ in streams]
        slots = [slot for _, slot in streams]
        with connection.transaction():
            # 1. Position rows, read and locked in order.
            connection.execute(
                f"INSERT INTO {table}_positions (mapper, slot, seq) SELECT m, s, 0 FROM "
                "unnest(%s::text[], %s::integer[]) AS u(m, s) ORDER BY m, s "
                "ON CONFLICT DO NOTHING",
                (mappers, slots),
            )
            rows = connection.execute(
                f"SELECT mapper, slot, seq FROM {table}_positions WHERE (mapper, slot) IN "
                "(SELECT * FROM unnest(%s::text[], %s::integer[])) ORDER BY mapper, slot "
                "FOR UPDATE",
                (mappers, slots),
            ).fetchall()
            position = {(mapper, slot): seq for mapper, slot, seq in rows}
            # 2-3. Cut the repeats, merge per key in application order.
            merged: dict[str, Any] = {}
            reached: dict[tuple[str, int], int] = {}
            adding = self.target.merge == "add"
            repeats = 0
            for key, value, mapper, slot, seq, _ in pending:
                stream = (mapper, slot)
                if seq <= position[stream]:
                    repeats += 1
                    continue
                reached[stream] = seq
                name = str(key)
                merged[name] = merged.get(name, 0) + value if adding else value
            if merged:
                names = sorted(merged)
                if adding:
                    values = [repr(merged[name]) for name in names]
                    update = f"{table}.value + EXCLUDED.value"
                    cast = "numeric"
                else:
                    values = [json_text(merged[name]) for name in names]
                    update = "EXCLUDED.value"
                    cast = "jsonb"
                connection.execute(
                    f"INSERT INTO {table} (key, value) SELECT k, v::{cast} FROM "
                    "unnest(%s::text[], %s::text[]) AS u(k, v) "
                    f"ON CONFLICT (key) DO UPDATE SET value = {update}",
                    (names, values),
                )
            # 4. The positions reached.
            if reached:
                connection.execute(
                    f"UPDATE {table}_positions AS p SET seq = u.seq FROM "
                    "unnest(%s::text[], %s::integer[], %s::bigint[]) AS u(m, s, seq) "
                    "WHERE p.mapper = u.m AND p.slot = u.s",
                    (
                        [mapper for mapper, _ in reached],
                        [slot for _, slot in reached],
                        list(reached.values()),
                    ),
                )
        self.records_written += len(pending) - repeats
        self.repeats_dropped += repeats
        self.rows_upserted += len(merged)

    def report(self) -> dict[str, Any]:
        """For ``status``: what the table took, what it dropped as repeats, its backlog."""
        return {
            "output_table": self.target.table,
            "output_table_records": self.records_written,
            "output_table_repeats": self.repeats_dropped,
            "output_table_rows_upserted": self.rows_upserted,
            "output_table_commits": self.commits,
            "output_table_commit_s": round(self.commit_seconds, 3),
            "output_table_errors": self.errors,
            "output_table_last_error": self.last_error or None,
            "output_table_backlog": self.backlog,
        }

    def close(self) -> None:
        """Close the connection, unless a commit still runs (the thread is a daemon)."""
        if self._in_flight is None:
            self._close_connection()

    def _close_connection(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            finally:
                self._connection = None


def _where(target: TableTarget) -> str:
    """The server a DSN names, without its password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(target.dsn)
    except Exception:
        return "an unreadable connection string"
    return f"host {parts.get('host', 'localhost')} port {parts.get('port', 5432)} " + (
        f"database {parts.get('dbname', '(default)')}"
    )
