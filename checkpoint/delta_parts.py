"""A delta cut in parts (docs/design/architecture.md#state): a checkpoint shipped as several
messages of whole slots (:func:`split_delta`), and the part about some slots a move's copy
holder applies (:func:`restrict_delta`). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Container, Iterator
from itertools import chain

from smr.checkpoint.delta import Delta
from smr.checkpoint.ids import MapperId, Seq

__all__ = ["restrict_delta", "split_delta"]


def restrict_delta(delta: Delta, slots: Container[int]) -> Delta:
    """The part of ``delta`` about ``slots``: what a copy of only those slots applies (the
    copy a move's copy holder keeps of the moving slots, fed by the giver's checkpoints)."""
    return Delta(
        states={slot: keys for slot, keys in delta.states.items() if slot in slots},
        hwms={slot: vector for slot, vector in delta.hwms.items() if slot in slots},
        retired=delta.retired,
        watermarks={slot: mark for slot, mark in delta.watermarks.items() if slot in slots},
    )


def split_delta(delta: Delta, keys_per_part: int) -> Iterator[tuple[Delta, bool]]:
    """``delta`` cut into parts of about ``keys_per_part`` keys (and hwm-only slots) each,
    in order, as ``(part, last)``: a primary ships a big checkpoint as several messages, so
    neither it nor a secondary spends one long stretch of its loop on it.

    Guarantees: every slot of ``delta`` is in exactly one part, with its states, its hwm
    vector and its watermark, so a replica that applied some of the parts holds, slot by
    slot, a state and the hwms and watermark it matches (of this checkpoint or of the one
    before); the retired mappers ride in the last part; applying the parts in order equals
    applying ``delta``. There is always at least one part (an empty delta is one empty
    part). The parts share ``delta``'s maps: read-only, like it. Parts are built as they
    are asked for.
    """
    if keys_per_part < 1:
        raise ValueError(f"keys_per_part must be >= 1, got {keys_per_part}")
    states, hwms, watermarks = delta.states, delta.hwms, delta.watermarks
    part = Delta(states={}, hwms={})
    size = 0
    full: Delta | None = None
    others = [slot for slot in chain(hwms, watermarks) if slot not in states]
    for slot in chain(states, dict.fromkeys(others)):
        keys = states.get(slot)
        if keys is not None:
            part.states[slot] = keys
            size += len(keys)
        vector = hwms.get(slot)
        if vector is not None:
            part.hwms[slot] = vector
        mark = watermarks.get(slot)
        if mark is not None:
            part.watermarks[slot] = mark
        size += 1
        if size >= keys_per_part:
            # One part is held back, so that the last one is known to be last when sent.
            if full is not None:
                yield full, False
            full, part, size = part, Delta(states={}, hwms={}), 0
    if full is not None and part.is_empty():
        yield _with_retired(full, delta.retired), True
        return
    if full is not None:
        yield full, False
    yield _with_retired(part, delta.retired), True


def _with_retired(part: Delta, retired: dict[MapperId, Seq]) -> Delta:
    return Delta(part.states, part.hwms, retired, part.watermarks)
