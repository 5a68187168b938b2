"""Placement: which live owner is primary for a slot, and which owners back it up.

`Ring` turns a `View` into the routing tables a mapper and a node use per tuple; it is built
once per view and then only read. The rules (docs/design/architecture.md#words):

- the primary of a slot is the owner with the greatest token ``<=`` slot, wrapping to the
  owner with the greatest token (the paper's "nearest counter-clockwise");
- the secondaries are the next `r` distinct owners clockwise of the primary;
- a node's range is ``[own token, next owner's token)``;
- a *joiner* (a member with status ``joining``) at token ``t`` owns nothing yet, but is an
  extra secondary of every owner whose replica set will hold it once it owns ``[t, ...)``:
  the owner ``P`` whose range holds ``t`` and the ``r - 1`` owners before ``P``. So it
  receives their tuples, snapshots and checkpoints while it catches up
  (docs/design/architecture.md#moves), and when it becomes an owner, every replica set it enters
  already has its copy.

`split_at_load_median` decides where an overloaded owner splits its range
(docs/design/architecture.md#moves).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from smr.ring.hashing import slot_count as count_slots
from smr.ring.ids import NodeId, Slot, Token
from smr.ring.view import Status, View


class Role(IntEnum):
    """What a node does with a tuple of a slot. The values are the bytes of `Ring.roles_of`."""

    NONE = 0
    """Not in the slot's replica set: reply not-owner."""
    PRIMARY = 1
    """Apply it to state."""
    SECONDARY = 2
    """Keep it in the tuple backup."""


@dataclass(frozen=True, slots=True)
class SlotRange:
    """The half-open range of `length` slots clockwise from `start`, wrapping past the top
    slot; ``length == slot_count`` is the whole ring and ``length == 0`` is empty.

    Guarantees: validated on construction (`ValueError`), so ``0 <= start < slot_count`` and
    ``0 <= length <= slot_count``.
    """

    start: Slot
    length: int
    slot_count: int

    def __post_init__(self) -> None:
        if self.slot_count < 1:
            raise ValueError(f"slot_count must be >= 1, got {self.slot_count}")
        if not 0 <= self.start < self.slot_count:
            raise ValueError(f"start must be in [0, {self.slot_count}), got {self.start}")
        if not 0 <= self.length <= self.slot_count:
            raise ValueError(f"length must be in [0, {self.slot_count}], got {self.length}")

    @property
    def end(self) -> Slot:
        """The first slot after the range (exclusive), modulo the slot count; equals `start`
        for the whole ring and for an empty range."""
        return Slot((self.start + self.length) % self.slot_count)

    @property
    def share(self) -> float:
        """The fraction of the ring the range covers, in [0, 1]."""
        return self.length / self.slot_count

    def contains(self, slot: int) -> bool:
        """Whether `slot` is one of the range's slots (False for a slot off the ring)."""
        return 0 <= slot < self.slot_count and (slot - self.start) % self.slot_count < self.length

    def covers(self, inner: SlotRange) -> bool:
        """Whether every slot of `inner` is a slot of this range (same ring)."""
        offset = (inner.start - self.start) % self.slot_count
        return inner.length <= self.length and offset + inner.length <= self.length

    def slots(self) -> Iterator[Slot]:
        """The range's slots in clockwise order, from `start`."""
        for offset in range(self.length):
            yield Slot((self.start + offset) % self.slot_count)


