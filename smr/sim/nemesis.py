"""The nemesis of a simulated run: it plays the fault schedule (kills, pauses, partitions,
delays) against the simulated nodes and network, and heals everything at the end (see
docs/design/simulation.md#network and :mod:`smr.faults` for what each fault means)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

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
from smr.node.settings import NodeSettings
from smr.ring.ids import NodeId
from smr.ring.moves import MoveRefused
from smr.sim.clock import Scheduler
from smr.sim.config import SimConfig
from smr.sim.network import SimClock, SimNetwork
from smr.sim.nodes import SimNode
from smr.wire.codec import encode, pack_body
from smr.wire.kinds import RequestId
from smr.wire.messages import ViewReply

if TYPE_CHECKING:
    from smr.node.core import NodeCore


class Stage(Protocol):
    """What the nemesis asks of the run (``Simulation`` offers it): the fault schedule, the
    scheduler, the clock, the network, the nodes, their settings, and a node's receive turn
    (``wake``) or timer (``fire``) now."""

    @property
    def schedule(self) -> FaultSchedule: ...

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def clock(self) -> SimClock: ...

    @property
    def network(self) -> SimNetwork: ...

    @property
    def nodes(self) -> Mapping[NodeId, SimNode]: ...

    @property
    def node_ids(self) -> Sequence[NodeId]: ...

    @property
    def standby_ids(self) -> Sequence[NodeId]: ...

    @property
    def settings(self) -> NodeSettings: ...

    @property
    def config(self) -> SimConfig: ...

    @property
    def tick_ms(self) -> int: ...

    def note(self, text: str) -> None: ...

    def wake(self, node: SimNode) -> None: ...

    def fire(self, node: SimNode, which: str) -> None: ...


def schedule_faults(sim: Stage) -> None:
    for fault in sim.schedule:
        sim.scheduler.at(fault.at_ms * 1000, start_fault, sim, fault)


def start_fault(sim: Stage, fault: Fault) -> None:
    sim.note(f"fault: {fault.describe().strip()}")
    if isinstance(fault, Kill):
        node = sim.nodes[fault.node]
        if node.killed:
            return
        node.killed = True
        node.core = None
        node.arrivals.clear()
        # Its sockets close: every live node sees the connection drop (a peer that never
        # connected would not, but every node gossips to every other on a view change,
        # so all are connected soon after the start). The close travels like data: it
        # arrives after what the dead node sent on that connection, and a partition
        # holds it too, so a peer never hears from a node after seeing it drop.
        for other in (*sim.node_ids, *sim.standby_ids):
            peer = sim.nodes[other]
            if other != fault.node and not peer.killed:
                seen_at_us = max(
                    sim.clock.now_us,
                    sim.network.link(fault.node, other).last_deliver_us,
                    sim.network.cut_until_us(fault.node, other),
                )
                sim.scheduler.at(seen_at_us, drop_seen, sim, peer, fault.node)
    elif isinstance(fault, Pause):
        sim.nodes[fault.node].pauses_active += 1
        sim.scheduler.at(fault.end_ms * 1000, resume, sim, sim.nodes[fault.node])
    elif isinstance(fault, Forge):
        forge(sim, fault)
    elif isinstance(fault, Move):
        move(sim, fault)
    elif isinstance(fault, Join):
        join(sim, fault)
    elif isinstance(fault, Starve):
        sim.nodes[fault.node].starves.add(fault)
        starve_gap(sim, sim.nodes[fault.node], fault)
    elif isinstance(fault, Stall):
        node = sim.nodes[fault.node]
        node.stalls_active += 1
        sim.scheduler.at(
            sim.clock.now_us + sim.settings.heartbeat_interval_ms * 1000, beat, sim, node
        )
        sim.scheduler.at(fault.end_ms * 1000, end_stall, sim, node)
    elif isinstance(fault, Partition):
        sim.network.partitions.append(fault)
        sim.scheduler.at(fault.end_ms * 1000, end_fault, sim, fault)
    else:
        sim.network.delays.append(fault)
        sim.scheduler.at(fault.end_ms * 1000, end_fault, sim, fault)


def forge(sim: Stage, fault: Forge) -> None:
    """Hand ``fault.node`` a view marking ``fault.victim`` dead with no takeover, as a client
    could push one (a VIEW message); a node not running now (killed, paused, stalled) reads
    nothing, so the forgery is skipped."""
    node = sim.nodes[fault.node]
    if not node.running or node.core is None:
        return
    core = node.core
    if core.view.get(fault.victim) is None:
        return
    forged = core.view.mark_dead(fault.victim)
    push = encode(ViewReply(RequestId(0), forged.epoch, pack_body(forged.to_wire())))
    with sim.scheduler.acting_as(fault.node):
        core.on_frames(b"forger", push)
    sim.scheduler.at(sim.clock.now_us, sim.wake, node)


def move(sim: Stage, fault: Move) -> None:
    """Ask ``fault.node`` to move (or leave), as ``smr move`` would."""
    keep = None if fault.leave else 1.0 - fault.fraction_ppm / 1_000_000
    _command(sim, fault.node, "move", lambda core: core.moves.start(keep))


def join(sim: Stage, fault: Join) -> None:
    """Ask the standby ``fault.node`` to join beside ``fault.beside``, as ``smr scale out``
    would."""
    _command(sim, fault.node, "join", lambda core: core.moves.joins.request(fault.beside))


def _command(sim: Stage, node_id: NodeId, what: str, start: Callable[[NodeCore], str]) -> None:
    """Give ``node_id`` an operator's command (``start``); a node not running now reads no
    command, and one it cannot carry out now is refused (both noted, neither a failure)."""
    node = sim.nodes[node_id]
    if not node.running or node.core is None:
        sim.note(f"{what} skipped: {node_id} is not running")
        return
    with sim.scheduler.acting_as(node_id):
        try:
            sim.note(f"{what} started: {start(node.core)}")
        except MoveRefused as refused:
            sim.note(f"{what} refused: {refused}")
    sim.scheduler.at(sim.clock.now_us, sim.wake, node)


def starve_gap(sim: Stage, node: SimNode, fault: Starve) -> None:
    """One gap of a starved node: it runs nothing, timers and heartbeat thread included (a
    pause of ``gap_ms``), then gets the CPU for one tick (``starve_turn``)."""
    if fault not in node.starves or node.killed:
        return
    if sim.clock.now_us >= fault.end_ms * 1000 or node.starve_holding:
        node.starves.discard(fault)
        return
    node.starve_holding = True
    node.pauses_active += 1
    sim.scheduler.at(sim.clock.now_us + fault.gap_ms * 1000, starve_turn, sim, node, fault)


def starve_turn(sim: Stage, node: SimNode, fault: Starve) -> None:
    """A starved node's turn with the CPU: it reads and fires its timers, for one tick."""
    if not node.starve_holding:
        return
    node.starve_holding = False
    resume(sim, node)
    sim.scheduler.at(sim.clock.now_us + sim.tick_ms * 1000, starve_gap, sim, node, fault)


