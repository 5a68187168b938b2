"""Pure checkpoint logic of smr: per-slot keyed state, dedup hwms, deltas and their encoding.

No I/O and nothing from ``smr``: the node wires this to sockets and timers
(docs/design/architecture.md#layout).
``StateStore`` keeps a node's state in master / inactive / active fragments and drops duplicate
tuples by per-``(mapper, slot)`` high-water marks; ``swap`` / ``merge_inactive`` run the
checkpoint cycle, and ``encode_delta`` / ``decode_delta`` carry its deltas to the secondaries.
``checkpoint.replica`` and ``checkpoint.backup`` hold a secondary's replica and tuple backup of
a primary, and ``checkpoint.promote`` turns them into primary state when that primary dies.

Each name is imported from its module (``from smr.checkpoint.store import ...``): the package itself
imports nothing, so importing one of its modules loads no other.
"""
