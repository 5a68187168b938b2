"""ZeroMQ sockets, wrapped: the only module of smr that imports ``zmq``; the real implementation
of the interfaces in :mod:`smr.transport`.

Three endpoint kinds cover every conversation:

- :class:`Inbox` (a ROUTER, bound): a node's single inbound endpoint. Mappers, peers and
  clients all send to it; replies go back to the sender's identity.
- :class:`Outbox` (a DEALER, connected): one per destination node, on mappers and clients.
- :class:`Publisher` / :class:`Subscriber` (PUB / SUB): the reducers' output stream.

Sends never block: a full or disconnected pipe makes ``send`` return False, and the caller
decides (a mapper keeps the batch and retries; a node's reply is simply re-requested by a
resend). Receives are non-blocking drains, because ``await recv()`` per message costs 3-4x
more than draining a ready socket (PERF-NOTES).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Final

import zmq
from zmq.utils.monitor import recv_monitor_message

from ring.ids import NodeId
from smr.transport import ChannelEnd, TransportError

# Socket queue bounds in messages. A mapper never has more than its window in flight per
# node, so the send bound only matters when a node is unreachable; the receive bound is the
# node's first backpressure stage: when it fills, TCP stops and the mappers' sends fail.
SEND_QUEUE_MESSAGES_MAX: Final = 1000
RECEIVE_QUEUE_MESSAGES_MAX: Final = 1000


def _context() -> zmq.Context[zmq.Socket[bytes]]:
    return zmq.Context.instance()


class Inbox:
    """A node's bound ROUTER socket: receives ``(identity, frames)``, replies by identity."""

    def __init__(self, bind_addr: str) -> None:
        self._socket = _context().socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE_MESSAGES_MAX)
        self._socket.setsockopt(zmq.SNDHWM, SEND_QUEUE_MESSAGES_MAX)
        # Unroutable replies raise instead of vanishing, so they can be counted.
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        try:
            self._socket.bind(bind_addr)
        except zmq.ZMQError as error:
            self._socket.close()
            raise TransportError(f"cannot bind {bind_addr}: {error}") from None
        self.addr: str = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._fd = int(self._socket.getsockopt(zmq.FD))

    def receive(self) -> tuple[bytes, list[bytes]] | None:
        """One waiting message as ``(sender identity, frames)``, or None if none waits."""
        try:
            parts = self._socket.recv_multipart(zmq.NOBLOCK, copy=True)
        except zmq.Again:
            return None
        return parts[0], parts[1:]

    def send(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        """Queue a reply to ``identity``; False if that peer is gone or its queue is full."""
        try:
            self._socket.send_multipart([identity, *frames], zmq.NOBLOCK)
        except (zmq.Again, zmq.ZMQError):
            return False
        return True

    async def wait_readable(self, wake: asyncio.Event) -> None:
        """Return when a message waits or ``wake`` is set.

        ZeroMQ's file descriptor is edge-triggered and reset by reading ``EVENTS``, so the
        event is cleared first and ``EVENTS`` checked second: a message that arrives in
        between raises the descriptor and sets the event through the reader callback.
        """
        wake.clear()
        if int(self._socket.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            return
        await wake.wait()

    def watch(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event) -> None:
        """Set ``wake`` whenever the socket's descriptor signals."""
        loop.add_reader(self._fd, wake.set)

    def unwatch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop watching the socket's descriptor."""
        loop.remove_reader(self._fd)

    def close(self) -> None:
        """Close the socket at once (pending messages are dropped: their senders resend)."""
        self._socket.close(linger=0)


class Outbox:
    """A DEALER connected to one node's inbox; used by mappers and clients."""

    def __init__(
        self,
        addr: str,
        send_queue_messages_max: int = SEND_QUEUE_MESSAGES_MAX,
        immediate: bool = True,
    ) -> None:
        self.addr = addr
        self._socket = _context().socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, send_queue_messages_max)
        self._socket.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE_MESSAGES_MAX)
        # With `immediate`, queue only on live connections: a send to an unreachable node
        # fails at once instead of piling up behind a connection that may never come (the
        # mappers' choice: they hold and resend). Without it, messages queue while the
        # connection is made (up to the bound), keeping their order (the nodes' choice for
        # peer messages such as snapshot chunks).
        self._socket.setsockopt(zmq.IMMEDIATE, 1 if immediate else 0)
        self._socket.setsockopt(zmq.RECONNECT_IVL, 50)
        self._socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        self._monitor: zmq.Socket[bytes] | None = None
        try:
            self._socket.connect(addr)
        except zmq.ZMQError as error:
            self._socket.close()
            raise TransportError(f"cannot connect to {addr!r}: {error}") from None

    def send(self, frames: Sequence[bytes]) -> bool:
        """Queue a message; False if not connected or the queue is full (nothing is sent)."""
        try:
            self._socket.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def receive(self) -> list[bytes] | None:
        """One waiting reply's frames, or None."""
        try:
            return self._socket.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None

    def disconnected(self) -> bool:
        """True if the connection dropped since the last call.

        A crashed process's sockets are closed by its kernel, so its peers see the drop at
        once; this is how a node suspects a crashed neighbour without waiting for the
        silence timeout (DESIGN section 6). The first call starts watching.
        """
        if self._monitor is None:
            self._monitor = self._socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            return False
        dropped = False
        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return dropped
            dropped = dropped or event["event"] == zmq.EVENT_DISCONNECTED

    def close(self) -> None:
        """Close the socket at once."""
        if self._monitor is not None:
            self._socket.disable_monitor()
            self._monitor.close(linger=0)
        self._socket.close(linger=0)


