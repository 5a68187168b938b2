"""The emit closures: the mapper's hot path (step 1 of :mod:`smr.mapper.emitter`).

Each closure binds what it touches to locals once; the emitter mutates those very lists in
place (``Emitter._set_view``), so they stay valid across view changes. A tuple joins the
open batch of its slot's primary; a batch closes at ``batch_size`` tuples, and before a
tuple that would take its estimated encoded size past ``batch_bytes``; without combine,
every open batch closes at an emit ``linger_ms`` or more after the first tuple opened.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from smr.values import (
    HEADER_BYTES_MAX,
    ROW_FIXED_BYTES,
    SCALAR_BYTES_MAX,
    EmitError,
    row_bytes,
)

if TYPE_CHECKING:
    from smr.mapper.emitter import Emitter


EmitPair = tuple[Callable[[Any, Any], None], Callable[[Any, Any, int], None]]
"""``(emit(key, value), emit_sized(key, value, size))``: ``emit`` checks the tuple
(:func:`smr.values.row_bytes`; :class:`smr.values.EmitError` with nothing emitted if it
cannot travel); ``emit_sized`` takes a tuple already checked, with the size the check gave."""


# Keys of at most this many characters have their slot cached (Emitter._slot), so a key
# found in the cache makes, with an int value, a row of at most FAST_ROW_BYTES_MAX bytes.
CACHED_KEY_CHARS_MAX: Final = 64
FAST_ROW_BYTES_MAX: Final = (
    ROW_FIXED_BYTES + HEADER_BYTES_MAX + 4 * CACHED_KEY_CHARS_MAX + SCALAR_BYTES_MAX
)


def _byte_bounds(emitter: Emitter) -> tuple[int, int, bool]:
    """``(small_row_bytes, big_rows_bytes_max, fast)``.

    Rows of at most ``small_row_bytes`` are not added up: a full batch of them takes at most
    half the budget. The others are, and a batch closes before they would pass the other
    half; so a body stays within the budget plus one row (at most twice the budget, which
    the encoder checks: ``smr.mapper.channels.encode_within``). ``fast``: a cached key with a
    non-negative int value makes a small row (not so with a tiny budget per row).
    """
    small_row_bytes = emitter.batch_bytes // (2 * emitter.batch_size)
    big_rows_bytes_max = emitter.batch_bytes - small_row_bytes * emitter.batch_size
    return small_row_bytes, big_rows_bytes_max, small_row_bytes >= FAST_ROW_BYTES_MAX


def _make_linger(emitter: Emitter) -> Callable[[float], None]:
    """``linger(emitted_at)`` after a tuple is added: the first tuple opened since the last
    flush sets when the open batches must go (``linger_ms`` later); the first emit at or past
    that time flushes them all, full or not."""
    flush_due = emitter._flush_due
    flush = emitter.flush
    linger_s = emitter._linger_s
    never = math.inf

    def linger(emitted_at: float) -> None:
        due = flush_due[0]
        if emitted_at >= due:
            flush()
        elif due == never:
            flush_due[0] = emitted_at + linger_s

    return linger


def make_emit(emitter: Emitter) -> EmitPair:
    """The emit closures without combine: a tuple joins the open rows of its primary, with
    its position in the mapper's stream as its seq.

    The common tuple (a key already in the slot cache, hence checked once and short, with a
    non-negative int value under 2**63) is checked inline with a few type tests; any other
    goes through :func:`smr.values.row_bytes`."""
    slot_cache_get = emitter._slot_cache.get
    find_slot = emitter._slot
    position = emitter._position
    dest_of_slot = emitter._dest_of_slot
    open_rows = emitter._open_rows
    open_bytes = emitter._open_bytes
    batch_size = emitter.batch_size
    batch_bytes = emitter.batch_bytes
    small_row_bytes, big_rows_bytes_max, fast = _byte_bounds(emitter)
    dispatch = emitter._dispatch_rows
    now = time.time
    linger = _make_linger(emitter)

    def emit_sized(key: Any, value: Any, size: int) -> None:
        slot = slot_cache_get(key)
        if slot is None:
            slot = find_slot(key)
        dest = dest_of_slot[slot]
        if size > small_row_bytes:
            held = open_bytes[dest] + size
            if held > big_rows_bytes_max:
                dispatch(dest)  # close the batch before this row would take it over
                held = size
            open_bytes[dest] = held
        seq = position[0] + 1
        position[0] = seq
        rows = open_rows[dest]
        emitted_at = now()
        rows.append((slot, seq, key, value, emitted_at))
        if len(rows) >= batch_size:
            dispatch(dest)
        else:
            linger(emitted_at)

    def emit(key: Any, value: Any) -> None:
        # A cached key was checked when cached; the class test comes first, since an
        # unhashable key cannot be looked up and True or 1.0 would find 1's entry.
        if (
            value.__class__ is int
            and not value >> 63
            and fast
            and (key.__class__ is str or key.__class__ is int)
        ):
            slot = slot_cache_get(key)
            if slot is not None:
                dest = dest_of_slot[slot]
                seq = position[0] + 1
                position[0] = seq
                rows = open_rows[dest]
                emitted_at = now()
                rows.append((slot, seq, key, value, emitted_at))
                if len(rows) >= batch_size:
                    dispatch(dest)
                else:
                    linger(emitted_at)
                return
        emit_sized(key, value, row_bytes(key, value, batch_bytes))

    return emit, emit_sized


def make_combining_emit(emitter: Emitter) -> EmitPair:
    """The emit closures with combine: a key already open in its batch is folded into it
    (only a new key adds a row, and only rows are added up by bytes). No ``linger_ms``:
    combined rows get their seqs when their batch closes, so where batches close must
    depend on the tuples only, never on time, for a rerun to give them the same identities."""
    slot_cache_get = emitter._slot_cache.get
    find_slot = emitter._slot
    dest_of_slot = emitter._dest_of_slot
    open_combined = emitter._open_combined
    open_bytes = emitter._open_bytes
    batch_size = emitter.batch_size
    batch_bytes = emitter.batch_bytes
    small_row_bytes, big_rows_bytes_max, fast = _byte_bounds(emitter)
    dispatch = emitter._dispatch_combined
    combine = emitter._combine
    assert combine is not None
    now = time.time
    counter = emitter

    def emit_sized(key: Any, value: Any, size: int) -> None:
        slot = slot_cache_get(key)
        if slot is None:
            slot = find_slot(key)
        dest = dest_of_slot[slot]
        combined = open_combined[dest]
        entry = combined.get(key)
        if entry is None:
            counter._combined_emits += 1
            if size > small_row_bytes:
                held = open_bytes[dest] + size
                if held > big_rows_bytes_max:
                    dispatch(dest)
                    held = size
                open_bytes[dest] = held
            combined[key] = [slot, value, now()]
            if len(combined) >= batch_size:
                dispatch(dest)
        else:
            try:
                entry[1] = combine(entry[1], value)
            except Exception as error:
                # Said as a bad emit, not a crash: the feeder reports the record and goes on
                # (its earlier tuples already folded in stay: combine had taken them).
                raise EmitError(
                    f"combine raised {type(error).__name__}: {error} for key {key!r}"
                ) from error
            counter._combined_emits += 1

    def emit(key: Any, value: Any) -> None:
        if (
            value.__class__ is int
            and not value >> 63
            and fast
            and (key.__class__ is str or key.__class__ is int)
            and slot_cache_get(key) is not None
        ):
            emit_sized(key, value, 0)
        else:
            emit_sized(key, value, row_bytes(key, value, batch_bytes))

    return emit, emit_sized


def make_emit_many(
    emitter: Emitter, emit_sized: Callable[[Any, Any, int], None]
) -> Callable[[Sequence[Any], Sequence[Any]], None]:
    """``emit_many(keys, values)``: check every tuple (the common one inline, as in ``emit``;
    the others by :func:`smr.values.row_bytes`), then emit them all through ``emit_sized``
    without a second look: a bad one raises :class:`smr.values.EmitError` before any is
    emitted, so they go out all or none."""
    slot_cache_get = emitter._slot_cache.get
    batch_bytes = emitter.batch_bytes
    fast = _byte_bounds(emitter)[2]

    def emit_many(keys: Sequence[Any], values: Sequence[Any]) -> None:
        if len(keys) != len(values):
            raise ValueError(f"emit_many got {len(keys)} keys and {len(values)} values")
        sizes = [
            0
            if (
                value.__class__ is int
                and not value >> 63
                and fast
                and (key.__class__ is str or key.__class__ is int)
                and slot_cache_get(key) is not None
            )
            else row_bytes(key, value, batch_bytes)
            for key, value in zip(keys, values, strict=True)
        ]
        for key, value, size in zip(keys, values, sizes, strict=True):
            emit_sized(key, value, size)

    return emit_many


def make_emit_record(
    emit_many: Callable[[Sequence[Any], Sequence[Any]], None],
) -> Callable[[Sequence[tuple[Any, Any]]], None]:
    """``emit_record(pairs)``: the pairs of one record through ``emit_many``, so they go out
    all or none (a bad one raises :class:`smr.values.EmitError` before any is emitted)."""

    def emit_record(pairs: Sequence[tuple[Any, Any]]) -> None:
        if pairs:
            keys, values = zip(*pairs, strict=True)
            emit_many(keys, values)

    return emit_record
