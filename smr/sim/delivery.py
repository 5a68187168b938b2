"""Message delivery to the simulated nodes and their clients: :class:`Delivery` puts a message
for a node on its link (:class:`~smr.sim.network.SimNetwork`: latency, bounds, partitions,
delays, drops, duplicates) and into the node's arrivals, and has the node take a receive turn
when it arrives; replies go to the client end registered under their identity
(docs/design/simulation.md#network)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence

from smr.ring.ids import NodeId
from smr.sim.clock import Scheduler
from smr.sim.network import Link, SimNetwork
from smr.sim.nodes import ClientEnd, SimNode


class Delivery:
    """The way into the nodes over the simulated network, and the clients' ends.

    Guarantees: a message to a node that is not there or killed fails at once for a client
    (``ZMQ_IMMEDIATE``) and queues unread for a peer; one the network accepts for a live
    node is read by that node's turn at its delivery time, in per-link order.
    """

    def __init__(
        self,
        network: SimNetwork,
        scheduler: Scheduler,
        nodes: Mapping[NodeId, SimNode],
        wake: Callable[[SimNode], None],
    ) -> None:
        """``nodes`` are the nodes messages go to; ``wake(node)`` is its receive turn."""
        self.network = network
        self.scheduler = scheduler
        self._nodes = nodes
        self._wake = wake
        self._ends: dict[str, ClientEnd] = {}

    def connect(self, end: ClientEnd) -> None:
        """Register a client's end: replies to its identity go to it."""
        self._ends[end.identity] = end

    def end_of(self, identity: str) -> ClientEnd | None:
        """The client's end registered as ``identity`` (``connect``), if any."""
        return self._ends.get(identity)

    def send_to_node(
        self,
        link: Link,
        identity: bytes,
        frames: Sequence[bytes],
        src_node: str | None = None,
        peer_link: bool = False,
    ) -> bool:
        """A message to the node at the end of ``link`` from a client (``src_node`` None) or
        from the node ``src_node`` (over a peer link when ``peer_link``); False if it cannot
        be sent (the node is down, or the link is full)."""
        target = self._nodes.get(NodeId(link.dst))
        if target is None:
            self.network.stats.refused_unreachable += 1
            return False
        if target.killed and not peer_link:
            # A mapper's outbox queues only on live connections (ZMQ_IMMEDIATE).
            self.network.stats.refused_unreachable += 1
            return False
        queued = self.network.send(link, identity, frames, src_node, link.dst)
        if queued is None:
            return False
        if target.killed:
            return True  # queued on a connection nobody will read
        for envelope in queued:
            heapq.heappush(target.arrivals, (envelope.deliver_at_us, link.src, envelope.seq, link))
            self.scheduler.at(envelope.deliver_at_us, self._wake, target)
        return True

    def settle(self) -> None:
        """Run until every message sent so far has arrived (and been read, unless its
        node is paused or dead)."""
        clock = self.scheduler.clock
        self.scheduler.run_to(max(clock.now_us, self.network.last_delivery_us()))
