"""Run a job in-process, for a job's own tests: no nodes, no sockets, the same contract.

:func:`run_job` feeds records through the job as a cluster would (``map`` or ``map_batch``,
the job's ``combine`` within batches, ``reduce`` or ``reduce_batch`` per key in arrival
order) and returns every key's state, with the same checks a cluster makes: a key or value
a feeder would refuse raises :class:`smr.values.EmitError`, a state a node could not
checkpoint raises :class:`smr.values.StateValueError`. Where a cluster counts a failure and
goes on (a ``map`` or ``reduce`` that raises), ``run_job`` raises it, naming the record or
key: a job's test should fail on what a cluster would only count. Comparing its states with
what plain Python computes from the same input is the test ``smr init`` writes.

A windowed job (``smr.windows``) runs through :mod:`smr.windows.run`: its results are in
``windows`` (the latest state per ``(key, window)``) and ``window_results`` (every result in
the order it left); a :class:`Watermark` among the records advances event time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from smr.api import Job, Key
from smr.mapper.emitter import BATCH_BYTES_DEFAULT
from smr.values import check_state, row_bytes
from smr.windows import Window, WindowResult
from smr.windows.run import Watermark, run_windowed

__all__ = ["JobRun", "Watermark", "run_job"]

BATCH_SIZE_DEFAULT: Final = 1000


@dataclass
class JobRun:
    """What a run of a job left: every key's state (a dict of fields, as ``smr query`` shows
    it) and the records its reducers emitted, in order."""

    states: dict[Key, dict[str, Any]] = field(default_factory=dict)
    outputs: list[tuple[Key, Any]] = field(default_factory=list)
    tuples: int = 0
    #: A windowed job's windows as a reader of its results keeps them: the latest state per
    #: ``(key, window)``, the windows a merged session replaced gone.
    windows: dict[tuple[Key, Window], dict[str, Any]] = field(default_factory=dict)
    #: A windowed job's results in the order they left: final ones, then corrections.
    window_results: list[WindowResult] = field(default_factory=list)
    #: Tuples dropped as later than the allowed lateness (never silently: counted here).
    late_dropped: int = 0
    #: With ``Job(late_side_output=True)``: each dropped ``(key, value, event_time_ms)``.
    late: list[tuple[Key, Any, int]] = field(default_factory=list)


def run_job(
    job: Job,
    records: Iterable[Any],
    *,
    combine: bool = True,
    batch_size: int = BATCH_SIZE_DEFAULT,
    finish: bool = True,
) -> JobRun:
    """Run ``job`` over ``records`` in this process and return its :class:`JobRun`.

    1. Map: each record through ``map`` (or ``batch_size`` records at a time through
       ``map_batch``); every emitted key and value is checked as a feeder checks it.
    2. Batch: the tuples, in emit order, cut into batches of ``batch_size``; with
       ``combine`` (and a job that has one: aggregators always do), the values of a key in
       one batch are folded into one, as the feeder's emitter does.
    3. Reduce: each batch's tuples fold into their keys' states in order (``reduce_batch``
       gets a batch's keys once each, with their values in order); each state is checked
       as a node checks it before keeping it.

    ``combine=False`` skips step 2's folding: a job whose ``combine`` agrees with its
    ``reduce`` ends in the same states either way, which is worth a test of its own.

    A windowed job never uses the job's ``combine``; with ``combine`` and aggregators it
    folds the tuples of one key and one slice of event time per batch first. Its watermark
    rises after every ``batch_size`` records and at each :class:`Watermark` among them, and
    with ``finish`` (the default) reaches the end of time at the end, so every window leaves
    (:mod:`smr.windows.run`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    run = JobRun()
    if job.windowed:
        windowed = run_windowed(job, records, batch_size=batch_size, finish=finish, combine=combine)
        run.tuples = windowed.tuples
        run.windows = windowed.windows
        run.window_results = windowed.results
        run.late_dropped = windowed.late_dropped
        run.late = windowed.late
        return run
    batch: list[tuple[Key, Any]] = []
    for key, value in _mapped(job, records, batch_size):
        row_bytes(key, value, BATCH_BYTES_DEFAULT)
        run.tuples += 1
        batch.append((key, value))
        if len(batch) == batch_size:
            _reduce(job, _combined(job, batch) if combine else batch, run)
            batch = []
    if batch:
        _reduce(job, _combined(job, batch) if combine else batch, run)
    return run


def _mapped(job: Job, records: Iterable[Any], batch_size: int) -> Iterable[tuple[Key, Any]]:
    """Step 1: the tuples ``records`` map to, in order (what travels: with aggregators,
    values lifted into partials)."""
    batch_mapper = job.batch_mapper()
    if batch_mapper is not None:
        chunk: list[Any] = []
        for record in records:
            chunk.append(record)
            if len(chunk) == batch_size:
                keys, values, _produced = batch_mapper(chunk)
                yield from zip(keys, values, strict=True)
                chunk = []
        if chunk:
            keys, values, _produced = batch_mapper(chunk)
            yield from zip(keys, values, strict=True)
        return
    mapper = job.mapper()
    emitted: list[tuple[Key, Any]] = []

    def emit(key: Key, value: Any) -> None:
        emitted.append((key, value))

    for record in records:
        try:
            mapper(record, emit)
        except Exception as error:
            raise RuntimeError(f"map raised on record {record!r}: {error!r}") from error
        yield from emitted  # only a map that returns hands its tuples on, as in a feeder
        emitted.clear()


def _combined(job: Job, batch: list[tuple[Key, Any]]) -> list[tuple[Key, Any]]:
    """Step 2: one tuple per key of ``batch``, folded with the job's ``combine``, in the
    order each key was first emitted."""
    combine = job.combine
    if combine is None:
        return batch
    folded: dict[Key, Any] = {}
    for key, value in batch:
        folded[key] = combine(folded[key], value) if key in folded else value
    return list(folded.items())


def _reduce(job: Job, batch: list[tuple[Key, Any]], run: JobRun) -> None:
    """Step 3: fold ``batch`` into ``run.states``, checking each state kept."""
    states = run.states
    if job.reduce_batch is not None:
        grouped: dict[Key, list[Any]] = {}
        for key, value in batch:
            grouped.setdefault(key, []).append(value)
        keys = list(grouped)
        working = [dict(states.get(key, {})) for key in keys]
        try:
            job.reduce_batch(keys, [grouped[key] for key in keys], working)
        except Exception as error:
            raise RuntimeError(f"reduce_batch raised on keys {keys[:5]!r}...: {error!r}") from error
        for key, state in zip(keys, working, strict=True):
            check_state(state)
            states[key] = state
        return
    reduce = job.tuple_reduce
    emitted: list[tuple[Key, Any]] = []

    def emit(key: Key, value: Any) -> None:
        emitted.append((key, value))

    for key, value in batch:
        state = dict(states.get(key, {}))
        try:
            reduce(key, value, state, emit)
        except Exception as error:
            raise RuntimeError(f"reduce raised on key {key!r}: {error!r}") from error
        check_state(state)
        states[key] = state
        run.outputs.extend(emitted)  # emits take effect only with the reduce that made them
        emitted.clear()