class Ring:
    """The placement of the slots of a ring of ``2**slot_bits`` slots onto the live owners of
    a view (members with status in `OWNING_STATUSES`).

    Built once per view, then queried: routing asks it for every tuple, so the constructor
    precomputes `primary_index_by_slot` and the queries are list lookups. Immutable by
    convention: do not modify the public attributes.

    Guarantees: every slot has exactly one primary, an owner; two owners on the same token
    split it by ``ring.view.ring_order``: the later owns the range and the other owns
    nothing (a leaving owner sorts first, so the owner that moved onto its token owns it).
    A view without owners gives a ring whose `primary` raises `LookupError`. Raises
    `ValueError` on construction if an owner's token is not a slot of this ring.
    """

    __slots__ = (
        "_index_by_owner",
        "_joiners_by_owner_index",
        "_ranges",
        "_replica_sets",
        "joiners",
        "owners",
        "primary_index_by_slot",
        "slot_bits",
        "slot_count",
        "view",
    )

    view: View
    """The view this ring places."""
    slot_bits: int
    """The ring has ``2**slot_bits`` slots."""
    slot_count: int
    """``2**slot_bits``."""
    owners: tuple[NodeId, ...]
    """The owners' ids in ring order, ``(token, node_id)``."""
    primary_index_by_slot: list[int]
    """Per slot, the index into `owners` of its primary (empty if there are no owners)."""
    joiners: tuple[NodeId, ...]
    """The joining members, in ``(token, node_id)`` order (none when there is no owner to
    join beside)."""

    def __init__(self, view: View, slot_bits: int) -> None:
        count = count_slots(slot_bits)
        members = view.owners()
        for member in members:
            if member.token >= count:
                raise ValueError(
                    f"{member.node_id!r} sits at token {member.token}, which is not a slot of "
                    f"a ring of {count} slots (slot_bits={slot_bits})"
                )
        tokens = [member.token for member in members]
        self.view = view
        self.slot_bits = slot_bits
        self.slot_count = count
        self.owners = tuple(member.node_id for member in members)
        self._index_by_owner = {node_id: index for index, node_id in enumerate(self.owners)}
        self.primary_index_by_slot = _primary_index_by_slot(tokens, count)
        self._ranges = _ranges(tokens, count)
        self._replica_sets: dict[tuple[NodeId, int], tuple[NodeId, ...]] = {}
        # Each joiner hangs off the owner whose range holds its token.
        joining = sorted(
            (m for m in view.members.values() if m.status is Status.JOINING and m.token < count),
            key=lambda member: (member.token, member.node_id),
        )
        self.joiners = tuple(m.node_id for m in joining) if members else ()
        self._joiners_by_owner_index: dict[int, list[NodeId]] = {}
        for member in joining if members else ():
            owner_index = self.primary_index_by_slot[member.token]
            self._joiners_by_owner_index.setdefault(owner_index, []).append(member.node_id)

    def primary(self, slot: Slot) -> NodeId:
        """The primary of `slot`: the owner with the greatest token ``<= slot``, wrapping.

        Raises `LookupError` if the view has no live owner, `ValueError` if `slot` is not a
        slot of this ring.
        """
        if not 0 <= slot < self.slot_count:
            raise ValueError(f"slot {slot} is not in [0, {self.slot_count})")
        if not self.owners:
            raise LookupError("no live owner in the view")
        return self.owners[self.primary_index_by_slot[slot]]

    def replica_set_of(self, owner: NodeId, r: int) -> tuple[NodeId, ...]:
        """`owner` followed by the next `r` distinct owners clockwise of it (its
        secondaries); only ``min(r, n - 1)`` of them when there are `n` owners.

        Cached per ``(owner, r)``. Raises `KeyError` if `owner` is not an owner, `ValueError`
        if ``r < 0``.
        """
        key = (owner, r)
        cached = self._replica_sets.get(key)
        if cached is not None:
            return cached
        if r < 0:
            raise ValueError(f"the replication factor r must be >= 0, got {r}")
        index = self._index_by_owner.get(owner)
        if index is None:
            raise KeyError(f"{owner!r} is not a live owner of this ring")
        n = len(self.owners)
        # Owners are distinct node ids, so the next min(r, n - 1) of them are distinct.
        replica_set = tuple(self.owners[(index + step) % n] for step in range(min(r, n - 1) + 1))
        # The joiners whose future replica sets take this owner's range in: those hanging
        # off this owner or off one of the r - 1 owners after it.
        joiners = self._joiners_by_owner_index
        if joiners and r > 0:
            extra = [
                joiner
                for step in range(min(r, n))
                for joiner in joiners.get((index + step) % n, ())
            ]
            replica_set = (*replica_set, *extra)
        self._replica_sets[key] = replica_set
        return replica_set

    def joined_owners(self, joiner: NodeId, r: int) -> tuple[NodeId, ...]:
        """The owners whose replica sets hold ``joiner`` (a joining member), nearest first:
        the owner whose range holds its token, then up to ``r - 1`` before it. Empty for a
        node that is not joining (or with ``r == 0``)."""
        n = len(self.owners)
        for owner_index, joiners in self._joiners_by_owner_index.items():
            if joiner in joiners and r > 0:
                return tuple(
                    dict.fromkeys(
                        self.owners[(owner_index - step) % n] for step in range(min(r, n))
                    )
                )
        return ()

    def predecessors(self, node_id: NodeId, r: int) -> tuple[NodeId, ...]:
        """The owners whose secondaries include `node_id`: the next ``min(r, n - 1)`` owners
        counter-clockwise of it, nearest first. These are the nodes whose tuples and state
        `node_id` backs up, and so the ones it watches for failure
        (docs/design/architecture.md#failures); for a joiner, the owners it is an extra secondary of
        (`joined_owners`), which it backs up but does not watch.

        Empty if `node_id` is neither an owner nor a joiner. Raises `ValueError` if ``r < 0``.
        """
        if r < 0:
            raise ValueError(f"the replication factor r must be >= 0, got {r}")
        index = self._index_by_owner.get(node_id)
        if index is None:
            return self.joined_owners(node_id, r)
        n = len(self.owners)
        return tuple(self.owners[(index - step) % n] for step in range(1, min(r, n - 1) + 1))

    def replicas(self, slot: Slot, r: int) -> tuple[NodeId, ...]:
        """The replica set of `slot`: its primary first, then its ``min(r, n - 1)``
        secondaries in clockwise order; all distinct.

        Raises like `primary`, and `ValueError` if ``r < 0``.
        """
        return self.replica_set_of(self.primary(slot), r)

    def range_of(self, node_id: NodeId) -> SlotRange | None:
        """The slots `node_id` is primary for, or None if it owns none (not an owner, or
        sharing its token with a later owner)."""
        index = self._index_by_owner.get(node_id)
        return None if index is None else self._ranges.get(index)

    def ranges(self) -> list[tuple[NodeId, SlotRange]]:
        """Every owner with a non-empty range, and that range, in ring order. The ranges
        partition the ring."""
        result: list[tuple[NodeId, SlotRange]] = []
        for index, node_id in enumerate(self.owners):
            slot_range = self._ranges.get(index)
            if slot_range is not None:
                result.append((node_id, slot_range))
        return result

    def role(self, node_id: NodeId, slot: Slot, r: int) -> Role:
        """What `node_id` does with a tuple of `slot` with replication factor `r`.

        Raises like `replicas`.
        """
        replica_set = self.replicas(slot, r)
        if replica_set[0] == node_id:
            return Role.PRIMARY
        if node_id in replica_set:
            return Role.SECONDARY
        return Role.NONE

    def roles_of(self, node_id: NodeId, r: int) -> bytearray:
        """`node_id`'s `Role` value for every slot, indexed by slot: the node's per-tuple
        lookup table. A fresh copy the caller may keep.

        Guarantees: ``roles_of(n, r)[s] == role(n, s, r)`` for every slot `s` (all NONE on
        a ring without owners, or for a node that is not an owner). Raises `ValueError` if
        ``r < 0``.
        """
        if r < 0:
            raise ValueError(f"the replication factor r must be >= 0, got {r}")
        table = bytearray(self.slot_count)
        if node_id not in self._index_by_owner:
            for owner in self.joined_owners(node_id, r):
                slot_range = self.range_of(owner)
                if slot_range is not None:
                    _fill(table, slot_range, Role.SECONDARY)
            return table
        for index, owner in enumerate(self.owners):
            slot_range = self._ranges.get(index)
            if slot_range is None:
                continue
            replica_set = self.replica_set_of(owner, r)
            if replica_set[0] == node_id:
                role = Role.PRIMARY
            elif node_id in replica_set:
                role = Role.SECONDARY
            else:
                continue
            _fill(table, slot_range, role)
        return table

    def __repr__(self) -> str:
        return f"Ring(slot_bits={self.slot_bits}, owners={list(self.owners)})"


