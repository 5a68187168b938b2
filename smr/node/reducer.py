"""The user's reduce, wrapped: emits take effect only if the call returns normally and leaves
a state that can be checkpointed and read back (:func:`smr.values.check_state`), and
failures are counted and logged at a bounded rate."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

from smr.api import Job
from smr.checkpoint.apply import APPLYING
from smr.checkpoint.bulk import (
    AnyBatch,
    BatchReduceFn,
    apply_folds,
    apply_reduce_batch,
    as_columns,
)
from smr.checkpoint.ids import MapperId
from smr.checkpoint.kernels import IN_FORCE
from smr.checkpoint.store import FAILURE_EXAMPLES_MAX, BatchOutcome, ReduceFn, StateStore
from smr.node.windows import IDLE_TIMEOUT_MS_DEFAULT, NodeWindows
from smr.output.files import OutputSink
from smr.output.records import Emitted
from smr.values import check_state

log = logging.getLogger("smr.node")

# Reducer errors are logged individually up to this many per second, then summarised.
ERROR_LOGS_PER_SECOND: Final = 5


class Reducer:
    """The job's reduce as the node applies it: :meth:`apply` for batches, and
    ``reduce_fn(key, value, state)`` per tuple (the state store's form).

    Guarantees: what a call emits reaches the output only if the call returned normally,
    and only at :meth:`flush_emits` (after the batch it belongs to was applied); a failing
    call's emits are dropped with its state change (the store rolls the state back). A call
    that leaves a field the store could not checkpoint or answer a query with (a set, an
    int of 2**64) fails with :class:`smr.values.StateValueError`, so such a value never
    reaches the store. Each emitted record carries its origin (``smr.output``); with an
    output table that adds values, emitting a value that is not a number fails the call.
    A windowed job's tuples fold per window, one at a time (``windows``,
    :class:`smr.node.windows.NodeWindows`).
    """

    def __init__(
        self,
        job: Job,
        output: OutputSink,
        clock: Callable[[], float],
        window_idle_timeout_ms: int = IDLE_TIMEOUT_MS_DEFAULT,
    ) -> None:
        self.output = output
        self._clock = clock
        self._emitted: list[Emitted] = []
        self._error_log_window_start = 0.0
        self._error_logs_in_window = 0
        self._errors_unlogged = 0
        self._windows: NodeWindows | None = None
        if job.windowed:
            self._windows = NodeWindows(job, clock, self._emitted, window_idle_timeout_ms)
            self.aggregation = None
            self._reduce_batch = None
            self.reduce_fn: ReduceFn = self._windows.reduce_fn()
            return
        # Aggregators are applied in bulk; the per-tuple reduce_fn serves the replay of a
        # takeover (checkpoint.promote) for every kind of reduce.
        self.aggregation = job.aggregation
        self._reduce_batch = self._wrap_batch(job)
        self.reduce_fn = self._wrap(job)

    @property
    def windows(self) -> NodeWindows | None:
        """A windowed job's windows on this node (None for other jobs): the checkpoint
        cycle closes them."""
        return self._windows

    def register_writer(self, mapper: MapperId) -> None:
        """A stream of ``mapper`` is about to write: a windowed job's windows count it among
        the mappers that hold their watermarks back (:meth:`NodeWindows.register`)."""
        if self._windows is not None:
            self._windows.register(mapper)

    def writer_finished(self, mapper: MapperId) -> None:
        """``mapper`` said it finished: a windowed job's windows stop counting it
        (:meth:`NodeWindows.writer_finished`)."""
        if self._windows is not None:
            self._windows.writer_finished(mapper)

    def replay_fn(self, store: StateStore) -> ReduceFn:
        """The per-tuple reduce, wrapped, for replaying backed-up tuples into ``store`` (a
        promotion)."""
        if self._windows is not None:
            self._windows.applying_to(store)
        return self.reduce_fn

    @property
    def in_bulk(self) -> bool:
        """Whether batches are best applied many at once (aggregators)."""
        return self.aggregation is not None

    @property
    def folds_bodies(self) -> bool:
        """Whether batches are best kept in their wire bytes until applied: the job's reduce
        is a lone count or sum and the compiled fold that reads the bytes is in force
        (``checkpoint.bulk.apply_folds``)."""
        aggregation = self.aggregation
        return (
            aggregation is not None
            and aggregation.compact_field is not None
            and IN_FORCE.fold_turn_bodies is not None
        )

    def apply(self, store: StateStore, batches: Sequence[AnyBatch]) -> BatchOutcome:
        """Apply ``batches`` (in order, decoded or in their wire bytes) to ``store`` by the
        job's kind of reduce: aggregators all at once (``checkpoint.bulk.apply_folds``),
        ``reduce_batch`` one call per batch, ``reduce`` per tuple. One outcome for them all."""
        if self._windows is not None:
            self._windows.applying_to(store)
        if self.aggregation is not None:
            return apply_folds(store, batches, self.aggregation)
        total = BatchOutcome()
        for columns in map(as_columns, batches):
            if self._reduce_batch is not None:
                outcome = apply_reduce_batch(store, columns, self._reduce_batch)
            else:
                outcome = store.apply_batch(*columns, self.reduce_fn)
            total.applied += outcome.applied
            total.duplicates += outcome.duplicates
            total.failed += outcome.failed
            total.failures.extend(outcome.failures[: FAILURE_EXAMPLES_MAX - len(total.failures)])
        return total

    def _wrap_batch(self, job: Job) -> BatchReduceFn | None:
        user_reduce_batch = job.reduce_batch
        if user_reduce_batch is None:
            return None

        def reduce_batch(
            keys: list[Any], values: list[list[Any]], states: list[dict[str, Any]]
        ) -> None:
            user_reduce_batch(keys, values, states)
            for state in states:
                check_state(state)

        return reduce_batch

    def _wrap(self, job: Job) -> ReduceFn:
        user_reduce = job.tuple_reduce
        tuple_emits: list[Emitted] = []
        emitted = self._emitted
        emit = tuple_emits.append
        applying = APPLYING
        table = self.output.table
        check_value = None if table is None else table.target.check_value

        def emit_pair(key: Any, value: Any) -> None:
            # Named by the tuple being applied and the emit's place in this call (its origin:
            # smr.output), so a replay of the tuple emits under the same names.
            if check_value is not None:
                check_value(value)
            emit((key, value, applying[0], applying[1], applying[2], len(tuple_emits)))

        def reduce_fn(key: Any, value: Any, state: dict[str, Any]) -> None:
            try:
                user_reduce(key, value, state, emit_pair)
                check_state(state)
            except BaseException:
                tuple_emits.clear()
                raise
            if tuple_emits:
                emitted.extend(tuple_emits)
                tuple_emits.clear()

        return reduce_fn

    def flush_emits(self) -> None:
        """Hand what the applied calls emitted to the output."""
        if self._emitted:
            self.output.extend(self._emitted)
            self._emitted.clear()

    def note_failures(self, failed: int, failures: Sequence[tuple[Any, BaseException]]) -> None:
        """Log ``failed`` failed calls, of which ``failures`` are examples: each one up to
        ``ERROR_LOGS_PER_SECOND``, then a count once a second (a reducer failing on every
        tuple must not flood the log)."""
        if failed:
            self._log_failures(failed, failures)

    def _log_failures(self, count: int, examples: Sequence[tuple[Any, BaseException]]) -> None:
        now = self._clock()
        if now - self._error_log_window_start >= 1.0:
            if self._errors_unlogged:
                log.error("%d more reducer errors not logged individually", self._errors_unlogged)
            self._error_log_window_start = now
            self._error_logs_in_window = 0
            self._errors_unlogged = 0
        for key, error in examples:
            if self._error_logs_in_window < ERROR_LOGS_PER_SECOND:
                self._error_logs_in_window += 1
                log.error("reduce failed for key %r: %s: %s", key, type(error).__name__, error)
            else:
                self._errors_unlogged += 1
        self._errors_unlogged += count - len(examples)
