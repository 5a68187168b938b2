"""The transport interface: how the node and the emitter reach other processes.

The node and the emitter depend on these protocols only; :mod:`smr.transport.zeromq` is the
real implementation (the only module of smr that imports ``zmq``), and the simulation
(:mod:`smr.sim`) implements the same protocols over a simulated network and clock.

Every send is non-blocking and says whether it was queued: ``False`` means the queue towards
that peer is at its bound (or the peer is unknown or gone), and the caller decides what to do
(a mapper keeps the batch and resends; a node counts a dropped peer message, or sends a
snapshot part again on a later step). Nothing here retries or drops in silence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from smr.ring.ids import NodeId


class TransportError(RuntimeError):
    """An endpoint could not be bound or connected (bad address, port in use)."""


class ChannelEnd(Protocol):
    """What an emitter needs of one connection to a node."""

    addr: str

    def send(self, frames: Sequence[bytes]) -> bool:
        """Queue a message; False if it was not queued (not connected, queue full)."""
        ...

    def receive(self) -> list[bytes] | None:
        """One waiting reply's frames, or None."""
        ...

    def close(self) -> None:
        """Close the connection at once."""
        ...


class MapperTransport(Protocol):
    """How an emitter reaches nodes: one channel end per node address."""

    def open(self, addr: str, send_queue_messages_max: int) -> ChannelEnd:
        """Connect to the node at ``addr``, with a send queue of at most that many messages."""
        ...

    def wait_any(self, ends: Sequence[ChannelEnd], timeout_ms: int) -> list[ChannelEnd]:
        """Block up to ``timeout_ms`` until some of ``ends`` have replies; returns those."""
        ...


class NodeLinks(Protocol):
    """How a node talks: replies to whoever sent a message, and messages to its peers.

    Guarantees asked of an implementation: messages to one peer arrive in the order sent
    (or not at all once the connection is lost, which ``dropped`` then reports); sends never
    block.
    """

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        """Send ``frames`` back to the sender ``identity``; False if it is gone or its queue
        is full."""
        ...

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        """Send ``frames`` to peer ``node`` at ``addr``; False if its queue is full."""
        ...

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        """Those of ``peers`` (node, address) whose connection dropped since the last call:
        a crashed process's connections close, which is faster evidence than silence."""
        ...
