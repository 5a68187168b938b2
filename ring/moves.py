"""Range moves: which nodes a move of a range to the clockwise neighbour involves, and the
view it ends in (docs/design/architecture.md#moves). Pure functions, so that the node, the
simulation and the property tests decide alike.

A move hands the top ``[split, end)`` of a giver's range (or all of it: a leave) to the
giver's clockwise neighbour, the receiver, which already holds a replica of those slots and
their tuples: it is a promotion, not a transfer. The replica set of the moving slots changes
from ``giver, N1 .. Nr`` to ``N1 .. Nr, N(r+1)``: one node, the copy holder ``N(r+1)``, holds
no copy before the move and must hold one after. It gets one first (a snapshot of the moving
slots, then the giver's checkpoints), so that the moving slots never have fewer than
``r + 1`` copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from smr.ring.ids import NodeId, Slot, Token
from smr.ring.placement import Ring, SlotRange
from smr.ring.view import Status, View, grant_range, hand_over_all, join_view


class MoveRefused(ValueError):
    """A move that cannot be made on this ring; the message says why."""


@dataclass(frozen=True, slots=True)
class MovePlan:
    """Who takes part in one move, and what moves.

    Guarantees (from `plan_move`): ``giver``, ``receiver`` and ``copy_holder`` are three
    distinct owners; ``receiver`` is the giver's clockwise neighbour and ``copy_holder``
    the ``r + 1``-th owner clockwise of the giver; ``moving`` is a non-empty part of the
    giver's range that ends where it ends (all of it when ``leave``). From `plan_join`:
    the receiver is the joiner, and its own copy holder.
    """

    giver: NodeId
    receiver: NodeId
    copy_holder: NodeId
    moving: SlotRange
    leave: bool
    join: bool = False
    """A join: the receiver is a joining node (an extra secondary of the giver, see
    ``ring.placement``), which is its own copy holder."""

    @property
    def split(self) -> Slot:
        """The first moving slot: where the receiver's token goes."""
        return self.moving.start


def plan_move(ring: Ring, giver: NodeId, r: int, split: Slot | None) -> MovePlan:
    """The move of ``[split, end)`` of `giver`'s range to its clockwise neighbour, or of the
    whole range when `split` is None (a leave).

    Raises `MoveRefused` saying why when the move cannot keep ``r + 1`` copies of every
    slot: ``r`` is 0 (the receiver holds no copy to promote), the ring has fewer than
    ``r + 2`` owners (the copy holder would be the giver itself, or a leave would leave fewer
    than ``r + 1`` owners), `giver` owns no range, or `split` is not strictly inside it.
    """
    if r < 1:
        raise MoveRefused(
            "a move needs replication r >= 1: it promotes the receiver's copy of the range"
        )
    owners = ring.owners
    if ring.joiners:
        raise MoveRefused(
            f"{', '.join(ring.joiners)} is joining the ring: moves wait until it has joined"
        )
    own = ring.range_of(giver)
    if own is None:
        raise MoveRefused(f"{giver} owns no range")
    if len(owners) < r + 2:
        raise MoveRefused(
            f"a ring of {len(owners)} owners cannot move a range at r = {r}: it needs at least "
            f"{r + 2}, so that the moving slots keep {r + 1} copies throughout"
        )
    index = owners.index(giver)
    receiver = owners[(index + 1) % len(owners)]
    copy_holder = owners[(index + r + 1) % len(owners)]
    if split is None:
        moving = own
    else:
        offset = (split - own.start) % ring.slot_count
        if not 0 < offset < own.length:
            raise MoveRefused(
                f"split {split} is not strictly inside {giver}'s range "
                f"[{own.start}, {own.end}) of {own.length} slots"
            )
        moving = SlotRange(split, own.length - offset, ring.slot_count)
    return MovePlan(giver, receiver, copy_holder, moving, split is None)


def plan_join(ring: Ring, joiner: NodeId, r: int) -> MovePlan:
    """The move that ends the join of `joiner`, a joining member at token ``t``: the owner
    whose range holds ``t`` gives ``[t, end)`` of it to the joiner.

    Raises `MoveRefused` if ``r`` is 0 (the joiner would hold no copy), `joiner` is not a
    joining member of the ring, or its token is its owner's token (nothing to split).
    """
    if r < 1:
        raise MoveRefused("a join needs replication r >= 1: the joiner catches up as a replica")
    member = ring.view.get(joiner)
    if member is None or joiner not in ring.joiners:
        raise MoveRefused(f"{joiner} is not joining the ring")
    giver = ring.primary(Slot(member.token))
    own = ring.range_of(giver)
    assert own is not None
    offset = (member.token - own.start) % ring.slot_count
    if not 0 < offset < own.length:
        raise MoveRefused(f"{joiner}'s token {member.token} does not split {giver}'s range")
    moving = SlotRange(Slot(member.token), own.length - offset, ring.slot_count)
    return MovePlan(giver, joiner, joiner, moving, False, True)


def join_blocked_by(ring: Ring, giver: NodeId, r: int) -> NodeId | None:
    """A joiner that keeps `giver` from taking a joiner of its own now, or None.

    Joins run side by side unless one's switch would change the owners another backs up. A
    joiner beside owner ``Q`` is an extra secondary of ``Q`` and of the ``r - 1`` owners
    before it, and its switch puts it just clockwise of ``Q``: a joiner beside `giver` would
    fall among those owners, or the other way round, exactly when ``Q`` is `giver` itself
    or fewer than ``r`` owners away from it in either direction. For ``r = 1`` that is only
    `giver` itself. Raises `KeyError` if `giver` is not an owner.
    """
    owners = ring.owners
    n = len(owners)
    at = owners.index(giver) if giver in owners else None
    if at is None:
        raise KeyError(f"{giver!r} is not a live owner of this ring")
    for joiner in ring.joiners:
        beside = ring.joined_owners(joiner, max(1, r))
        if not beside:
            continue
        distance = (owners.index(beside[0]) - at) % n
        if min(distance, n - distance) < max(1, r):
            return joiner
    return None


def moved_view(view: View, plan: MovePlan) -> View:
    """The view once `plan` is done: the receiver's token at the split (and, for a leave,
    the giver on standby; for a join, the joiner up at its token). Written by the receiver,
    which alone raises its entry's version."""
    if plan.join:
        return join_view(view, plan.receiver)
    if plan.leave:
        return hand_over_all(view, plan.giver)
    return grant_range(view, plan.giver, Token(plan.split))


def move_done_in(view: View, plan: MovePlan) -> bool:
    """Whether `view` shows `plan` done: the receiver's entry sits at the split (only the
    receiver writes its token, and only to finish the move; for a leave, a takeover of the
    giver's range by the receiver puts it there too, which for the copies held is the
    same). A receiver marked dead keeps the token it had: dead or alive, it tells."""
    receiver = view.get(plan.receiver)
    if receiver is None or int(receiver.token) != int(plan.split):
        return False
    return not plan.join or receiver.status is not Status.JOINING
