"""The loops of checkpoint's hot path a compiled twin may stand in for: each attribute of
:data:`IN_FORCE` is the function apply and bulk apply call, its Python reference by default.
``smr.native`` installs the compiled ones (``smr._native``) when ``SMR_NATIVE`` allows; they
answer exactly what the references answer (property tests in ``tests/smr/test_native.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checkpoint.hwm import Cut, cut

CutFn = Callable[[Mapping[Any, Any], Sequence[int], Sequence[int]], Cut]


def group_add(grouped: dict[Any, Any], keys: Sequence[Any], values: Sequence[Any]) -> None:
    """``grouped[key] = grouped.get(key, 0) + value`` for each pair in order: the merge of a
    count's or a sum's partials."""
    get = grouped.get
    for key, value in zip(keys, values, strict=True):
        grouped[key] = get(key, 0) + value


@dataclass(slots=True)
class Kernels:
    """The functions in force. ``compiled`` names where they come from."""

    cut: CutFn = cut
    group_add: Callable[[dict[Any, Any], Sequence[Any], Sequence[Any]], None] = group_add
    compiled: bool = False


IN_FORCE = Kernels()
