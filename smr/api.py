"""The user API: a :class:`Job` is a ``map``, a ``reduce`` and an optional ``combine``.

- ``map(record, emit)`` turns one input record (a line of text for ``smr feed``) into tuples
  by calling ``emit(key, value)``; keys are ``str`` or ``int``, values anything msgpack
  encodes (numbers, strings, bytes, lists, maps).
- ``reduce(key, value, state, emit)`` folds one tuple into its key's ``state``, a plain
  ``dict`` of fields the reducer reads and writes (``state["count"] = ...``). It may call
  ``emit(key, value)`` to publish output. If it raises, neither its state changes nor its
  emits take effect (the node logs and counts the error and goes on). Keep field values
  scalars or tuples where possible: they are cheapest to checkpoint.
- ``combine(a, b)`` merges two values of the same key on the mapper side within a batch; it
  must be associative and agree with ``reduce`` (``reduce`` of the combined value has the same
  effect as ``reduce`` of each).

Reducers must not depend on the order of tuples from different mappers (DESIGN section 4);
the order of one mapper's tuples for one key is kept.

A job is found by its import path ``module:attribute`` (``examples.wordcount:job``) or a file
path ``path/to/file.py:attribute``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Key = str | int
Emit = Callable[[Key, Any], None]
MapFn = Callable[[Any, Emit], None]
ReduceFn = Callable[[Key, Any, dict[str, Any], Emit], None]
CombineFn = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Job:
    """A streaming MapReduce job: what mappers run (``map``, ``combine``) and what reducer
    nodes run (``reduce``). ``name`` identifies the job in logs and mapper ids."""

    name: str
    map: MapFn
    reduce: ReduceFn
    combine: CombineFn | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"a job needs a non-empty name, got {self.name!r}")
        for role in ("map", "reduce"):
            if not callable(getattr(self, role)):
                raise TypeError(f"job {self.name!r}: {role} must be callable")
        if self.combine is not None and not callable(self.combine):
            raise TypeError(f"job {self.name!r}: combine must be callable or None")


class JobLoadError(Exception):
    """The job reference could not be resolved to a :class:`Job`; the message says why."""


def load_job(reference: str) -> Job:
    """Import and return the :class:`Job` named by ``module:attribute`` or ``file.py:attribute``.

    The current directory is importable, as with ``python -m``. Raises :class:`JobLoadError`
    with a message naming the problem (bad syntax, missing module, missing attribute, not a
    Job, or the module raising on import).
    """
    module_part, sep, attribute = reference.rpartition(":")
    if not sep or not module_part or not attribute:
        raise JobLoadError(f"job {reference!r} must look like 'module:attribute' or 'file.py:attr'")
    try:
        if module_part.endswith(".py") or "/" in module_part:
            module = _import_file(Path(module_part))
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_part)
    except JobLoadError:
        raise
    except ModuleNotFoundError as error:
        raise JobLoadError(f"job module {module_part!r} not found ({error})") from None
    except Exception as error:
        raise JobLoadError(
            f"job module {module_part!r} raised on import: {type(error).__name__}: {error}"
        ) from None
    job = getattr(module, attribute, None)
    if job is None:
        raise JobLoadError(f"job module {module_part!r} has no attribute {attribute!r}")
    if not isinstance(job, Job):
        raise JobLoadError(f"{reference!r} is a {type(job).__name__}, not an smr.Job")
    return job


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
