"""A simulated node's shell: its liveness, the messages waiting for it, its links
(:class:`~smr.transport.links.NodeLinks` over the simulated network) and its in-memory output."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from smr.api import Job
from smr.faults.model import Starve
from smr.node.core import NodeCore
from smr.output.files import READ_BYTES_MAX, OutputGone, OutputMissing, OutputSink
from smr.output.records import Emitted, record_line
from smr.ring.ids import NodeId
from smr.sim.clock import Scheduler
from smr.sim.config import SimConfig
from smr.sim.network import ADDR_PREFIX, Link, SimNetwork
from smr.sim.windowed import windowed_job

log = logging.getLogger("smr.sim")


class ClientEnd(Protocol):
    """A client's end of a connection to a node, as the node's links see it."""

    @property
    def identity(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    @property
    def inbound(self) -> Link: ...

    def mail_arrived(self) -> None: ...


class NodePost(Protocol):
    """What a simulated node's links ask of the run (``Simulation`` offers it): the network,
    the scheduler, a client's end by identity, and a message to another node (False when it
    cannot be sent)."""

    @property
    def network(self) -> SimNetwork: ...

    @property
    def scheduler(self) -> Scheduler: ...

    def end_of(self, identity: str) -> ClientEnd | None: ...

    def send_to_node(
        self,
        link: Link,
        identity: bytes,
        frames: Sequence[bytes],
        src_node: str | None = None,
        peer_link: bool = False,
    ) -> bool: ...


# Reducer outputs kept in memory per node for inspection (they are all counted).
OUTPUT_RECORDS_KEPT_MAX: Final = 1000


# -- nodes ------------------------------------------------------------------------------------


class MemoryOutput(OutputSink):
    """An in-memory stand-in for a node's output file: counts every record and keeps the
    last ``OUTPUT_RECORDS_KEPT_MAX`` (older ones are dropped from memory, still counted).

    With ``files`` (the output files of every node, by node id, on the one disk they share),
    it also writes its records there as the real sink does: as lines, pending until
    ``flush`` (a tick, or before a checkpoint leaves), so a node killed loses its pending
    lines; ``read`` and ``read_of`` read whole lines as :func:`smr.output.files.read_lines` does.
    Without, nothing can be read."""

    def __init__(self, node_id: str, files: dict[str, bytearray] | None = None) -> None:
        # No file: the base class would open one.
        self.node_id = node_id
        self.records: deque[Emitted] = deque(maxlen=OUTPUT_RECORDS_KEPT_MAX)
        self.records_written = 0
        self.table = None
        self._files = files
        self._lines: list[str] = []
        if files is not None:
            files.setdefault(node_id, bytearray())  # opened at start, as the real sink's

    def extend(self, records: Sequence[Emitted]) -> None:
        """Keep the records (as pending lines too, with ``files``)."""
        self.records.extend(records)
        self.records_written += len(records)
        if self._files is not None:
            node = self.node_id
            self._lines.extend(
                record_line(
                    {"node": node, "key": key, "value": value, "origin": [mapper, slot, seq, i]}
                )
                for key, value, mapper, slot, seq, i in records
            )

    def flush(self) -> None:
        """Write the pending lines to the file, with ``files``."""
        if self._lines and self._files is not None:
            file = self._files.setdefault(self.node_id, bytearray())
            file += ("\n".join(self._lines) + "\n").encode()
            self._lines.clear()

    def read(self, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """This node's lines from ``offset`` (none without ``files``)."""
        if self._files is None:
            return b"", offset, offset
        return self.read_of(self.node_id, offset, max_bytes)

    def read_of(self, node_id: str, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
        """Node ``node_id``'s lines from ``offset``; OutputMissing if there is no such
        file, OutputGone if ``offset`` is past its end."""
        data = None if self._files is None else self._files.get(node_id)
        if data is None:
            raise OutputMissing(f"this node's disk holds no output file of {node_id}")
        if offset > len(data):
            raise OutputGone(f"output offset {offset} is past the end ({len(data)} bytes)")
        if max_bytes <= 0:
            return b"", offset, len(data)
        chunk = bytes(data[offset : offset + min(max_bytes, READ_BYTES_MAX)])
        end = chunk.rfind(b"\n") + 1
        if end == 0 and offset < len(data):
            end = data.find(b"\n", offset) + 1 - offset
            chunk = bytes(data[offset : offset + max(end, 0)])
        return chunk[: max(end, 0)], offset + max(end, 0), len(data)

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
    # Slow reduce calls under way (smr.faults.model.Stall): the loop runs nothing, the heartbeat
    # thread still beats.
    stalls_active: int = 0
    # CPU starvation under way (smr.faults.model.Starve), and whether one of its gaps holds the
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
    """The :class:`~smr.transport.links.NodeLinks` of one simulated node: replies go to mapper
    channel ends, peer messages onto the simulated network, drops come from kills."""

    def __init__(self, sim: NodePost, node: SimNode) -> None:
        self._sim = sim
        self._node = node
        self._identity = f"peer:{node.node_id}".encode()

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        sim = self._sim
        end = sim.end_of(identity.decode())
        if end is None or end.closed:
            return False  # ROUTER_MANDATORY: the peer is gone
        queued = sim.network.send(end.inbound, identity, frames, self._node.node_id, None)
        if queued is None:
            return False
        for envelope in queued:
            sim.scheduler.at(envelope.deliver_at_us, end.mail_arrived)
        return True

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        if not addr.startswith(ADDR_PREFIX):
            return False
        link = self._sim.network.link(self._node.node_id, addr.removeprefix(ADDR_PREFIX))
        return self._sim.send_to_node(link, self._identity, frames, self._node.node_id, True)

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        # A drop of a peer not asked about stays to be reported when it is (as a socket
        # monitor keeps its events until read).
        asked = {peer for peer, _ in peers}
        node = self._node
        dropped = [peer for peer in node.dropped_peers if peer in asked]
        node.dropped_peers = [peer for peer in node.dropped_peers if peer not in dropped]
        return dropped


# The simulated job emits a key's count at every multiple of this.
EMIT_EVERY: Final = 50


def sim_job(emit_every: int = EMIT_EVERY) -> Job:
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


def job_of(config: SimConfig) -> Job:
    """The run's job: the windowed count of ``smr.sim.windowed`` or :func:`sim_job`."""
    return windowed_job(config) if config.windowed else sim_job()
