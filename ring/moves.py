"""Range moves: which nodes a move of a range to the clockwise neighbour involves, and the
view it ends in (DESIGN section 7). Pure functions, so that the node, the simulation and the
property tests decide alike.

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

from ring.ids import NodeId, Slot, Token
from ring.placement import Ring, SlotRange
from ring.view import View, grant_range, hand_over_all


class MoveRefused(ValueError):
    """A move that cannot be made on this ring; the message says why."""


@dataclass(frozen=True, slots=True)
class MovePlan:
    """Who takes part in one move, and what moves.

    Guarantees (from `plan_move`): ``giver``, ``receiver`` and ``copy_holder`` are three
    distinct owners; ``receiver`` is the giver's clockwise neighbour and ``copy_holder``
    the ``r + 1``-th owner clockwise of the giver; ``moving`` is a non-empty part of the
    giver's range that ends where it ends (all of it when ``leave``).
    """

    giver: NodeId
    receiver: NodeId
    copy_holder: NodeId
    moving: SlotRange
    leave: bool

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


def moved_view(view: View, plan: MovePlan) -> View:
    """The view once `plan` is done: the receiver's token at the split (and, for a leave,
    the giver on standby). Written by the receiver, which alone raises its entry's version."""
    if plan.leave:
        return hand_over_all(view, plan.giver)
    return grant_range(view, plan.giver, Token(plan.split))


def move_done_in(view: View, plan: MovePlan) -> bool:
    """Whether `view` shows `plan` done: the receiver's entry sits at the split (only the
    receiver writes its token, and only to finish the move; for a leave, a takeover of the
    giver's range by the receiver puts it there too, which for the copies held is the
    same). A receiver marked dead keeps the token it had: dead or alive, it tells."""
    receiver = view.get(plan.receiver)
    return receiver is not None and int(receiver.token) == int(plan.split)
