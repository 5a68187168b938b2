"""The restart of a whole simulated cluster from its disks, and the check after it (steps
1 to 4 of docs/design/simulation.md#disk)."""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol

from smr.checkpoint.store import StateStore
from smr.node.core import NodeCore
from smr.node.disk import DiskError, DiskState, Restored
from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import Role
from smr.ring.view import View
from smr.sim.checks import reported_lost
from smr.sim.disk import SILENT_TODAY, SimFiles, apply_fault, disk_of
from smr.sim.nodes import SimNode
from smr.sim.readers import SimReaders
from smr.sim.run import Run

log = logging.getLogger("smr.sim")


class RestartRun(Run, Protocol):
    """What a restart asks of the run besides :class:`~smr.sim.run.Run` (``Simulation``
    offers it): the nodes and their disks, the readers, a node process started again
    (``new_core``, ``start_timers``) and run (``wake``, ``acting_as``), ``converge``."""

    @property
    def nodes(self) -> Mapping[NodeId, SimNode]: ...

    @property
    def disks(self) -> Mapping[NodeId, SimFiles]: ...

    @property
    def readers(self) -> SimReaders | None: ...

    def initial_view(self) -> View: ...

    def new_core(
        self,
        sim_node: SimNode,
        view: View,
        store: StateStore | None = None,
        restored_from_crash: bool = False,
        left_out: frozenset[NodeId] = frozenset(),
    ) -> NodeCore: ...

    def start_timers(self, sim_node: SimNode, phases: random.Random) -> None: ...

    def acting_as(self, node_id: NodeId) -> AbstractContextManager[None]: ...

    def wake(self, node: SimNode) -> None: ...

    def converge(self, deadline_us: int) -> None: ...


