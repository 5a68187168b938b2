"""Pure checkpoint logic of smr: per-slot keyed state, dedup hwms, deltas and their encoding.

No I/O and nothing from ``smr``: the node wires this to sockets and timers
(docs/design/architecture.md#layout).
``StateStore`` keeps a node's state in master / inactive / active fragments and drops duplicate
tuples by per-``(mapper, slot)`` high-water marks; ``swap`` / ``merge_inactive`` run the
checkpoint cycle, and ``encode_delta`` / ``decode_delta`` carry its deltas to the secondaries.
``checkpoint.replica`` and ``checkpoint.backup`` hold a secondary's replica and tuple backup of
a primary, and ``checkpoint.promote`` turns them into primary state when that primary dies.
"""

from smr.checkpoint.delta import (
    DELTA_BYTES_MAX_DEFAULT,
    DELTA_FORMAT_VERSION,
    EXT_NESTING_MAX,
    TOMBSTONE,
    Delta,
    DeltaError,
    Tombstone,
    decode_delta,
    encode_delta,
)
from smr.checkpoint.ids import FieldValue, Fragment, Key, KeyState, MapperId, Seq
from smr.checkpoint.store import FAILURE_EXAMPLES_MAX, BatchOutcome, ReduceFn, StateStore

__all__ = [
    "DELTA_BYTES_MAX_DEFAULT",
    "DELTA_FORMAT_VERSION",
    "EXT_NESTING_MAX",
    "FAILURE_EXAMPLES_MAX",
    "TOMBSTONE",
    "BatchOutcome",
    "Delta",
    "DeltaError",
    "FieldValue",
    "Fragment",
    "Key",
    "KeyState",
    "MapperId",
    "ReduceFn",
    "Seq",
    "StateStore",
    "Tombstone",
    "decode_delta",
    "encode_delta",
]
