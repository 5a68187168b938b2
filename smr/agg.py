"""Built-in aggregators: a job's reduce made of per-field aggregations, applied in bulk.

    from smr import Job, agg

    job = Job("sales", map=parse, reduce=agg.fields(n=agg.count(), total=agg.sum(of="price")))

A key's state then holds ``{"n": ..., "total": ...}``. Such a job needs no ``combine``: the
mapper lifts each value into a *partial* (``Aggregation.lift``; a count's is 1) and folds
those of one key within a batch (``Aggregation.merge``); a node merges the partials of a
turn's batches and writes each key once (``checkpoint.bulk.apply_folds``).

Each aggregator reads the emitted value, or a part of it with ``of``: a str takes
``value[of]`` (a mapping's field), an int ``value[of]`` (a sequence's item), a callable
``of(value)``. A value an aggregator cannot take (a str for a sum) raises
:class:`AggregateError` in the mapper, where ``smr feed`` reports it as a failed record.

The state fields each writes (``name`` is its field in ``fields``):

- ``count()``: ``name``, the number of tuples.
- ``sum(of)``, ``min(of)``, ``max(of)``: ``name``, a number (each takes numbers only, so
  that partials always merge: a str among numbers fails its record in the mapper).
- ``mean(of)``: ``name`` the mean, beside ``name.sum`` and ``name.n`` it is kept from.
- ``distinct(of)``: ``name`` the exact number of distinct values, beside ``name.values``,
  all of them (memory grows with them: for many, use ``approx_distinct``).
- ``approx_distinct(of, precision)``: ``name`` a HyperLogLog estimate (standard error about
  ``1.04 / 2**(precision/2)``: 3.3% at the default 10), beside ``name.hll``, its
  ``2**precision`` one-byte registers: the memory per key is bounded.
- ``top_k(k, of)``: ``name``, the ``k`` largest values (numbers), largest first.
- ``last(of)``: ``name``, the value of the key's latest tuple (per mapper, in emit order).
"""

from __future__ import annotations

import builtins
import heapq
import math
import operator
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import mmh3
import msgpack

from smr.native import NATIVE
from smr.values import INT_END, INT_MIN

Of = str | int | Callable[[Any], Any] | None

APPROX_PRECISION_DEFAULT: Final = 10
APPROX_PRECISION_RANGE: Final = range(4, 17)


class AggregateError(TypeError):
    """A value an aggregator cannot take (the message names the aggregator and the value)."""


def _picker(of: Of) -> Callable[[Any], Any] | None:
    if of is None:
        return None
    if callable(of):
        return of
    if isinstance(of, str | int) and not isinstance(of, bool):
        return operator.itemgetter(of)
    raise TypeError(f"of= must be a field name, an index or a callable, not {of!r}")


def _number(value: Any, what: str) -> Any:
    if isinstance(value, int | float):
        return value
    raise AggregateError(f"{what} takes numbers, got {type(value).__name__} {value!r:.60}")


def _in_range(total: Any, what: str) -> Any:
    if total.__class__ is int and not INT_MIN <= total < INT_END:
        raise AggregateError(f"{what} reached {total}, outside the 64-bit range state keeps")
    return total


@dataclass(frozen=True)
class Aggregator:
    """One field's aggregation: ``lift`` a value into a partial, ``merge`` two partials,
    ``fold`` a partial into the field's current value (None when absent). Subclasses are
    the functions below; each keeps a partial a plain value or a tuple (what travels)."""

    of: Of = None
    # The field a job's reduce given this aggregator alone keeps it in.
    default_name = "value"

    def stored(self, name: str) -> tuple[str, ...]:
        """The state fields this aggregator writes for field ``name``."""
        return (name,)

    def lift(self, value: Any) -> Any:
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def fold(self, current: Any, partial: Any) -> Any:
        """The field's new value; override ``fold_fields`` instead for several fields."""
        raise NotImplementedError

    def fold_fields(
        self, name: str, fields: Mapping[str, Any] | None, partial: Any, out: dict[str, Any]
    ) -> None:
        """Write the new values of this aggregator's fields into ``out``."""
        out[name] = self.fold(None if fields is None else fields.get(name), partial)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pick", _picker(self.of))

    def picked(self, value: Any) -> Any:
        """The part of an emitted value this aggregator reads (``of``)."""
        pick = self._pick  # type: ignore[attr-defined]
        return value if pick is None else pick(value)