def drop_seen(sim: Stage, peer: SimNode, dead: NodeId) -> None:
    if not peer.killed:
        peer.dropped_peers.append(dead)


def end_fault(sim: Stage, fault: Partition | Delay) -> None:
    if isinstance(fault, Partition) and fault in sim.network.partitions:
        sim.network.partitions.remove(fault)
        sim.note(f"healed: {fault.describe().strip()}")
    elif isinstance(fault, Delay) and fault in sim.network.delays:
        sim.network.delays.remove(fault)


def beat(sim: Stage, node: SimNode) -> None:
    """While ``node``'s loop is stalled, its heartbeat thread beats (``StalledLoopBeats``)
    every heartbeat interval. A paused or killed process runs no thread at all: a beat that
    comes due during a pause is sent when the pause ends (``resume``), as a thread's timer
    fires late when the process gets the CPU back."""
    if not node.stalls_active or node.killed or node.core is None:
        return
    if node.pauses_active:
        node.beat_due = True
    else:
        _send_stalled_beats(node)
    sim.scheduler.at(sim.clock.now_us + sim.settings.heartbeat_interval_ms * 1000, beat, sim, node)


def _send_stalled_beats(node: SimNode) -> None:
    assert node.links is not None and node.core is not None
    node.beat_due = False
    core = node.core
    stalled_ms = round((core.clock() - core.read_at) * 1000)
    stuck = stalled_ms >= core.settings.stuck_after_ms
    for peer, addr, frames in core.membership.stalled_beats(stalled_ms, stuck):
        node.links.send(peer, addr, frames)


def end_stall(sim: Stage, node: SimNode) -> None:
    """The slow call returns: the loop runs again (as after a pause)."""
    if node.stalls_active == 0:
        return
    node.stalls_active -= 1
    _carry_on(sim, node)


def resume(sim: Stage, node: SimNode) -> None:
    if node.pauses_active == 0:
        return
    node.pauses_active -= 1
    if node.beat_due and not node.pauses_active and node.stalls_active and not node.killed:
        _send_stalled_beats(node)
    _carry_on(sim, node)


def _carry_on(sim: Stage, node: SimNode) -> None:
    """A pause or a stall ended: unless another holds it, the node reads what queued and
    fires each timer that came due, once."""
    if node.pauses_active or node.stalls_active or node.killed:
        return
    sim.note(f"resumed {node.node_id}")
    missed, node.missed_timers = node.missed_timers, []
    if sim.config.timers_first_on_resume:
        for which in missed:
            sim.fire(node, which)
        sim.wake(node)
    else:
        sim.wake(node)
        for which in missed:
            sim.fire(node, which)


def heal(sim: Stage) -> None:
    """End every fault still acting: partitions and delays stop, paused nodes resume,
    and the network stops dropping and duplicating messages."""
    sim.network.partitions.clear()
    sim.network.delays.clear()
    sim.network.settings = replace(
        sim.network.settings, drop_probability=0.0, duplicate_probability=0.0
    )
    for node in sim.nodes.values():
        node.starves.clear()
        node.starve_holding = False
        while node.stalls_active:
            end_stall(sim, node)
        while node.pauses_active:
            resume(sim, node)
