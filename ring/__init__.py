"""The ring: pure placement logic of smr, with no I/O and no dependency on the rest of smr.

- `ring.ids`: `NodeId`, `Slot`, `Token`.
- `ring.hashing`: keys to slots (`slot_of`), slot counts, evenly spaced tokens.
- `ring.member`: a node's `Member` entry and its `Status`, checked field by field.
- `ring.view`: the membership `View` of `Member` entries, merge by precedence, ring
  order, and the range changes nodes compute: `successor_takes_over`, `grant_range`,
  `hand_over_all` (a leave), `joining_at` and `join_view` (a join), `with_status`.
- `ring.placement`: `Ring`, the per-view routing tables (primary, replicas, ranges, roles;
  joiners as extra secondaries), `grown_clockwise`, and the load-share splits.
- `ring.moves`: who takes part in a move, a leave or a join (`plan_move`, `plan_join`) and
  the view it ends in (`moved_view`, `move_done_in`).
- `ring.zones`: fault zones: `spread_order` (where owners sit), `join_position`,
  `one_zone_ranges`.
"""

from smr.ring.hashing import (
    HASH_SEED,
    SLOT_BITS_DEFAULT,
    SLOT_BITS_MAX,
    SLOT_BITS_MIN,
    check_slot_bits,
    even_tokens,
    hash64,
    key_bytes,
    slot_count,
    slot_of,
)
from smr.ring.ids import NodeId, Slot, Token
from smr.ring.placement import Ring, Role, SlotRange, split_at_load_median
from smr.ring.view import (
    INCARNATION_LIMIT,
    OWNING_STATUSES,
    TOKEN_LIMIT,
    VERSION_LIMIT,
    Member,
    Status,
    View,
    grant_range,
    successor_takes_over,
)

__all__ = [
    "HASH_SEED",
    "INCARNATION_LIMIT",
    "OWNING_STATUSES",
    "SLOT_BITS_DEFAULT",
    "SLOT_BITS_MAX",
    "SLOT_BITS_MIN",
    "TOKEN_LIMIT",
    "VERSION_LIMIT",
    "Member",
    "NodeId",
    "Ring",
    "Role",
    "Slot",
    "SlotRange",
    "Status",
    "Token",
    "View",
    "check_slot_bits",
    "even_tokens",
    "grant_range",
    "hash64",
    "key_bytes",
    "slot_count",
    "slot_of",
    "split_at_load_median",
    "successor_takes_over",
]
