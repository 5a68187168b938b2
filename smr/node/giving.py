"""The record of a move a node gives (``smr.node.moves``): where it stands, who answered,
what was refused meanwhile; a move in words; and whether the ring still plans it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from smr.checkpoint.ids import CheckpointNumber
from smr.ring.ids import NodeId
from smr.ring.moves import MovePlan, MoveRefused, plan_move
from smr.ring.placement import Ring, SlotRange
from smr.wire.kinds import MoveNumber, StreamId


class Step(StrEnum):
    """Where the move a node gives stands (the protocol's steps)."""

    PROPOSED = "proposed"
    COPYING = "copying"
    DRAINING = "draining"
    FINAL = "final"
    COMMITTED = "committed"


@dataclass
class Giving:
    """The move this node gives (at most one at a time)."""

    number: MoveNumber
    plan: MovePlan
    step: Step
    started_at: float
    step_at: float
    accepted: set[NodeId] = field(default_factory=set)
    copied_through: int = -1
    final: CheckpointNumber | None = None
    frozen_at: float | None = None
    commit_sent_at: float = -1e9
    # This node's peer bytes sent when the move began (its record counts those it cost).
    peer_bytes_at_start: int = 0
    # The mappers' channels refused during the freeze: told the outcome (step 7 or 8).
    refused: set[tuple[bytes, StreamId]] = field(default_factory=set)


def describe(plan: MovePlan) -> str:
    """A move in words, for logs and status."""
    moving = plan.moving
    what = "its whole range" if plan.leave else f"slots [{moving.start}, {moving.end})"
    return (
        f"{plan.giver} gives {what} ({moving.length} slots) to {plan.receiver}, "
        f"{plan.copy_holder} holding a copy"
    )


def still_planned(ring: Ring, replication: int, plan: MovePlan) -> bool:
    """Whether this node's ``ring`` still plans ``plan`` (same receiver, copy holder, slots)."""
    try:
        again = plan_move(ring, plan.giver, replication, None if plan.leave else plan.split)
    except MoveRefused:
        return False
    return again == plan


def holds(ring: Ring, me: NodeId, moving: SlotRange) -> bool:
    """Whether this node's (``me``) own range in ``ring`` still covers ``moving``."""
    own = ring.range_of(me)
    return own is not None and own.covers(moving)