class _Count(Aggregator):
    default_name = "count"

    def lift(self, value: Any) -> int:
        return 1

    def merge(self, a: Any, b: Any) -> Any:
        return a + b

    def fold(self, current: Any, partial: Any) -> Any:
        return _in_range(partial if current is None else current + partial, "count()")


class _Sum(Aggregator):
    default_name = "sum"

    def lift(self, value: Any) -> Any:
        return _number(self.picked(value), "sum()")

    def merge(self, a: Any, b: Any) -> Any:
        return a + b

    def fold(self, current: Any, partial: Any) -> Any:
        return _in_range(partial if current is None else current + partial, "sum()")


class _Min(Aggregator):
    default_name = "min"

    def lift(self, value: Any) -> Any:
        return _number(self.picked(value), "min()")

    def merge(self, a: Any, b: Any) -> Any:
        return b if b < a else a

    def fold(self, current: Any, partial: Any) -> Any:
        return partial if current is None or partial < current else current


class _Max(Aggregator):
    default_name = "max"

    def lift(self, value: Any) -> Any:
        return _number(self.picked(value), "max()")

    def merge(self, a: Any, b: Any) -> Any:
        return b if b > a else a

    def fold(self, current: Any, partial: Any) -> Any:
        return partial if current is None or partial > current else current


class _Last(Aggregator):
    default_name = "last"

    def lift(self, value: Any) -> Any:
        return self.picked(value)

    def merge(self, a: Any, b: Any) -> Any:
        return b

    def fold(self, current: Any, partial: Any) -> Any:
        return partial


class _Mean(Aggregator):
    default_name = "mean"

    def stored(self, name: str) -> tuple[str, ...]:
        return (name, f"{name}.sum", f"{name}.n")

    def lift(self, value: Any) -> tuple[Any, int]:
        return (_number(self.picked(value), "mean()"), 1)

    def merge(self, a: Any, b: Any) -> tuple[Any, int]:
        return (a[0] + b[0], a[1] + b[1])

    def fold_fields(
        self, name: str, fields: Mapping[str, Any] | None, partial: Any, out: dict[str, Any]
    ) -> None:
        total, n = partial
        if fields is not None and f"{name}.n" in fields:
            total += fields[f"{name}.sum"]
            n += fields[f"{name}.n"]
        out[f"{name}.sum"] = _in_range(total, "mean()")
        out[f"{name}.n"] = n
        out[name] = total / n


class _Distinct(Aggregator):
    default_name = "distinct"

    def stored(self, name: str) -> tuple[str, ...]:
        return (name, f"{name}.values")

    def lift(self, value: Any) -> tuple[Any, ...]:
        picked = self.picked(value)
        hash(picked)  # an unhashable value fails here, in the mapper, not on the node
        return (picked,)

    def merge(self, a: Any, b: Any) -> list[Any]:
        return _gathered(a, b)  # repeats are dropped at the fold

    def fold_fields(
        self, name: str, fields: Mapping[str, Any] | None, partial: Any, out: dict[str, Any]
    ) -> None:
        values = () if fields is None else fields.get(f"{name}.values", ())
        merged = tuple(dict.fromkeys((*values, *partial)))
        out[f"{name}.values"] = merged
        out[name] = len(merged)


@dataclass(frozen=True)
class _ApproxDistinct(Aggregator):
    default_name = "distinct"
    precision: int = APPROX_PRECISION_DEFAULT

    def stored(self, name: str) -> tuple[str, ...]:
        return (name, f"{name}.hll")

    def lift(self, value: Any) -> tuple[int, ...]:
        packed = msgpack.packb(self.picked(value), use_bin_type=True)
        return (mmh3.hash64(packed, signed=False)[0],)

    def merge(self, a: Any, b: Any) -> list[int]:
        return _gathered(a, b)

    def fold_fields(
        self, name: str, fields: Mapping[str, Any] | None, partial: Any, out: dict[str, Any]
    ) -> None:
        p = self.precision
        size = 1 << p
        current = None if fields is None else fields.get(f"{name}.hll")
        registers = bytearray(current) if current is not None else bytearray(size)
        if len(registers) != size:
            raise AggregateError(f"approx_distinct(): {len(registers)} registers, not {size}")
        rest_bits = 64 - p
        rest_mask = (1 << rest_bits) - 1
        for h in partial:
            index = h >> rest_bits
            rank = rest_bits - (h & rest_mask).bit_length() + 1
            if rank > registers[index]:
                registers[index] = rank
        out[f"{name}.hll"] = bytes(registers)
        out[name] = hll_estimate(registers)