class Restart:
    """One restart of the whole cluster; ``tally`` counts what each restore did."""

    def __init__(self, sim: RestartRun, fault: str) -> None:
        self.sim = sim
        self.fault = fault
        self.tally: Counter[str] = Counter()
        self.target: NodeId | None = None
        self.refused: list[NodeId] = []
        # Nodes the faults had killed, started again from their (older) disks.
        self.revived: list[NodeId] = []

    def run(self) -> None:
        """Steps 1 to 4: stop, damage, restore, converge, check."""
        sim = self.sim
        rng = sim.rng("restart")
        self.target = rng.choice([node.node_id for node, _ in sim.live()])
        # 1.
        starting = self._stop_all()
        # 2.
        done = apply_fault(sim.rng("disk"), self.fault, self.target, sim.disks[self.target])
        sim.note(f"restart: every node stopped; {done}")
        # 3.
        restores = {node.node_id: self._restore(node) for node in starting}
        left_out = frozenset(self.refused)
        for node in starting:
            restore = restores[node.node_id]
            if restore is not None:
                self._start(node, rng, *restore, left_out)
        if not self._converged():
            return
        # 4.
        excused = self.check()
        if sim.readers is not None:
            sim.readers.read_all_converged(excused)

    def _stop_all(self) -> list[SimNode]:
        """Step 1: every live node stops (its last checkpoint, but for a crash), what is
        in flight is lost, each disk keeps what was synced; the nodes to start again, in
        id order: the live ones and, as 'smr cluster up' starts every node of the
        cluster, those the faults killed, from what their disks kept."""
        sim = self.sim
        live = sim.live()
        dead = [
            node
            for node_id in (*sim.node_ids, *sim.standby_ids)
            if (node := sim.nodes[node_id]).killed and node_id in sim.disks
        ]
        for node, core in live:
            stops = not (self.fault == "crash" and node.node_id == self.target)
            if stops:
                with sim.acting_as(node.node_id):
                    core.checkpoints.checkpoint()
            if core.disk is not None:
                if stops:
                    core.disk.mark_stopped()  # a clean stop, as smr.node.loop's
                core.disk.close()
        sim.network.drop_in_flight()
        starting = sorted([node for node, _ in live] + dead, key=lambda node: node.node_id)
        for node in starting:
            node.core = None
            node.arrivals.clear()
            node.dropped_peers.clear()
            node.missed_timers.clear()
            sim.disks[node.node_id].crash()
        return starting

    def _restore(self, node: SimNode) -> tuple[DiskState, Restored | None] | None:
        """Step 3's restore for one node, as smr.node.loop's: its disk and what it restored;
        None if a DiskError keeps it out (the operator then restarts the cluster
        ``--without`` it, which each node restored is told)."""
        sim = self.sim
        disk = disk_of(node.node_id, sim.disks[node.node_id])
        try:
            return disk, disk.restore()
        except DiskError as error:
            node.killed = True
            self.refused.append(node.node_id)
            self.tally["restore refused"] += 1
            sim.note(f"restart: {node.node_id} does not start: {error}")
            return None

    def _start(
        self,
        node: SimNode,
        rng: random.Random,
        disk: DiskState,
        restored: Restored | None,
        left_out: frozenset[NodeId],
    ) -> None:
        """Step 3 for one node restored, as smr.node.loop starts it."""
        sim = self.sim
        view = sim.initial_view() if restored is None else restored.view
        core = sim.new_core(
            node,
            view,
            None if restored is None else restored.store,
            restored_from_crash=restored is not None and not restored.stopped,
            left_out=left_out,
        )
        if restored is not None:
            core.disk = disk
            disk.serving(core.ring.range_of(core.node_id))
            self.tally["restored"] += 1
        if node.killed:
            node.killed = False
            self.revived.append(node.node_id)
            sim.start_timers(node, rng)
            self.tally["restored a node the faults killed"] += 1
        sim.schedule_at(sim.clock.now_us, sim.wake, node)

    def _converged(self) -> bool:
        """Run until the ring converges: True; False if it cannot because a node that did
        not start keeps its range (loud: with r = 0 nothing can take it over, and a ring of
        two owners cannot tell a dead peer from a cut; its peers say it does not answer).
        AssertionError otherwise: the views restored must agree (``smr.node.restart``)."""
        sim = self.sim
        try:
            sim.converge(sim.clock.now_us + sim.config.heal_limit_ms * 1000)
        except AssertionError as error:
            unserved = [n for n in self.refused if f"{n} owns slots in the view" in str(error)]
            if unserved:
                self.tally["restore refused, range unserved"] += 1
                sim.note(f"restart: the range of {unserved[0]} stays unserved: {error}")
                return False
            raise
        sim.note("converged after the restart")
        return True

    def check(self) -> set[str]:
        """Step 4 of docs/design/simulation.md#disk; the keys whose silent difference is a known
        limit (counted), which the readers leave out too."""
        sim = self.sim
        live = sim.live_cores()
        if not live:
            raise AssertionError("restart: no node started again")
        actual: dict[str, int] = {}
        lost: dict[NodeId, set[Slot]] = {}
        for node_id, core in live.items():
            roles = core.roles
            lost[node_id] = reported_lost(core)
            slots = [Slot(s) for s in sorted(core.store.slots()) if roles[s] == Role.PRIMARY]
            for _, key, state in core.store.items(slots):
                actual[str(key)] = state.get("count", 0)
        ring = next(iter(live.values())).ring
        excused: set[str] = set()
        silent: list[str] = []
        for key in sorted(set(sim.oracle) | set(actual)):
            if actual.get(key, 0) == sim.oracle.get(key, 0):
                continue
            slot = Slot(slot_of(key, sim.config.slot_bits))
            primary = ring.primary(slot)
            if slot in lost.get(primary, ()):
                self.tally["keys lost loudly"] += 1
                excused.add(key)
            elif (
                self.fault in SILENT_TODAY and primary == self.target and not sim.config.strict_disk
            ):
                self.tally["restore partial in silence (known)"] += 1
                excused.add(key)
            else:
                silent.append(
                    f"{key}: {actual.get(key, 0)} != oracle {sim.oracle.get(key, 0)} "
                    f"(slot {slot}, primary {primary})"
                )
        if silent:
            raise AssertionError(
                f"restart ({self.fault} on {self.target}): {len(silent)} keys differ from the "
                "oracle, and no slot of theirs is reported lost: " + "; ".join(silent[:6])
            )
        return excused