def _fill(table: bytearray, slot_range: SlotRange, value: int) -> None:
    start, stop = slot_range.start, slot_range.start + slot_range.length
    if stop <= slot_range.slot_count:
        table[start:stop] = bytes([value]) * slot_range.length
    else:  # wraps past the top slot
        table[start:] = bytes([value]) * (slot_range.slot_count - start)
        table[: stop - slot_range.slot_count] = bytes([value]) * (stop - slot_range.slot_count)


def _primary_index_by_slot(tokens: Sequence[Token], count: int) -> list[int]:
    """Per slot, the index of the last token ``<= slot`` in the sorted `tokens`, wrapping
    to the last index for slots below the first token.

    Equivalent to ``(bisect_right(tokens, slot) - 1) % len(tokens)`` for every slot, but
    built segment by segment (one list repeat per owner) rather than one bisect per slot,
    which is ~50 times faster at a million slots.
    """
    n = len(tokens)
    if n == 0:
        return []
    table = [n - 1] * tokens[0]
    for index in range(n):
        stop = tokens[index + 1] if index + 1 < n else count
        # Equal tokens give an empty segment, so the last owner on a token gets its range.
        table.extend([index] * (stop - tokens[index]))
    return table


def _ranges(tokens: Sequence[Token], count: int) -> dict[int, SlotRange]:
    """Per owner index, its non-empty range: from its token to the next greater token,
    wrapping; the whole ring if all owners share one token (then only the last owns it)."""
    n = len(tokens)
    result: dict[int, SlotRange] = {}
    for index in range(n):
        if index + 1 < n and tokens[index + 1] == tokens[index]:
            continue  # a later owner on the same token owns it
        next_token = tokens[(index + 1) % n]
        length = (next_token - tokens[index]) % count or count
        result[index] = SlotRange(Slot(tokens[index]), length, count)
    return result


