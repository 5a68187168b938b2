"""A windowed job run in-process (for :func:`smr.testing.run_job`): map, event time, the
watermark, windows folded, closed, corrected and purged by ``checkpoint.window_state``.

The steps, per record:

1. A :class:`Watermark` marker among the records raises the watermark to its time (closing
   what it passes), as if the mapper had stamped it.
2. Any other record: its event time (``job.event_time``, an int of milliseconds), then its
   tuples (``map``), each checked as a feeder checks it; at the end of the batch, each is
   judged against the watermark and folded into its key's windows (with aggregators, lifted
   into a partial, and combined per key and slice of event time: :class:`_Batch`). A late
   tuple goes to the side output as ``map`` emitted it.
3. After every ``batch_size`` records the watermark rises to the largest event time seen
   minus the window's ``out_of_orderness_ms``, minus 1 (:func:`mapper_watermark_ms`): the
   mapper's watermark, which in a ring
   travels with its batches (one mapper here, so it is the slot's).
4. At the end, unless ``finish=False``, the mapper finishes: the watermark reaches the end of
   time and every window leaves.

The job's own ``combine`` is not used: it would fold values of different windows together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from smr.agg import Aggregation
from smr.api import Job, Key
from smr.checkpoint.window_state import Fold, WindowedState, WindowResult, latest_windows
from smr.checkpoint.windows import END_OF_TIME_MS, START_OF_TIME_MS, Window, WindowSpec, is_taken
from smr.mapper.emitter import BATCH_BYTES_DEFAULT
from smr.values import check_state, row_bytes

__all__ = [
    "Watermark",
    "WindowedRun",
    "event_time_of",
    "fold_of",
    "lifted",
    "mapper_watermark_ms",
    "run_windowed",
]


@dataclass(frozen=True)
class Watermark:
    """A marker among a windowed job's records: event time has reached ``time_ms``."""

    time_ms: int


@dataclass
class WindowedRun:
    """What a windowed run left: every result in the order it left, the windows a reader
    of them keeps, the tuples dropped as too late (and, with ``late_side_output``, each
    ``(key, value, event_time_ms)``), the tuples mapped."""

    results: list[WindowResult] = field(default_factory=list)
    windows: dict[tuple[Key, Window], dict[str, Any]] = field(default_factory=dict)
    late_dropped: int = 0
    late: list[tuple[Key, Any, int]] = field(default_factory=list)
    tuples: int = 0


def run_windowed(
    job: Job, records: Iterable[Any], *, batch_size: int, finish: bool = True, combine: bool = True
) -> WindowedRun:
    """Run windowed ``job`` over ``records`` (steps in the module docstring)."""
    spec = job.window
    assert spec is not None, "run_windowed takes a windowed job"
    run = WindowedRun()
    on_late = (lambda k, v, t: run.late.append((k, v, t))) if job.late_side_output else None
    state = WindowedState(spec, fold_of(job), on_late)
    batch = _Batch(job, state, combine)
    mapper = job.map  # values as the user emits them: aggregators lift them per batch
    assert mapper is not None, "a windowed job has a map"
    largest_ms = START_OF_TIME_MS
    records_in_batch = 0
    emitted: list[tuple[Key, Any]] = []

    def emit(key: Key, value: Any) -> None:
        emitted.append((key, value))

    for record in records:
        if isinstance(record, Watermark):
            run.results += batch.apply()
            run.results += state.advance(record.time_ms)
            continue
        event_time_ms = event_time_of(job, record)
        emitted.clear()
        try:
            mapper(record, emit)
        except Exception as error:
            raise RuntimeError(f"map raised on record {record!r}: {error!r}") from error
        for key, value in emitted:
            row_bytes(key, value, BATCH_BYTES_DEFAULT)
            batch.append(key, event_time_ms, value)
        run.tuples += len(emitted)
        largest_ms = max(largest_ms, event_time_ms)
        records_in_batch += 1
        if records_in_batch == batch_size:
            run.results += batch.apply()
            run.results += state.advance(mapper_watermark_ms(largest_ms, spec))
            records_in_batch = 0
    run.results += batch.apply()
    if records_in_batch:
        run.results += state.advance(mapper_watermark_ms(largest_ms, spec))
    if finish:
        run.results += state.advance(END_OF_TIME_MS)
    run.windows = latest_windows(run.results)
    run.late_dropped = state.late_dropped
    return run


