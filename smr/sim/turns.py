"""When each simulated node runs: :class:`NodeTurns` owns the run's node shells
(:class:`~smr.sim.nodes.SimNode`), starts their processes (a real ``NodeCore`` each), fires
their tick and checkpoint timers, and takes their receive turns, calling the node's two entry
points as :mod:`smr.node.loop` does (docs/design/simulation.md#turns)."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Final

from smr.checkpoint.store import StateStore
from smr.node.core import TICK_MS, NodeCore, Timer
from smr.node.settings import NodeSettings
from smr.ring.ids import NodeId
from smr.ring.view import View
from smr.sim.clock import Scheduler
from smr.sim.config import SimConfig
from smr.sim.disk import SimFiles, disk_of
from smr.sim.network import Envelope, SimNetwork
from smr.sim.nodes import MemoryOutput, NodePost, SimNode, SimNodeLinks, job_of
from smr.wire.codec import decode, header_of
from smr.wire.kinds import FrameError

# A node's receive loop handles one background step (a snapshot chunk per pending snapshot)
# per cycle; a cycle costs this much virtual time, so a long snapshot takes time to send.
BACKGROUND_STEP_US: Final = 20


def tick_ms_of(settings: NodeSettings) -> int:
    """The nodes' tick period under ``settings``."""
    return min(TICK_MS, settings.heartbeat_interval_ms // 2)


class NodeTurns:
    """The run's nodes (started ones and standbys, in id order) and when each runs.

    Guarantees: a node takes a turn only while it runs (started, not killed, paused or
    stalled); a turn reads the messages arrived by now in (time, sender, order on its link)
    order; a timer that comes due while the node is held fires once when it runs again (the
    nemesis fires it); every period and phase is in virtual time, the phases seeded.
    """

    def __init__(
        self,
        config: SimConfig,
        settings: NodeSettings,
        scheduler: Scheduler,
        network: SimNetwork,
        node_ids: Sequence[NodeId],
        trace: Callable[[str], None] | None = None,
    ) -> None:
        self._config = config
        self._settings = settings
        self._scheduler = scheduler
        self._clock = scheduler.clock
        self._network = network
        self._node_ids = tuple(node_ids)
        self._trace = trace
        self._nodes: dict[NodeId, SimNode] = {}
        # Each node's simulated disk, when the run restarts from them (smr.sim.disk).
        self.disks: dict[NodeId, SimFiles] = {}
        # Every node's output file, on the disk they share, when the run has a subscriber.
        self.output_files: dict[str, bytearray] = {}

    @property
    def nodes(self) -> Mapping[NodeId, SimNode]:
        """Every node's shell, by id (killed ones included)."""
        return self._nodes

    @property
    def tick_ms(self) -> int:
        """The nodes' tick period."""
        return tick_ms_of(self._settings)

    def start_nodes(self, view: View, post: NodePost, phases: random.Random) -> None:
        """Start every node with ``view``, its links over ``post``, its timers at seeded
        ``phases``."""
        for node_id in self._node_ids:
            sim_node = SimNode(node_id, None)
            sim_node.links = SimNodeLinks(post, sim_node)
            self._nodes[node_id] = sim_node
            self.new_core(sim_node, view)
            self.start_timers(sim_node, phases)

    def new_core(
        self,
        sim_node: SimNode,
        view: View,
        store: StateStore | None = None,
        restored_from_crash: bool = False,
        left_out: frozenset[NodeId] = frozenset(),
    ) -> NodeCore:
        """A node process starting (again): a new core for ``sim_node``, with ``view`` and
        the ``store`` restored from its disk, if any (``restored_from_crash``: no clean stop
        after it; ``left_out``: the nodes the restart did not start); with its simulated
        disk when the run restarts (``smr.sim.disk``)."""
        node_id = sim_node.node_id
        assert sim_node.links is not None
        config = self._config
        settings = self._settings
        if left_out:
            settings = replace(settings, restart_left_out=frozenset(left_out))
        core = NodeCore(
            node_id,
            job_of(config),
            view,
            config.slot_bits,
            sim_node.links,
            MemoryOutput(node_id, self.output_files if config.keeps_output else None),
            clock=self._clock.seconds,
            settings=settings,
            store=store,
            restored_from_crash=restored_from_crash,
        )
        if config.restart_fault is not None:
            files = self.disks.setdefault(node_id, SimFiles())
            core.disk = disk_of(node_id, files)
            if store is None:
                # As smr.node.loop starts a node: a first generation before it answers, so
                # a node without one at a restart lost it (smr.cluster.local.state_missing).
                core.disk.write_snapshot(core.store, core.view, core.ring.range_of(node_id))
        sim_node.core = core
        return core

    def start_timers(self, sim_node: SimNode, phases: random.Random) -> None:
        """The node's tick and checkpoint timers, from now, at seeded phases."""
        now_us = self._clock.now_us
        tick_us = self.tick_ms * 1000
        checkpoint_us = self._config.checkpoint_interval_ms * 1000
        self._scheduler.at(now_us + phases.randint(1, tick_us), self._timer, sim_node, "tick")
        self._scheduler.at(
            now_us + phases.randint(1, checkpoint_us), self._timer, sim_node, "checkpoint"
        )

    def live(self) -> list[tuple[SimNode, NodeCore]]:
        """The live nodes and their cores, in id order."""
        return [
            (node, node.core)
            for node_id in self._node_ids
            if (node := self._nodes[node_id]).core is not None and not node.killed
        ]

    def live_cores(self) -> dict[NodeId, NodeCore]:
        """The live nodes' cores (killed ones are gone), by node id, in id order."""
        return {node.node_id: core for node, core in self.live()}

    def wake(self, node: SimNode) -> None:
        """One receive turn of the node (``NodeCore.receive_turn``, as the real loop runs
        it), reading the messages that have arrived by now; another turn is scheduled soon
        if work or arrived messages are left."""
        core = node.core
        if core is None or not node.running:
            return
        now = self._clock.now_us
        arrivals = node.arrivals

        def receive() -> tuple[bytes, Sequence[bytes]] | None:
            if not arrivals or arrivals[0][0] > now:
                return None
            _, _, seq, link = heapq.heappop(arrivals)
            envelope = link.queue.popleft()
            assert envelope.seq == seq, "per-link order broken"
            self._network.stats.delivered += 1
            if self._trace is not None:
                self._trace_message(node.node_id, envelope)
            return envelope.identity, envelope.frames

        with self._scheduler.acting_as(node.node_id):
            work_left = core.receive_turn(receive)
            ready = bool(arrivals) and arrivals[0][0] <= now
            capped_s = core.ingest.capped_wait_s
            if work_left or (ready and (capped_s is None or not core.ingest.inbox_full)):
                self._scheduler.at(now + BACKGROUND_STEP_US, self.wake, node)
            elif capped_s is not None:
                # Batches held back by the apply rate cap (and, with the inbox full, the
                # messages behind them): the real loop sleeps until the cap lets them
                # through (smr.node.loop), then takes another turn.
                wait_us = max(BACKGROUND_STEP_US, round(capped_s * 1e6))
                self._scheduler.at(now + wait_us, self.wake, node)

    def _trace_message(self, node_id: NodeId, envelope: Envelope) -> None:
        assert self._trace is not None
        try:
            message = decode(envelope.frames)
            what = f"{message.kind.name} {header_of(message)}"
        except FrameError as error:
            what = f"bad frame: {error}"
        sender = envelope.identity.decode(errors="replace")
        self._trace(f"{self._clock.now_ms:10.3f} ms  {sender} -> {node_id}: {what}")

    def _timer(self, node: SimNode, which: str) -> None:
        if node.killed or node.core is None:
            return
        if node.pauses_active or node.stalls_active:
            # asyncio's sleep ends during the pause (or the slow call); the timer fires once
            # on resume.
            if which not in node.missed_timers:
                node.missed_timers.append(which)
            return
        self.fire(node, which)

    def fire(self, node: SimNode, which: str) -> None:
        """The node's timer ``which`` (``tick``, ``checkpoint``) fires now; the next one is
        due a period later, and the node takes a receive turn now."""
        core = node.core
        assert core is not None
        timer = Timer(which)
        with self._scheduler.acting_as(node.node_id):
            core.on_timer(timer)
        if timer is Timer.TICK:
            period_us = self.tick_ms * 1000
        else:
            period_us = self._config.checkpoint_interval_ms * 1000
        self._scheduler.at(self._clock.now_us + period_us, self._timer, node, which)
        self._scheduler.at(self._clock.now_us, self.wake, node)