def _gathered(a: Any, b: Any) -> list[Any]:
    """The items of partials ``a`` and ``b`` in one list, ``b``'s after ``a``'s. A list made by
    an earlier merge belongs to the merging side (lifts and decoded batches make tuples), so
    it grows in place: a key merged once per emit costs each emit its own items, not a copy
    of everything gathered before."""
    gathered: list[Any] = a if a.__class__ is list else list(a)
    gathered.extend(b)
    return gathered


def hll_estimate(registers: Sequence[int]) -> int:
    """The HyperLogLog estimate of the distinct values behind ``registers`` (with the usual
    small-range correction: linear counting while registers are still empty)."""
    size = len(registers)
    alpha = 0.7213 / (1 + 1.079 / size)
    raw = alpha * size * size / builtins.sum(2.0**-r for r in registers)
    zeros = registers.count(0) if isinstance(registers, bytes | bytearray) else 0
    if raw <= 2.5 * size and zeros:
        return round(size * math.log(size / zeros))
    return round(raw)


@dataclass(frozen=True)
class _TopK(Aggregator):
    default_name = "top"
    k: int = 10

    def lift(self, value: Any) -> tuple[Any, ...]:
        return (_number(self.picked(value), "top_k()"),)

    def merge(self, a: Any, b: Any) -> tuple[Any, ...]:
        return tuple(heapq.nlargest(self.k, tuple(a) + tuple(b)))

    def fold(self, current: Any, partial: Any) -> Any:
        return self.merge(tuple(current or ()), tuple(partial))


def count() -> Aggregator:
    """The number of tuples."""
    return _Count()


def sum(of: Of = None) -> Aggregator:
    """The sum of the values (numbers)."""
    return _Sum(of)


def min(of: Of = None) -> Aggregator:
    """The smallest value."""
    return _Min(of)


def max(of: Of = None) -> Aggregator:
    """The largest value."""
    return _Max(of)


def mean(of: Of = None) -> Aggregator:
    """The mean of the values (numbers); kept as a sum and a count beside it."""
    return _Mean(of)


def distinct(of: Of = None) -> Aggregator:
    """The exact number of distinct values, keeping them all."""
    return _Distinct(of)


def approx_distinct(of: Of = None, precision: int = APPROX_PRECISION_DEFAULT) -> Aggregator:
    """An estimate of the number of distinct values in ``2**precision`` bytes per key."""
    if precision not in APPROX_PRECISION_RANGE:
        raise ValueError(f"precision must be in [4, 16], not {precision}")
    return _ApproxDistinct(of, precision)


def top_k(k: int, of: Of = None) -> Aggregator:
    """The ``k`` largest values, largest first."""
    if k < 1:
        raise ValueError(f"top_k needs k >= 1, not {k}")
    return _TopK(of, k)


def last(of: Of = None) -> Aggregator:
    """The latest value (in each mapper's emit order)."""
    return _Last(of)


