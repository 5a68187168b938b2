"""The loops of checkpoint's hot path a compiled twin may stand in for: each attribute of
:data:`IN_FORCE` is the function apply and bulk apply call, its Python reference by default.
``smr.native`` installs the compiled ones (``smr._native``) when ``SMR_NATIVE`` allows; they
answer exactly what the references answer (property tests in ``tests/smr/test_native.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from smr.checkpoint.hwm import Cut, cut

CutFn = Callable[[Mapping[Any, Any], Sequence[int], Sequence[int]], Cut]


def group_add(grouped: dict[Any, Any], keys: Sequence[Any], values: Sequence[Any]) -> None:
    """``grouped[key] = grouped.get(key, 0) + value`` for each pair in order: the merge of a
    count's or a sum's partials."""
    get = grouped.get
    for key, value in zip(keys, values, strict=True):
        grouped[key] = get(key, 0) + value


# The range of ints a checkpoint encodes (as smr.values.check_state requires of every field).
INT_MIN = -(1 << 63)
INT_END = 1 << 64


def fold_additive(
    grouped: Mapping[Any, Any],
    slot_of: Mapping[Any, int],
    active: dict[int, dict[Any, dict[str, Any]]],
    older: Sequence[Mapping[Any, Any]],
    name: str,
    new_keys_take_partial: bool = False,
) -> dict[Any, Any]:
    """The common case of a count's or a sum's fold (one owned field ``name``, no
    tombstones): each key of ``grouped`` whose field is found (in ``active``, else in the
    first of the ``older`` fragments that has it: a read takes the newest fragment field by
    field) takes ``field + partial``, written into ``active`` (in place when active holds
    the key, else as a new entry). Returns the keys left to the general fold, with their
    partials: a field absent or None, a sum that raises TypeError, is None or leaves the
    64-bit range. With ``new_keys_take_partial`` (the fold of a key with no state is its
    partial, as a count's and a sum's are), a key no fragment holds and whose partial is an
    int within that range or a float takes ``{name: partial}`` here too."""
    general: dict[Any, Any] = {}
    active_get = active.get
    for key, partial in grouped.items():
        slot = slot_of[key]
        active_keys = active_get(slot)
        fields = None if active_keys is None else active_keys.get(key)
        field: Any = None
        unheld = fields is None
        if fields is not None:
            field = fields.get(name)
        else:
            for fragment in older:
                keys_of_slot = fragment.get(slot)
                held = None if keys_of_slot is None else keys_of_slot.get(key)
                if held is not None:
                    unheld = False
                    if name in held:
                        field = held[name]
                        break
        if field is None:
            if new_keys_take_partial and unheld and _in_state_range(partial):
                if active_keys is not None:
                    active_keys[key] = {name: partial}
                else:
                    active[slot] = {key: {name: partial}}
                continue
            general[key] = partial
            continue
        try:
            summed = field + partial
        except TypeError:
            summed = None  # not numbers (a broken feeder): the general fold says why
        if summed is None or (summed.__class__ is int and not INT_MIN <= summed < INT_END):
            general[key] = partial
            continue
        if fields is not None:
            fields[name] = summed
        elif active_keys is not None:
            active_keys[key] = {name: summed}
        else:
            active[slot] = {key: {name: summed}}
    return general


def _in_state_range(partial: Any) -> bool:
    """An exact int within the range state keeps, or an exact float."""
    if partial.__class__ is int:
        return bool(INT_MIN <= partial < INT_END)
    return partial.__class__ is float


FoldAdditiveFn = Callable[
    [
        Mapping[Any, Any],
        Mapping[Any, int],
        dict[int, dict[Any, dict[str, Any]]],
        Sequence[Mapping[Any, Any]],
        str,
        bool,
    ],
    dict[Any, Any],
]


FoldTurnFn = Callable[..., tuple[Any, ...] | None]
"""Steps 1-3 of ``checkpoint.bulk.apply_folds`` for a count or a sum in one call
(``smr._native.fold_turn``: the cut, the marks taken, the merge per key, the common case
of the fold): ``(general, slot_of, rows per key, tuples, duplicates)``, or None for batches
it leaves to the reference. No Python reference of its own: ``apply_folds``'s Python steps
are the reference (None here runs them)."""


FoldTurnBodiesFn = Callable[..., tuple[Any, ...] | None]
"""``FoldTurnFn`` over batches in their wire bytes (``smr._native.fold_turn_bodies``: each
``(mapper index, body, count)``, a body read with no Python object made per row), or None
for bodies it leaves to a decode. No Python reference of its own: ``apply_folds``'s Python
steps over the decoded bodies are the reference (None here runs them)."""


DriveReduceFn = Callable[..., tuple[int, list[tuple[Any, BaseException]], bool, bool]]
"""Steps 3-5 of ``checkpoint.apply.apply_tuples`` over a batch's fresh rows, calling the
reducer straight: ``(failed, failures, wrote_tombstone, holds_mutables)``. No Python
reference of its own: the loop in ``apply_tuples`` is the reference (None here runs it)."""


@dataclass(slots=True)
class Kernels:
    """The functions in force. ``compiled`` names where they come from."""

    cut: CutFn = cut
    group_add: Callable[[dict[Any, Any], Sequence[Any], Sequence[Any]], None] = group_add
    fold_additive: FoldAdditiveFn = fold_additive
    drive_reduce: DriveReduceFn | None = None
    fold_turn: FoldTurnFn | None = None
    fold_turn_bodies: FoldTurnBodiesFn | None = None
    slot_table: Callable[[], Any] | None = None
    """Makes the table of a slot master starts to hold (``checkpoint.delta.SlotTable``), for
    the stores made after it is set; None (the default) keeps master's slots in dicts."""
    compiled: bool = False


IN_FORCE = Kernels()
