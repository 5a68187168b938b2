"""Seeded random fault schedules within tolerance, for the simulation's sweep.

:func:`random_schedule` draws faults (:mod:`smr.faults`) from a seeded ``random.Random`` and
keeps only those that leave the schedule within tolerance
(:func:`smr.faults.tolerance.within_tolerance`),
so every schedule it returns is one the ring must survive with no acked tuple lost. Plain
data, like the faults: no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Final

from smr.faults.commands import Join, Move
from smr.faults.model import (
    Delay,
    Fault,
    FaultSchedule,
    Forge,
    Kill,
    Partition,
    Pause,
    Stall,
    Starve,
)
from smr.faults.tolerance import Tolerance, within_tolerance
from smr.ring.ids import NodeId


def random_schedule(
    rng: random.Random,
    nodes: Sequence[NodeId],
    replication: int,
    duration_ms: int,
    tolerance: Tolerance = Tolerance(),
    faults_max: int = 3,
    standby: Sequence[NodeId] = (),
) -> FaultSchedule:
    """A seeded random schedule of up to ``faults_max`` faults starting in the first 90% of
    ``duration_ms``, on a ring of ``nodes`` (in ring order).

    Guarantees: pure (the same ``rng`` state gives the same schedule); the result is within
    tolerance (:func:`within_tolerance` returns None for it). Each fault drawn is kept only
    if the schedule stays within tolerance; a fault that does not fit is drawn again a few
    times, then skipped, so a schedule may hold fewer faults than ``faults_max``.

    The faults drawn: kills; stalls of 1-3 s (a slow reduce call; never a reason to be
    declared dead); forged views (refused: nobody lost); CPU starvation of 0.5-3 s in gaps
    of up to half the safe silence (slow, not dead); pauses either short (below
    ``tolerance.silence_safe_ms``: the node must not be declared dead) or long (past
    ``tolerance.silence_lost_ms``: it is declared dead, fenced and rejoins empty); short
    partitions between a random group and the rest, or two random groups; long partitions
    between a random group and the rest (within tolerance when the side without a majority
    holds no more than ``r`` adjacent nodes); delays of up to a quarter of the safe silence;
    and, in half the schedules, one to three moves of 10-90% of a node's load to its
    clockwise neighbour, a quarter of them leaves.
    """
    if duration_ms < 10:
        raise ValueError(f"duration_ms must be at least 10, got {duration_ms}")
    if not nodes:
        raise ValueError("a schedule needs at least one node")
    safe_ms = tolerance.silence_safe_ms
    schedule = FaultSchedule()
    count = rng.randint(0, faults_max)
    for _ in range(count):
        for _attempt in range(8):
            fault = _random_fault(rng, nodes, duration_ms, tolerance, safe_ms)
            candidate = schedule.with_fault(fault)
            if within_tolerance(candidate, nodes, replication, tolerance) is None:
                schedule = candidate
                break
    # Drawn last, so that the other faults of a seed stay what they were before stalls
    # existed: a slow call of 1-3 s on a random node, in a third of the schedules.
    if rng.random() < STALL_SHARE:
        at_ms = rng.randint(0, duration_ms * 9 // 10)
        schedule = schedule.with_fault(Stall(rng.choice(nodes), at_ms, rng.randint(1000, 3000)))
    if rng.random() < FORGE_SHARE:
        at_ms = rng.randint(0, duration_ms * 9 // 10)
        schedule = schedule.with_fault(Forge(rng.choice(nodes), rng.choice(nodes), at_ms))
    if rng.random() < STARVE_SHARE:
        at_ms = rng.randint(0, duration_ms * 9 // 10)
        gap_ms = rng.randint(20, max(20, safe_ms // 2 - 10))
        starve = Starve(rng.choice(nodes), at_ms, rng.randint(500, 3000), gap_ms)
        candidate = schedule.with_fault(starve)
        if within_tolerance(candidate, nodes, replication, tolerance) is None:
            schedule = candidate
    if rng.random() < MOVE_SHARE:
        for _ in range(rng.randint(1, 3)):
            at_ms = rng.randint(0, duration_ms * 9 // 10)
            leave = rng.random() < LEAVE_SHARE
            fraction_ppm = rng.randint(100_000, 900_000)
            candidate = schedule.with_fault(Move(rng.choice(nodes), at_ms, fraction_ppm, leave))
            if within_tolerance(candidate, nodes, replication, tolerance) is None:
                schedule = candidate
    # Joins of the standby nodes, where no partition is drawn: a joiner counts for the
    # quorum on both sides of a cut, which the partition rules (on the initial ring) do not
    # know of.
    if standby and not any(isinstance(fault, Partition) for fault in schedule):
        joined_at_ms: int | None = None
        for joiner in standby:
            if rng.random() < JOIN_SHARE:
                at_ms = rng.randint(0, duration_ms * 9 // 10)
                if joined_at_ms is not None and rng.random() < TOGETHER_SHARE:
                    # Joins side by side, as a scale-out by several nodes makes them.
                    at_ms = joined_at_ms + rng.randint(0, 10)
                joined_at_ms = at_ms
                schedule = schedule.with_fault(Join(joiner, rng.choice(nodes), at_ms))
    return schedule


STALL_SHARE: Final = 1 / 3
"""The share of random schedules with one stall (a slow reduce call) in them."""
FORGE_SHARE: Final = 1 / 4
"""The share of random schedules with one forged view in them."""
STARVE_SHARE: Final = 1 / 4
"""The share of random schedules with one node starved of CPU for 0.5-3 s in them."""
MOVE_SHARE: Final = 1 / 2
"""The share of random schedules with one to three moves (operator commands) in them."""
JOIN_SHARE: Final = 3 / 4
"""The share of standby nodes asked to join, in schedules without partitions."""
TOGETHER_SHARE: Final = 1 / 2
"""The share of joins asked within 10 ms of the one before (joins side by side: a join
takes some 10 ms in the simulation)."""
LEAVE_SHARE: Final = 1 / 4
"""The share of those moves that are leaves (the whole range, and the node owns nothing)."""


def _random_fault(
    rng: random.Random,
    nodes: Sequence[NodeId],
    duration_ms: int,
    tolerance: Tolerance,
    safe_ms: int,
) -> Fault:
    at_ms = rng.randint(0, duration_ms * 9 // 10)
    node = rng.choice(nodes)
    kind = rng.choices(("kill", "pause", "partition", "delay"), weights=(3, 3, 2, 2))[0]
    if kind == "kill":
        return Kill(node, at_ms)
    if kind == "pause":
        if rng.random() < 0.5:
            return Pause(node, at_ms, rng.randint(5, safe_ms))
        lost_ms = tolerance.silence_lost_ms
        return Pause(node, at_ms, rng.randint(lost_ms + 100, lost_ms + 2000))
    if kind == "partition" and len(nodes) >= 2:
        shuffled = list(nodes)
        rng.shuffle(shuffled)
        cut = rng.randint(1, len(shuffled) - 1)
        group_a, rest = shuffled[:cut], shuffled[cut:]
        if rng.random() < 0.35:
            # Long: the group against all the rest, past the time a watcher needs to
            # declare a node dead; the side without a majority is taken over and fenced.
            lost_ms = tolerance.silence_lost_ms
            duration_ms = rng.randint(lost_ms + 100, lost_ms + 2000)
            return Partition(tuple(group_a), tuple(rest), at_ms, duration_ms)
        group_b = rest if rng.random() < 0.7 else rest[: rng.randint(1, len(rest))]
        return Partition(tuple(group_a), tuple(group_b), at_ms, rng.randint(5, safe_ms))
    extra_ms = rng.randint(1, max(1, safe_ms // 4))
    return Delay(node, at_ms, rng.randint(20, 1000), extra_ms)
