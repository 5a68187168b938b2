"""The user API: a :class:`Job` is a ``map``, a ``reduce`` and an optional ``combine``, or their
forms in bulk (``reduce`` made of aggregators, ``smr.agg``; ``reduce_batch``; ``map_batch``),
and a windowed job adds ``event_time`` and a ``window`` (run by :func:`smr.testing.run_job`
only; a cluster refuses it). :func:`load_job` finds a job by ``module:attribute`` or
``path/to/file.py:attribute``.

What a job may count on: each tuple is reduced once; a ``reduce`` (or ``reduce_batch``) that
raises changes no state and emits nothing, and is counted and logged; one mapper's tuples for
one key keep their order, and reducers must not depend on the order of tuples from different
mappers (docs/design/architecture.md#data-path). What each function takes and returns, with
examples: the jobs guide (docs/guide/jobs.md).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smr.agg import Aggregation, Aggregator
from smr.checkpoint.windows import WindowSpec
from smr.wording import a_type

Key = str | int
Emit = Callable[[Key, Any], None]
MapFn = Callable[[Any, Emit], None]
MapBatchFn = Callable[[list[Any]], tuple[Iterable[Key], Iterable[Any]]]
ReduceFn = Callable[[Key, Any, dict[str, Any], Emit], None]
ReduceBatchFn = Callable[[list[Key], list[list[Any]], list[dict[str, Any]]], None]
CombineFn = Callable[[Any, Any], Any]
EventTimeFn = Callable[[Any], int]


@dataclass(frozen=True)
class Job:
    """A streaming MapReduce job: what mappers run (``map`` or ``map_batch``, ``combine``)
    and what reducer nodes run (``reduce`` or ``reduce_batch``). ``name`` identifies the job
    in logs and mapper ids. A ``reduce`` of aggregators (``smr.agg``) brings its own
    ``combine``; giving one too is an error."""

    name: str
    map: MapFn | None = None
    reduce: ReduceFn | Aggregation | Aggregator | None = None
    combine: CombineFn | None = None
    reduce_batch: ReduceBatchFn | None = None
    map_batch: MapBatchFn | None = None
    event_time: EventTimeFn | None = None
    window: WindowSpec | None = None
    late_side_output: bool = False

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"a job needs a non-empty name, got {self.name!r}")
        if self.map is None and self.map_batch is None:
            raise TypeError(f"job {self.name!r} needs a map or a map_batch")
        if (self.reduce is None) == (self.reduce_batch is None):
            raise TypeError(f"job {self.name!r} needs a reduce or a reduce_batch (one of them)")
        if isinstance(self.reduce, Aggregator):
            object.__setattr__(self, "reduce", Aggregation({self.reduce.default_name: self.reduce}))
        for role in ("map", "reduce", "combine", "reduce_batch", "map_batch"):
            function = getattr(self, role)
            if function is not None and not callable(function):
                raise TypeError(f"job {self.name!r}: {role} must be callable or None")
        if isinstance(self.reduce, Aggregation):
            if self.combine is not None:
                raise TypeError(
                    f"job {self.name!r}: a reduce of aggregators combines by itself; drop combine="
                )
            object.__setattr__(self, "combine", self.reduce.merge)
        self._check_window()

    def _check_window(self) -> None:
        """A windowed job names both its event time and its window, and folds per tuple."""
        if (self.window is None) != (self.event_time is None):
            raise TypeError(
                f"job {self.name!r}: a windowed job needs both event_time= and window= "
                "(smr.windows.tumbling, hopping or session)"
            )
        if self.window is None:
            if self.late_side_output:
                raise TypeError(f"job {self.name!r}: late_side_output= needs a window=")
            return
        if not isinstance(self.window, WindowSpec):
            raise TypeError(
                f"job {self.name!r}: window must come from smr.windows, not {self.window!r}"
            )
        if not callable(self.event_time):
            raise TypeError(f"job {self.name!r}: event_time must be callable")
        if self.reduce_batch is not None or self.map is None:
            raise TypeError(
                f"job {self.name!r}: a windowed job takes map and reduce (or aggregators): "
                "each tuple takes its record's event time, and folds into its windows one by one"
            )

    @property
    def windowed(self) -> bool:
        """Whether the job folds per event-time window."""
        return self.window is not None

    @property
    def tuple_reduce(self) -> ReduceFn:
        """The reduce as a function of one tuple ``(key, value, state, emit)``, whatever form
        the job gives it in (an aggregation takes a partial, as travels; a ``reduce_batch``
        gets a batch of one)."""
        reduce = self.reduce
        if isinstance(reduce, Aggregation):
            return reduce
        if reduce is None or isinstance(reduce, Aggregator):
            reduce_batch = self.reduce_batch
            assert reduce_batch is not None

            def reduce_one(key: Key, value: Any, state: dict[str, Any], emit: Emit) -> None:
                reduce_batch([key], [[value]], [state])

            return reduce_one
        return reduce

    @property
    def aggregation(self) -> Aggregation | None:
        """The job's reduce when it is made of aggregators."""
        return self.reduce if isinstance(self.reduce, Aggregation) else None

    def mapper(self) -> MapFn:
        """``map(record, emit)`` as mappers run it: emits what travels (with aggregators,
        each value lifted into its partial), built from ``map_batch`` when there is no
        ``map``."""
        aggregation = self.aggregation
        user_map = self.map
        if user_map is None:
            map_batch = self.map_batch
            assert map_batch is not None

            def map_one(record: Any, emit: Emit) -> None:
                keys, values = map_batch([record])
                for key, value in zip(keys, values, strict=True):
                    emit(key, value)

            user_map = map_one
        if aggregation is None:
            return user_map
        lift = aggregation.lift
        mapped = user_map

        def map_lifted(record: Any, emit: Emit) -> None:
            mapped(record, lambda key, value: emit(key, lift(value)))

        return map_lifted

    def batch_mapper(
        self,
    ) -> Callable[[list[Any]], tuple[Sequence[Key], Sequence[Any], int]] | None:
        """``map_batch`` as mappers run it, returning ``(keys, values, produced)``: what
        travels (with aggregators, folded per key: :meth:`smr.agg.Aggregation.lift_many`)
        and how many tuples ``map_batch`` produced; None when the job has no ``map_batch``."""
        map_batch = self.map_batch
        if map_batch is None:
            return None
        aggregation = self.aggregation

        def run(records: list[Any]) -> tuple[Sequence[Key], Sequence[Any], int]:
            keys, values = map_batch(records)
            keys = keys if isinstance(keys, list) else list(keys)
            values = values if isinstance(values, list) else list(values)
            if len(keys) != len(values):
                raise ValueError(f"map_batch returned {len(keys)} keys and {len(values)} values")
            if aggregation is not None:
                return (*aggregation.lift_many(keys, values), len(keys))
            return keys, values, len(keys)

        return run


