"""smr.native owns one choice: which path the hot loops take, the compiled one
(``smr._native``, built from ``native/``) or the Python one, which stays the reference.

``SMR_NATIVE`` chooses, once per process: ``auto`` (the default) takes the compiled module
when it imports and else the Python path, with one warning; ``on`` requires it (ImportError
otherwise); ``off`` runs the Python path. Importing this module installs the choice for
``checkpoint`` (``checkpoint.kernels.IN_FORCE``). Every compiled function answers what its
Python reference answers, or None where it leaves a case to the reference (an ext type, a
value subclass); ``tests/smr/test_native.py`` holds them to it.
"""

from __future__ import annotations

import functools
import importlib
import os
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any, Final

from smr.checkpoint.delta import TOMBSTONE
from smr.checkpoint.hwm import Cut
from smr.checkpoint.kernels import IN_FORCE

MODES: Final = ("auto", "on", "off")


def _load(mode: str) -> ModuleType | None:
    if mode not in MODES:
        raise ValueError(f"SMR_NATIVE must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        return None
    try:
        return importlib.import_module("smr._native")
    except ImportError as error:
        if mode == "on":
            raise ImportError(
                f"SMR_NATIVE=on but smr._native does not import ({error}): build smr from "
                "source with a Rust toolchain (make venv), or install smr's wheel"
            ) from error
        warnings.warn(
            f"smr._native does not import ({error}); running the Python path "
            "(SMR_NATIVE=off silences this)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


MODE: Final = os.environ.get("SMR_NATIVE", "auto").strip().lower() or "auto"
NATIVE: Final = _load(MODE)
"""The compiled module in force, or None (the Python path)."""


def native_cut(marks: Mapping[Any, Any], slots: Sequence[int], seqs: Sequence[int]) -> Cut:
    """``checkpoint.hwm.cut`` in compiled code (the same answer for any batch)."""
    assert NATIVE is not None
    if marks.__class__ is not dict:
        marks = dict(marks)
    fresh, new_marks, duplicates = NATIVE.cut(marks, slots, seqs)
    return Cut(fresh, new_marks, duplicates)


def keep_slots_compact(field: str | None) -> bool:
    """Hold master's slots in compiled tables (``smr._native.SlotTable``), whose keys of
    type ``str`` with a state ``{field: int}`` cost a few dozen bytes each, in every store
    this process makes from now on, when the compiled module is in force and ``field`` is
    given (a job whose reduce is a lone count or sum: ``smr.agg.Aggregation.compact_field``);
    else dicts. True when tables are in force. A table answers as the dict it stands for,
    so states, checkpoints and snapshots are those of the Python path."""
    if NATIVE is None or field is None:
        IN_FORCE.slot_table = None
        return False
    IN_FORCE.slot_table = functools.partial(NATIVE.SlotTable, field, TOMBSTONE)
    return True


if NATIVE is not None:
    IN_FORCE.cut = native_cut
    IN_FORCE.group_add = NATIVE.group_add
    IN_FORCE.fold_additive = NATIVE.fold_additive
    IN_FORCE.drive_reduce = NATIVE.drive_reduce
    IN_FORCE.fold_turn = NATIVE.fold_turn
    IN_FORCE.fold_turn_bodies = NATIVE.fold_turn_bodies
    IN_FORCE.compiled = True
