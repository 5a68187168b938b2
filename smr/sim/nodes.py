"""A simulated node's shell: its liveness, the messages waiting for it, its links
(:class:`~smr.transport.NodeLinks` over the simulated network) and its in-memory output."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from smr.api import Job
from smr.faults import Starve
from smr.node import NodeCore
from smr.output import Emitted, OutputSink
from smr.ring.ids import NodeId

if TYPE_CHECKING:
    from smr.sim.simulation import Simulation

from smr.sim.network import ADDR_PREFIX, Link

log = logging.getLogger("smr.sim")


# Reducer outputs kept in memory per node for inspection (they are all counted).
OUTPUT_RECORDS_KEPT_MAX: Final = 1000


# -- nodes ------------------------------------------------------------------------------------


class MemoryOutput(OutputSink):
    """An in-memory stand-in for a node's output file: counts every record and keeps the
    last ``OUTPUT_RECORDS_KEPT_MAX`` (older ones are dropped from memory, still counted)."""

    def __init__(self, node_id: str) -> None:  # no file: the base class would open one
        self.node_id = node_id
        self.records: deque[Emitted] = deque(maxlen=OUTPUT_RECORDS_KEPT_MAX)
        self.records_written = 0
        self.table = None

    def extend(self, records: Sequence[Emitted]) -> None:
        """Keep the records."""
        self.records.extend(records)
        self.records_written += len(records)

    def flush(self) -> None:
        """Nothing to write."""

    def read(self, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """Nothing to read: the simulation keeps records in memory only."""
        return b"", offset, offset

    def close(self) -> bool:
        """Nothing to close."""
        return True


@dataclass
class SimNode:
    """A node and its simulated shell: liveness, the messages waiting for it, its timers."""

    node_id: NodeId
    core: NodeCore | None
    killed: bool = False
    pauses_active: int = 0
    # Slow reduce calls under way (smr.faults.Stall): the loop runs nothing, the heartbeat
    # thread still beats.
    stalls_active: int = 0
    # CPU starvation under way (smr.faults.Starve), and whether one of its gaps holds the
    # node now (as one of pauses_active).
    starves: set[Starve] = field(default_factory=set)
    starve_holding: bool = False
    # A heartbeat of the stalled loop's thread came due while the process was paused.
    beat_due: bool = False
    # (deliver_at_us, sender, seq on its link, link) for every message waiting on a link to
    # this node: read in time order, and at one instant by sender name, so that the order in
    # which senders happened to send at one instant does not matter.
    arrivals: list[tuple[int, str, int, Link]] = field(default_factory=list)
    missed_timers: list[str] = field(default_factory=list)
    # Peers whose connection to this node dropped, not yet reported to the core.
    dropped_peers: list[NodeId] = field(default_factory=list)
    links: SimNodeLinks | None = None

    @property
    def running(self) -> bool:
        return (
            self.core is not None
            and not self.killed
            and self.pauses_active == 0
            and self.stalls_active == 0
        )


class SimNodeLinks:
    """The :class:`~smr.transport.NodeLinks` of one simulated node: replies go to mapper
    channel ends, peer messages onto the simulated network, drops come from kills."""

    def __init__(self, sim: Simulation, node: SimNode) -> None:
        self._sim = sim
        self._node = node
        self._identity = f"peer:{node.node_id}".encode()

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        sim = self._sim
        end = sim._ends.get(identity.decode())
        if end is None or end.closed:
            return False  # ROUTER_MANDATORY: the peer is gone
        queued = sim.network.send(end.inbound, identity, frames, self._node.node_id, None)
        if queued is None:
            return False
        for envelope in queued:
            sim._schedule(envelope.deliver_at_us, sim._mail_to_end, end)
        return True

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        if not addr.startswith(ADDR_PREFIX):
            return False
        link = self._sim.network.link(self._node.node_id, addr.removeprefix(ADDR_PREFIX))
        return self._sim._send_to_node(link, self._identity, frames, self._node.node_id, True)

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        # A drop of a peer not asked about stays to be reported when it is (as a socket
        # monitor keeps its events until read).
        asked = {peer for peer, _ in peers}
        node = self._node
        dropped = [peer for peer in node.dropped_peers if peer in asked]
        node.dropped_peers = [peer for peer in node.dropped_peers if peer not in dropped]
        return dropped


def sim_job(emit_every: int = 50) -> Job:
    """Word count: ``state["count"]`` per word; emits the count at every multiple of
    ``emit_every`` (so the output path runs too)."""

    def count(key: Any, value: Any, state: dict[str, Any], emit: Callable[..., None]) -> None:
        total = state.get("count", 0) + value
        state["count"] = total
        if total % emit_every == 0:
            emit(key, total)

    def add(a: int, b: int) -> int:
        return a + b

    return Job("simcount", map=lambda record, emit: None, reduce=count, combine=add)
