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

Each name is imported from its module (``from smr.ring.view import ...``): the package itself
imports nothing, so importing one of its modules loads no other.
"""
