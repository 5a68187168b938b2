"""The body of a tuple batch: columns, encoded once and sent to every replica
(docs/design/architecture.md#data-path).

``n`` little-endian ``uint32`` slots, ``n`` ``uint64`` seqs and ``n`` ``float64``
timestamps (fixed width, so their types need no per-tuple check and a secondary reads slots
and seqs without decoding the rest), then msgpack ``[keys, values]`` (decoded into
:class:`BatchColumns`). A tuple's identity is ``(mapper id, slot, seq)``
(docs/design/architecture.md#words).
Every decode raises :class:`~smr.wire.kinds.FrameError` (and nothing else) on malformed input.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from smr.checkpoint.bulk import BatchInBytes, Columns
from smr.checkpoint.ids import MapperId, Seq
from smr.native import NATIVE
from smr.ring.ids import Slot
from smr.wire.codec import unpack_msgpack
from smr.wire.kinds import FrameError

_LITTLE_ENDIAN = sys.byteorder == "little"


@dataclass(frozen=True, slots=True)
class BatchColumns:
    """The tuples of one batch as columns; row ``i`` is tuple ``(keys[i], values[i], ts[i])``
    of slot ``slots[i]`` with sequence number ``seqs[i]``."""

    slots: Sequence[Slot]
    seqs: Sequence[Seq]
    keys: Sequence[str | int]
    values: Sequence[Any]
    ts: Sequence[float]

    def __len__(self) -> int:
        return len(self.keys)

    def applied_as(self, mapper: MapperId) -> Columns:
        """The batch as ``checkpoint.bulk`` applies it, from ``mapper``."""
        return (mapper, self.slots, self.seqs, self.keys, self.values)


@dataclass(frozen=True, slots=True)
class EncodedBatch:
    """A batch kept in its wire bytes for a fold that reads them (a lone count's or sum's:
    ``checkpoint.bulk.apply_folds``), known valid (:func:`foldable_body` said so): its slots
    and seqs decoded (:func:`decode_batch_ids`), its keys and values only if a fold asks
    (:meth:`columns`)."""

    body: bytes
    count: int
    slot_count: int
    slots: Sequence[int]
    seqs: Sequence[int]

    def __len__(self) -> int:
        return self.count

    def applied_as(self, mapper: MapperId) -> BatchInBytes:
        """The batch as ``checkpoint.bulk`` applies it, from ``mapper``: in its bytes."""
        return (mapper, self)

    def columns(self) -> tuple[Sequence[int], Sequence[int], Sequence[str | int], Sequence[Any]]:
        """``(slots, seqs, keys, values)``, decoded (:func:`decode_batch_body`)."""
        decoded = decode_batch_body(self.body, self.count, self.slot_count)
        return decoded.slots, decoded.seqs, decoded.keys, decoded.values


def foldable_body(body: bytes, count: int, slot_count: int) -> bool:
    """Whether the compiled fold of a count's or a sum's turn reads the body straight from
    its bytes (``smr._native.body_folds``): then it is valid, as :func:`decode_batch_body`
    would find it, every key a ``str`` or an ``int``, every value an ``int`` within the
    64-bit signed range. False says nothing more (or the compiled module is not in force):
    decode the body, which validates it."""
    return NATIVE is not None and bool(NATIVE.body_folds(body, count, slot_count))


def decode_primary_batch(
    body: bytes,
    count: int,
    slot_count: int,
    ids: tuple[array[int], array[int]],
    keep_bytes: bool,
) -> BatchColumns | EncodedBatch:
    """A batch of a primary's slots as intake holds it until applied: in its bytes when
    ``keep_bytes`` (the job's fold reads them: ``smr.node.reducer.Reducer.folds_bodies``)
    and the body is one that fold reads whole (:func:`foldable_body`: valid then), else
    decoded and validated (:func:`decode_batch_body`: :class:`FrameError` if malformed).
    ``ids``: the body's slots and seqs as :func:`decode_batch_ids` returned them."""
    if keep_bytes and foldable_body(body, count, slot_count):
        return EncodedBatch(body, count, slot_count, *ids)
    return decode_batch_body(body, count, slot_count, ids)


def encode_batch_body(
    slots: Sequence[int],
    seqs: Sequence[int],
    keys: Sequence[str | int],
    values: Sequence[Any],
    ts: Sequence[float],
) -> bytes:
    """Encode the columns of a batch once; the same bytes go to every replica. In compiled
    code when ``smr.native`` has it (the same bytes as :func:`encode_batch_body_python`)."""
    if NATIVE is not None:
        body: bytes | None = NATIVE.encode_body(slots, seqs, keys, values, ts)
        if body is not None:
            return body
    return encode_batch_body_python(slots, seqs, keys, values, ts)


def encode_batch_body_python(
    slots: Sequence[int],
    seqs: Sequence[int],
    keys: Sequence[str | int],
    values: Sequence[Any],
    ts: Sequence[float],
) -> bytes:
    """:func:`encode_batch_body` in Python: the reference."""
    slot_array = array("I", slots)
    seq_array = array("Q", seqs)
    ts_array = array("d", ts)
    if not _LITTLE_ENDIAN:
        for column in (slot_array, seq_array, ts_array):
            column.byteswap()
    payload: bytes = msgpack.packb([list(keys), list(values)], use_bin_type=True)
    return b"".join((slot_array.tobytes(), seq_array.tobytes(), ts_array.tobytes(), payload))


def decode_batch_ids(body: bytes, count: int, slot_count: int) -> tuple[array[int], array[int]]:
    """Only the slots and seqs of a batch body, without decoding keys and values.

    A secondary backs a batch up by its raw bytes and needs just these two columns to know
    when a checkpoint covers it. Raises :class:`FrameError` if the columns are malformed.
    """
    if len(body) < 12 * count:
        raise FrameError(f"batch body of {len(body)} bytes is too short for {count} tuples")
    slots = array("I")
    seqs = array("Q")
    slots.frombytes(body[: 4 * count])
    seqs.frombytes(body[4 * count : 12 * count])
    if not _LITTLE_ENDIAN:
        slots.byteswap()
        seqs.byteswap()
    if NATIVE is not None:
        problem: str | None = NATIVE.ids_problem(body, count, slot_count)
    else:
        problem = ids_problem_python(slots, seqs, slot_count)
    if problem is not None:
        raise FrameError(problem)
    return slots, seqs


def ids_problem_python(slots: Sequence[int], seqs: Sequence[int], slot_count: int) -> str | None:
    """What is wrong with a batch's slots and seqs (the highest slot out of range first,
    then a seq of 0), or None: the reference of ``smr._native.ids_problem``."""
    if slots and max(slots) >= slot_count:
        return f"slot {max(slots)} out of range (slot count {slot_count})"
    if seqs and min(seqs) < 1:
        return "sequence numbers start at 1"
    return None


def decode_batch_body(
    body: bytes,
    count: int,
    slot_count: int,
    ids: tuple[array[int], array[int]] | None = None,
) -> BatchColumns:
    """:func:`decode_batch_body_python`'s answer, in compiled code when ``smr.native`` has
    it (the same columns, the same :class:`FrameError` for the same input; ``ids`` then
    unused: the compiled decode reads the two columns itself)."""
    if NATIVE is not None:
        try:
            decoded = NATIVE.decode_body(body, count, slot_count)
        except ValueError as error:
            raise FrameError(str(error)) from None
        if decoded is not None:
            slots, seqs, keys, values = decoded
            ts = array("d")
            ts.frombytes(body[12 * count : 20 * count])
            if not _LITTLE_ENDIAN:
                ts.byteswap()
            return BatchColumns(slots, seqs, keys, values, ts)
    return decode_batch_body_python(body, count, slot_count, ids)


def decode_batch_body_python(
    body: bytes,
    count: int,
    slot_count: int,
    ids: tuple[array[int], array[int]] | None = None,
) -> BatchColumns:
    """Decode and validate a batch body (the reference).

    Layout: ``count`` little-endian ``uint32`` slots, ``count`` ``uint64`` seqs, ``count``
    ``float64`` timestamps, then msgpack ``[keys, values]``. ``ids``, if given, are the
    body's slots and seqs as :func:`decode_batch_ids` returned them (not decoded again).

    Guarantees: every column has ``count`` rows, every slot is ``< slot_count``, every seq
    ``>= 1``, every key a ``str`` or an ``int``. Raises :class:`FrameError` otherwise.
    """
    if len(body) < 20 * count:
        raise FrameError(f"batch body of {len(body)} bytes is too short for {count} tuples")
    slots, seqs = ids if ids is not None else decode_batch_ids(body, count, slot_count)
    ts = array("d")
    ts.frombytes(body[12 * count : 20 * count])
    if not _LITTLE_ENDIAN:
        ts.byteswap()
    columns = unpack_msgpack(body[20 * count :], "batch body")
    if not isinstance(columns, tuple) or len(columns) != 2:
        raise FrameError("batch body must end with [keys, values]")
    keys, values = columns
    if not (isinstance(keys, tuple) and isinstance(values, tuple)):
        raise FrameError("batch keys and values must be arrays")
    if len(keys) != count or len(values) != count:
        raise FrameError(f"batch columns do not all hold the announced {count} tuples")
    if count:
        key_types = set(map(type, keys))
        if not key_types <= {str, int}:
            bad = sorted(t.__name__ for t in key_types - {str, int})
            raise FrameError(f"keys must be str or int, got {', '.join(bad)}")
    # Lists, not arrays: the apply path walks them more than once, and a list hands out
    # the same int objects each time instead of making them anew.
    return BatchColumns(slots.tolist(), seqs.tolist(), keys, values, ts)  # type: ignore[arg-type]