def grown_clockwise(old: Ring, new: Ring) -> list[NodeId]:
    """The owners of both rings whose range in ``new`` reaches past the end of their range in
    ``old``: slots they gained from a clockwise neighbour.

    Every change the ring makes keeps each owner's end where it was or moves it back: a
    takeover moves the successor's token down to the dead node's (``successor_takes_over``),
    a grant or a move hands the top of a range to the clockwise neighbour, a join inserts a
    token. Only a view that marks an owner dead with no successor moving onto its token makes
    the predecessor's range reach forward, over slots whose state the predecessor does not
    hold; such a view is forged or corrupt, and applying it would serve those slots empty.
    """
    grown: list[NodeId] = []
    for node_id in new.owners:
        before, after = old.range_of(node_id), new.range_of(node_id)
        if before is None and after is not None and _regained_with_no_takeover(old, new, node_id):
            grown.append(node_id)
            continue
        if before is None or after is None or after.end == before.end:
            continue
        if before.length == before.slot_count:
            continue  # it held the whole ring: nothing can be new to it
        # Reaching past the old end means holding the first slot after it (the range is
        # contiguous). A range whose start moved back (a takeover) while its end moved back
        # too (its top moved on) has grown counter-clockwise only.
        if after.contains(before.end):
            grown.append(node_id)
    return grown