class Aggregation:
    """A job's reduce made of named aggregators (:func:`fields`).

    Guarantees: the state a key reaches does not depend on how its tuples were batched,
    merged or split between mappers, for every aggregator but ``last`` (which keeps the
    latest tuple of whichever mapper's batch was applied last). Callable as a per-tuple
    reduce ``(key, partial, state, emit)``, which takes a partial, as the node does."""

    def __init__(self, aggregators: Mapping[str, Aggregator]) -> None:
        if not aggregators:
            raise ValueError("agg.fields() needs at least one field")
        for name, aggregator in aggregators.items():
            if not isinstance(aggregator, Aggregator):
                raise TypeError(f"field {name!r}: {aggregator!r} is not an smr.agg aggregator")
        self.aggregators = dict(aggregators)
        self.owned = frozenset(
            stored for name, a in aggregators.items() for stored in a.stored(name)
        )
        self.mutable_values = any(isinstance(a, _Last) for a in aggregators.values())
        items = list(self.aggregators.items())
        self.fold_key: Callable[[Mapping[str, Any] | None, Any], dict[str, Any]]
        if len(items) == 1:
            ((name, only),) = items
            self.lift: Callable[[Any], Any] = only.lift
            self.merge: Callable[[Any, Any], Any] = only.merge
            if type(only).fold_fields is Aggregator.fold_fields:
                fold = only.fold

                def fold_one(fields: Mapping[str, Any] | None, partial: Any) -> dict[str, Any]:
                    return {name: fold(None if fields is None else fields.get(name), partial)}

                self.fold_key = fold_one
            else:

                def fold_fields(fields: Mapping[str, Any] | None, partial: Any) -> dict[str, Any]:
                    out: dict[str, Any] = {}
                    only.fold_fields(name, fields, partial, out)
                    return out

                self.fold_key = fold_fields
        else:
            lifts = [a.lift for _, a in items]
            merges = [a.merge for _, a in items]

            def lift_all(value: Any) -> tuple[Any, ...]:
                return tuple(lift(value) for lift in lifts)

            def merge_all(a: Any, b: Any) -> tuple[Any, ...]:
                return tuple(m(x, y) for m, x, y in zip(merges, a, b, strict=True))

            def fold_all(fields: Mapping[str, Any] | None, partial: Any) -> dict[str, Any]:
                if len(partial) != len(items):
                    raise AggregateError(f"a partial of {len(partial)} fields, not {len(items)}")
                out: dict[str, Any] = {}
                for (name, aggregator), part in zip(items, partial, strict=True):
                    aggregator.fold_fields(name, fields, part, out)
                return out

            self.lift = lift_all
            self.merge = merge_all
            self.fold_key = fold_all
        self._counts_only = len(items) == 1 and isinstance(items[0][1], _Count)
        # A lone sum, min or max of the whole value folds in compiled code when it can.
        lone = items[0][1] if len(items) == 1 and items[0][1].of is None else None
        kinds: dict[type, str] = {_Sum: "sum", _Min: "min", _Max: "max"}
        self._compiled_combine = None if NATIVE is None else kinds.get(type(lone))
        self.additive = len(items) == 1 and isinstance(items[0][1], _Count | _Sum)
        self.compact_field: str | None = items[0][0] if self.additive else None
        """The one field of a lone count or sum: its states ``{field: int}`` can be held in
        compiled tables (``smr.native.keep_slots_compact``)."""
        # A count's or a sum's fold of a key with no state is its partial (within range).
        self.new_keys_take_partial = self.additive

    def lift_many(
        self, keys: Sequence[Any], values: Sequence[Any]
    ) -> tuple[Sequence[Any], Sequence[Any]]:
        """``(keys, partials)`` with one partial per distinct key, in first-seen order: the
        tuples of a bulk map folded before they are emitted (a count only counts, in C; a
        lone sum, min or max of numbers folds in ``smr._native`` when ``smr.native`` has it,
        with the same partials)."""
        if self._counts_only:
            counted = Counter(keys)
            return list(counted), list(counted.values())
        compiled = self._compiled_combine
        if compiled is not None and NATIVE is not None and NATIVE.all_numbers(values):
            if compiled == "sum":
                combined = NATIVE.combine_add(keys, values)
            else:
                combined = {}
                NATIVE.group_pick(combined, keys, values, compiled == "max")
            return list(combined), list(combined.values())
        lift = self.lift
        merge = self.merge
        folded: dict[Any, Any] = {}
        get = folded.get
        for key, value in zip(keys, values, strict=True):
            partial = lift(value)
            old = get(key, _ABSENT)
            folded[key] = partial if old is _ABSENT else merge(old, partial)
        return list(folded), list(folded.values())

    def __call__(self, key: Any, partial: Any, state: dict[str, Any], emit: Any) -> None:
        state.update(self.fold_key(state, partial))

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{n}={type(a).__name__[1:].lower()}" for n, a in self.aggregators.items()
        )
        return f"agg.fields({inner})"


_ABSENT: Final = object()


def fields(**aggregators: Aggregator) -> Aggregation:
    """A reduce that keeps one field per aggregator: ``fields(n=count(), top=max())``."""
    return Aggregation(aggregators)
