"""How much a fault schedule may take away and still lose nothing: :class:`Tolerance` (the
failure detector's timings), :func:`within_tolerance`, :func:`lost_nodes` and
:func:`exposed_sides` (docs/design/architecture.md#loss). Plain data: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from smr.faults.commands import Join, Move
from smr.faults.model import Delay, Fault, FaultSchedule, Kill, Partition, Pause, Starve
from smr.ring.ids import NodeId


@dataclass(frozen=True)
class Tolerance:
    """The failure detector's timings, in milliseconds, and what they let through.

    The defaults are those of docs/design/architecture.md
    (``smr.node.settings.NodeSettings``) with the node's 50 ms timer tick.
    A watcher declares a node dead only after hearing nothing from it for at least
    ``failure_timeout_ms + probe_timeout_ms`` (a dropped connection; on silence alone, a
    suspicion of ``suspicion_timeout_ms`` more, or longer); a node sends a heartbeat to its
    watchers every ``heartbeat_interval_ms`` (on a tick, so up to one tick late).
    """

    failure_timeout_ms: int = 500
    probe_timeout_ms: int = 200
    suspicion_timeout_ms: int = 300
    heartbeat_interval_ms: int = 100
    tick_ms: int = 50

    @property
    def heartbeat_gap_ms(self) -> int:
        """The longest silence between two heartbeats of a healthy node, plus a tick of
        slack for the network."""
        return self.heartbeat_interval_ms + 2 * self.tick_ms

    @property
    def silence_safe_ms(self) -> int:
        """The longest silence window that cannot get a node declared dead, with margin:
        the watcher's silence is the window plus one heartbeat gap, and it must stay below
        the failure timeout alone (not even a probe is then sent)."""
        return self.failure_timeout_ms - self.heartbeat_gap_ms

    @property
    def silence_lost_ms(self) -> int:
        """A silence window at least this long gets the node declared dead for sure (with
        a healthy watcher that hears a majority, of a node not busy): the failure timeout,
        the probe timeout, the suspicion and two ticks."""
        return (
            self.failure_timeout_ms
            + self.probe_timeout_ms
            + self.suspicion_timeout_ms
            + 2 * self.tick_ms
        )


def _silence_windows(
    schedule: FaultSchedule,
    node: str,
    tolerance: Tolerance,
    exposed: Sequence[tuple[Partition, tuple[NodeId, ...]]] = (),
) -> list[tuple[int, int]]:
    """The merged silence windows ``(start_ms, end_ms)`` of ``node`` (see the module doc);
    ``exposed`` lists the partitions with their exposed side: one with ``node`` on that side
    is a silence window."""
    # Each window with the delay or starvation it comes from, if any.
    windows: list[tuple[int, int, Delay | Starve | None]] = []
    delays: list[Delay | Starve] = []
    for fault in schedule:
        if isinstance(fault, Pause) and fault.node == node:
            windows.append((fault.at_ms, fault.end_ms, None))
        elif isinstance(fault, Delay | Starve) and fault.node == node:
            delays.append(fault)
            windows.append((fault.at_ms, fault.at_ms + 2 * fault.lateness_ms, fault))
    for partition, side in exposed:
        if node in side:
            windows.append((partition.at_ms, partition.end_ms, None))
    # A delay (or a starved CPU) lengthens every other window it overlaps by the round trip
    # it adds. (A delay's own window counts it again, as its onset may meet a late beat; a
    # starved node beats after every gap, so its window is its gaps alone.)
    stretched = []
    for start, end, source in windows:
        extra = sum(
            2 * d.lateness_ms
            for d in delays
            if d.at_ms <= end and start <= d.end_ms and not (d is source and isinstance(d, Starve))
        )
        stretched.append((start, end + extra))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(stretched):
        if merged and start - merged[-1][1] < tolerance.heartbeat_gap_ms:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def exposed_sides(
    partition: Partition,
    nodes: Sequence[NodeId],
    owners_min: int,
    gone: Iterable[NodeId] = (),
) -> list[tuple[NodeId, ...]]:
    """The groups of ``partition`` whose nodes the other side may declare dead: those whose
    other side, with the nodes in neither group but not those ``gone`` (killed before the
    partition began: they answer nobody), can be a strict majority of ``owners_min`` owners
    (``ring.failure.may_declare_dead``; contacts counted high, owners low).

    Guarantees: at most one group when every node is in one of the groups and
    ``owners_min`` is ``len(nodes)`` (two disjoint sides cannot both be majorities).
    """
    rest = set(nodes) - set(partition.group_a) - set(partition.group_b) - set(gone)
    sides = []
    for side, other in (
        (partition.group_a, partition.group_b),
        (partition.group_b, partition.group_a),
    ):
        if 2 * len(set(other) | rest) > owners_min:
            sides.append(side)
    return sides


def _leaves_the_ring(fault: Fault) -> TypeGuard[Kill | Move]:
    """A kill, or a leave: the node owns nothing afterwards, and the ring closes over it."""
    return isinstance(fault, Kill) or (isinstance(fault, Move) and fault.leave)


def _lost_with(
    schedule: FaultSchedule,
    nodes: Sequence[NodeId],
    tolerance: Tolerance,
    exposed: Sequence[tuple[Partition, tuple[NodeId, ...]]],
) -> set[str]:
    """The killed nodes, and those with a silence window longer than the safe silence."""
    lost: set[str] = {fault.node for fault in schedule if _leaves_the_ring(fault)}
    for node in nodes:
        windows = _silence_windows(schedule, node, tolerance, exposed)
        if any(end - start > tolerance.silence_safe_ms for start, end in windows):
            lost.add(node)
    return lost


def lost_nodes(
    schedule: FaultSchedule, nodes: Sequence[NodeId], tolerance: Tolerance = Tolerance()
) -> list[NodeId]:
    """The nodes the schedule may lose (module doc), in the order of ``nodes``.

    Guarantees: a superset of the nodes that can end up killed or fenced, for any timing of
    the failure detector within ``tolerance``.

    1. Start with no partition side exposed.
    2. For each partition, count the owners low: every node but those the *other* faults
       may lose (with the exposures found so far; the nodes a partition itself gets taken
       over are invisible to the side that cannot reach them, so they do not count for
       it), and find its exposed sides.
    3. Repeat until no new side is exposed (more lost nodes mean fewer owners, so more
       exposure: it only grows, so this ends); the lost nodes are the kills and the nodes
       with too long a silence window, exposed sides included.
    """
    partitions = [fault for fault in schedule if isinstance(fault, Partition)]
    # 1.
    exposed: list[tuple[int, Partition, tuple[NodeId, ...]]] = []
    while True:
        # 2.
        now_exposed = []
        for index, partition in enumerate(partitions):
            others = [(p, side) for i, p, side in exposed if i != index]
            owners_min = len(nodes) - len(_lost_with(schedule, nodes, tolerance, others))
            gone = [f.node for f in schedule if _leaves_the_ring(f) and f.at_ms <= partition.at_ms]
            for side in exposed_sides(partition, nodes, owners_min, gone):
                now_exposed.append((index, partition, side))
        # 3.
        if now_exposed == exposed:
            break
        exposed = now_exposed
    lost = _lost_with(schedule, nodes, tolerance, [(p, side) for _, p, side in exposed])
    return [node for node in nodes if node in lost]


def within_tolerance(
    schedule: FaultSchedule,
    nodes: Sequence[NodeId],
    replication: int,
    tolerance: Tolerance = Tolerance(),
) -> str | None:
    """None if ``schedule`` is within tolerance for a ring of ``nodes`` (in ring order) with
    replication ``replication``; otherwise why not, in words.

    Also refuses faults that name a node not in ``nodes``.
    """
    known = set(nodes)
    for fault in schedule:
        if isinstance(fault, Partition):
            targets: tuple[str, ...] = (*fault.group_a, *fault.group_b)
        elif isinstance(fault, Join):
            targets = (fault.beside,)  # the joiner is a standby node, not in the ring
        else:
            targets = (fault.node,)
        unknown = sorted(set(targets) - known)
        if unknown:
            return f"{fault.describe().strip()} names nodes not in the ring: {unknown}"
    lost = set(lost_nodes(schedule, nodes, tolerance))
    if len(lost) >= len(nodes):
        return f"every node may be lost: {sorted(lost)}"
    # The longest run of lost nodes in ring order, wrapping (at least one node is not lost,
    # so starting just after a node that is not lost covers every run).
    count = len(nodes)
    start = next(i for i in range(count) if nodes[i] not in lost) + 1
    run: list[str] = []
    longest: list[str] = []
    for offset in range(count):
        node = nodes[(start + offset) % count]
        if node in lost:
            run.append(node)
            if len(run) > len(longest):
                longest = list(run)
        else:
            run = []
    if len(longest) > replication:
        return (
            f"{len(longest)} ring-adjacent nodes may be lost ({' '.join(longest)}), more "
            f"than the replication factor r={replication} tolerates"
        )
    return None