def taken_over_in(old: Ring, new: Ring, node_id: NodeId) -> bool:
    """Whether ``new`` shows ``node_id``, an owner in ``old``, dead and its slots taken over
    by its successor, so that the node, holding ``old``, fences on it rather than refuse it.

    True when ``new`` marks it dead and an owner that is not leaving sits on its token
    (``successor_takes_over``), or its clockwise successor in ``old`` holds the slot at its
    token, on another token than in ``old``. A successor's token moves down past a node's
    only when it takes that node over; when the node's counter-clockwise neighbour died
    too, it ends on the neighbour's token, and no owner sits on the node's. Had the slot
    merely fallen back on the counter-clockwise neighbour, which holds no copy of it, its
    holder would not be the successor, or (the only owner left) would not have moved.
    """
    me = new.view.get(node_id)
    if me is None or me.status is not Status.DEAD:
        return False
    if any(o.token == me.token and o.status is not Status.LEAVING for o in new.view.owners()):
        return True
    owners = old.owners
    if node_id not in owners or len(owners) < 2 or not new.owners:
        return False
    successor = owners[(owners.index(node_id) + 1) % len(owners)]
    before, after = old.view.get(successor), new.view.get(successor)
    moved = before is not None and after is not None and after.token != before.token
    return moved and new.primary(Slot(me.token)) == successor


def _regained_with_no_takeover(old: Ring, new: Ring, node_id: NodeId) -> bool:
    """Whether ``node_id``, which owned nothing in ``old`` because another owner had moved
    onto its token (it was leaving), owns a range in ``new`` because that owner is marked
    dead *on that token* with nobody taking it over. (A receiver's switch undone by a
    death mark on its older entry marks it dead at its old token instead, and a takeover of
    it puts its successor on the shared token: both legitimate.)"""
    member = old.view.get(node_id)
    if member is None:
        return False
    for other in old.owners:
        if other == node_id:
            continue
        tied = old.view.members[other]
        if tied.token != member.token:
            continue
        now = new.view.get(other)
        if now is not None and now.status is Status.DEAD and now.token == member.token:
            return True
    return False


def split_at_load_median(rng: SlotRange, load: Mapping[Slot, float]) -> Slot:
    """Where to split `rng` so that each part carries about half its load
    (docs/design/architecture.md#moves): `split_at_load_share` with a lower part of one half."""
    return split_at_load_share(rng, load, 0.5)


def split_at_load_share(rng: SlotRange, load: Mapping[Slot, float], keep: float) -> Slot:
    """Where to split `rng` so that the lower part ``[start, s)`` carries about `keep` of
    its load and the upper part (the part a move hands over) the rest: the smallest slot `s`
    after ``rng.start`` such that ``[start, s)`` carries at least `keep` of the range's total
    load, moved back by one if that would leave the upper part empty.

    `load` maps slots to non-negative loads (tuples per second, say); slots missing from it
    carry no load, and slots outside `rng` are ignored. With no load at all, the split is at
    `keep` of the range's length.

    Guarantees: both parts ``[start, s)`` and ``[s, end)`` are non-empty, so `s` is never
    `start`; the lower part's load is at most `keep` of the total plus the largest single
    slot's load. Raises `ValueError` if the range has fewer than two slots, `keep` is not
    strictly between 0 and 1, or a load is negative or not finite.
    """
    if rng.length < 2:
        raise ValueError(f"a range of {rng.length} slot(s) cannot be split in two non-empty parts")
    if not 0.0 < keep < 1.0:
        raise ValueError(f"the share kept must be strictly between 0 and 1, got {keep}")
    loads = [float(load.get(slot, 0.0)) for slot in rng.slots()]
    for slot, value in zip(rng.slots(), loads, strict=True):
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"slot {slot} has load {value}; loads must be finite and >= 0")
    total = math.fsum(loads)
    if total == 0.0:
        offset = min(max(1, int(rng.length * keep)), rng.length - 1)
        return Slot((rng.start + offset) % rng.slot_count)
    wanted = total * keep
    cumulative = 0.0
    # The upper part must keep at least one slot: the last candidate offset is length - 1.
    offset = rng.length - 1
    for index, value in enumerate(loads[:-1]):
        cumulative += value
        if cumulative >= wanted:
            offset = index + 1
            break
    return Slot((rng.start + offset) % rng.slot_count)