def wait_any(outboxes: Sequence[Outbox], timeout_ms: int) -> list[Outbox]:
    """Block up to ``timeout_ms`` until some outboxes have replies; returns those."""
    poller = zmq.Poller()
    for outbox in outboxes:
        poller.register(outbox._socket, zmq.POLLIN)
    ready = dict(poller.poll(timeout_ms))
    return [outbox for outbox in outboxes if outbox._socket in ready]


class Publisher:
    """A bound PUB socket. Slow subscribers lose messages (PUB semantics); the node's output
    file is the complete record, the stream is for watching."""

    def __init__(self, bind_addr: str) -> None:
        self._socket = _context().socket(zmq.PUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, SEND_QUEUE_MESSAGES_MAX)
        try:
            self._socket.bind(bind_addr)
        except zmq.ZMQError as error:
            self._socket.close()
            raise TransportError(f"cannot bind {bind_addr}: {error}") from None
        self.addr: str = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def publish(self, frames: Sequence[bytes]) -> None:
        """Send to current subscribers; never blocks."""
        # With no subscriber keeping up, by PUB's contract the message is not delivered.
        with contextlib.suppress(zmq.Again):
            self._socket.send_multipart(frames, zmq.NOBLOCK)

    def close(self) -> None:
        """Close the socket at once."""
        self._socket.close(linger=0)


class Subscriber:
    """A SUB socket connected to any number of publishers, subscribed to everything."""

    def __init__(self, addrs: Sequence[str]) -> None:
        self._socket = _context().socket(zmq.SUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SUBSCRIBE, b"")
        for addr in addrs:
            try:
                self._socket.connect(addr)
            except zmq.ZMQError as error:
                self._socket.close()
                raise TransportError(f"cannot connect to {addr!r}: {error}") from None

    def receive(self, timeout_ms: int) -> list[bytes] | None:
        """The next message's frames, or None after ``timeout_ms``."""
        if not self._socket.poll(timeout_ms, zmq.POLLIN):
            return None
        return self._socket.recv_multipart()

    def close(self) -> None:
        """Close the socket at once."""
        self._socket.close(linger=0)


class ZmqMapperTransport:
    """The emitter's transport: a DEALER :class:`Outbox` per node, queueing only on live
    connections (a mapper holds and resends)."""

    def open(self, addr: str, send_queue_messages_max: int) -> ChannelEnd:
        """Connect an outbox to ``addr``."""
        return Outbox(addr, send_queue_messages_max=send_queue_messages_max)

    def wait_any(self, ends: Sequence[ChannelEnd], timeout_ms: int) -> list[ChannelEnd]:
        """Block up to ``timeout_ms`` until some of ``ends`` have replies."""
        outboxes = [end for end in ends if isinstance(end, Outbox)]
        return list(wait_any(outboxes, timeout_ms))


class ZmqNodeLinks:
    """A node's links: replies through its :class:`Inbox`, and one :class:`Outbox` per peer
    address, opened on first use, queueing while a connection is made (peer messages such
    as snapshot chunks keep their order)."""

    def __init__(self, inbox: Inbox) -> None:
        self._inbox = inbox
        self._outboxes: dict[str, Outbox] = {}

    def _outbox(self, addr: str) -> Outbox:
        outbox = self._outboxes.get(addr)
        if outbox is None:
            outbox = self._outboxes[addr] = Outbox(addr, immediate=False)
        return outbox

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        """Reply through the inbox."""
        return self._inbox.send(identity, frames)

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        """Send to the peer at ``addr``; False if its queue is full."""
        return self._outbox(addr).send(frames)

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        """Peers whose connection dropped since the last call (connecting to them first if
        need be, so that their drops are seen)."""
        return [node for node, addr in peers if self._outbox(addr).disconnected()]

    def close(self) -> None:
        """Close every outbox."""
        for outbox in self._outboxes.values():
            outbox.close()
