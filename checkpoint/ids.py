"""Distinct id types and the shapes of keyed state, shared by the store and the deltas.

A tuple's identity is ``(mapper_id, slot, seq)``: seqs start at 1 and strictly increase per
``(mapper_id, slot)``, so a high-water mark (hwm) of 0 means "nothing applied yet".
``Slot`` itself belongs to the ring (``ring.ids``) and is re-exported here for convenience.
"""

from typing import Any, NewType, TypeAlias

from smr.ring.ids import Slot

MapperId = NewType("MapperId", str)
"""A mapper's stable identity, e.g. ``"query-7/partition-3"``; a restarted feeder is a new id."""

Seq = NewType("Seq", int)
"""Position of a tuple in its ``(mapper_id, slot)`` stream; the first tuple has seq 1."""

CheckpointNumber = NewType("CheckpointNumber", int)
"""A primary's checkpoint counter, per incarnation, from 1 (0: none taken yet); a secondary
that sees one skipped asks for a snapshot instead of applying a delta on a hole."""

Key: TypeAlias = str | int
"""A reducer key as it appears in state: a string, or an int."""

FieldValue: TypeAlias = Any
"""The value of one field of a key's state (ideally a scalar or a tuple, see PERF-NOTES)."""

KeyState: TypeAlias = dict[str, Any]
"""A key's state: field name -> value, e.g. ``{"count": 3}`` (docs/design/architecture.md#state, two
levels)."""

Fragment: TypeAlias = dict[Slot, dict[Key, dict[str, Any]]]
"""slot -> key -> field -> value; in a delta or an unmerged fragment a value may be TOMBSTONE."""

__all__ = [
    "CheckpointNumber",
    "FieldValue",
    "Fragment",
    "Key",
    "KeyState",
    "MapperId",
    "Seq",
    "Slot",
]