class _Batch:
    """The tuples of one batch, applied at its end: every tuple is judged against the same
    watermark (it moves only between batches), so applying them together changes nothing
    but the cost. With aggregators that do not depend on order (every one but ``last``)
    and windows that slices of event time map to whole (tumbling, or hopping with a size a
    multiple of the slide), the taken tuples of one key and one slice fold into one partial
    first: they belong to exactly the same windows (the mapper-side combine, per window)."""

    def __init__(self, job: Job, state: WindowedState, combine: bool) -> None:
        spec = state.spec
        self._state = state
        self._aggregation = job.aggregation
        self._tuples: list[tuple[Key, int, Any]] = []
        self._slice_ms = 0
        if combine and self._aggregation is not None and not self._aggregation.mutable_values:
            if spec.kind == "tumbling":
                self._slice_ms = spec.size_ms
            elif spec.kind == "hopping" and spec.size_ms % spec.slide_ms == 0:
                self._slice_ms = spec.slide_ms

    def append(self, key: Key, event_time_ms: int, value: Any) -> None:
        self._tuples.append((key, event_time_ms, value))

    def apply(self) -> list[WindowResult]:
        tuples, self._tuples = self._tuples, []
        state, aggregation = self._state, self._aggregation
        results: list[WindowResult] = []
        if aggregation is None:
            for key, event_time_ms, value in tuples:
                results += state.add(key, event_time_ms, value)
            return results
        watermark_ms, lateness_ms = state.watermark_ms, state.spec.allowed_lateness_ms
        slices: dict[tuple[Key, int], list[Any]] = {}
        for key, event_time_ms, value in tuples:
            if not is_taken(event_time_ms, watermark_ms, lateness_ms):
                results += state.add(key, event_time_ms, value)  # dropped: counted, set aside
                continue
            partial = lifted(aggregation, key, value)
            if not self._slice_ms:
                results += state.add(key, event_time_ms, partial)
                continue
            group = slices.get((key, event_time_ms // self._slice_ms))
            if group is None:
                slices[(key, event_time_ms // self._slice_ms)] = [event_time_ms, partial]
            else:
                group[1] = aggregation.merge(group[1], partial)
        for (key, _slice), (event_time_ms, partial) in slices.items():
            results += state.add(key, event_time_ms, partial)
        return results


def lifted(aggregation: Aggregation, key: Key, value: Any) -> Any:
    try:
        return aggregation.lift(value)
    except Exception as error:
        raise RuntimeError(
            f"an aggregator refused key {key!r}'s value {value!r}: {error!r}"
        ) from error


def mapper_watermark_ms(largest_event_time_ms: int, spec: WindowSpec) -> int:
    """A mapper's watermark: a tuple up to ``out_of_orderness_ms`` older than the largest
    event time it sent is still on time, so the promise is one millisecond below that."""
    return largest_event_time_ms - spec.out_of_orderness_ms - 1


def event_time_of(job: Job, record: Any) -> int:
    extract = job.event_time
    assert extract is not None
    try:
        event_time_ms = extract(record)
    except Exception as error:
        raise RuntimeError(f"event_time raised on record {record!r}: {error!r}") from error
    if type(event_time_ms) is not int:
        raise ValueError(
            f"event_time returned {event_time_ms!r} for record {record!r:.80}: "
            "it must be an int of milliseconds"
        )
    return event_time_ms


def _refuse_emit(key: Key, value: Any) -> NoReturn:
    raise TypeError(
        "a windowed reduce cannot emit: its window's state leaves by itself when the window closes"
    )


def fold_of(job: Job) -> Fold:
    """The job's reduce as a fold of one value into one window's state, each state checked
    as a node checks it before keeping it."""
    aggregation = job.aggregation
    if aggregation is not None:
        fold_key = aggregation.fold_key

        def fold_partial(key: Key, partial: Any, state: dict[str, Any]) -> None:
            state.update(fold_key(state, partial))

        return fold_partial
    reduce = job.tuple_reduce

    def fold(key: Key, value: Any, state: dict[str, Any]) -> None:
        try:
            reduce(key, value, state, _refuse_emit)
        except Exception as error:
            raise RuntimeError(f"reduce raised on key {key!r}: {error!r}") from error
        check_state(state)

    return fold