class JobLoadError(Exception):
    """The job reference could not be resolved to a :class:`Job`; the message says why."""


def load_job(reference: str) -> Job:
    """Import and return the :class:`Job` named by ``module:attribute`` or ``file.py:attribute``.

    The current directory is importable, as with ``python -m``. Raises :class:`JobLoadError`
    with a message naming the problem (bad syntax, missing module, missing attribute, not a
    Job, or the module raising on import); an import that fails inside the job's module is
    named, with the file and line of the statement that made it.
    """
    module_part, sep, attribute = reference.rpartition(":")
    if not sep or not module_part or not attribute:
        raise JobLoadError(f"job {reference!r} must look like 'module:attribute' or 'file.py:attr'")
    try:
        if _is_file_ref(module_part):
            module = _import_file(Path(module_part))
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_part)
    except JobLoadError:
        raise
    except ModuleNotFoundError as error:
        if not _is_file_ref(module_part) and _names_module(error.name, module_part):
            raise JobLoadError(f"job module {module_part!r} not found ({error})") from None
        raise JobLoadError(
            f"job module {module_part!r} failed to import {error.name!r}{_where(error)}: {error}"
        ) from None
    except Exception as error:
        raise JobLoadError(
            f"job module {module_part!r} raised on import{_where(error)}: "
            f"{type(error).__name__}: {error}"
        ) from None
    job = getattr(module, attribute, None)
    if job is None:
        raise JobLoadError(f"job module {module_part!r} has no attribute {attribute!r}")
    if not isinstance(job, Job):
        raise JobLoadError(f"{reference!r} is {a_type(job)}, not an smr.Job")
    return job


def absolute_job_ref(reference: str, cwd: Path) -> str:
    """``reference`` with a job file's path made absolute against ``cwd`` (a module name
    is kept: it is found on the import path), so that the reference works from any
    directory; a reference without ``:`` is returned as given, for load_job to refuse."""
    module_part, sep, attribute = reference.rpartition(":")
    if not sep or not module_part or not _is_file_ref(module_part):
        return reference
    return f"{(cwd / module_part).resolve()}:{attribute}"


def _is_file_ref(module_part: str) -> bool:
    return module_part.endswith(".py") or "/" in module_part


def _names_module(missing: str | None, module_part: str) -> bool:
    """True if the module found missing is the job's module or a package above it (not a
    module the job's module imports)."""
    return missing is not None and (missing == module_part or module_part.startswith(missing + "."))


def _where(error: BaseException) -> str:
    """`` at FILE, line N (CODE)`` for the statement in user code that raised ``error``."""
    if isinstance(error, SyntaxError) and error.filename:
        return f" at {error.filename}, line {error.lineno}"
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith("<") and "importlib" not in frame.filename
    ]
    if not frames:
        return ""
    frame = frames[-1]
    code = f" ({frame.line})" if frame.line else ""
    return f" at {frame.filename}, line {frame.lineno}{code}"


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise JobLoadError(f"job file {str(path)!r} does not exist")
    name = f"smr_job_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise JobLoadError(f"cannot import job file {str(path)!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
