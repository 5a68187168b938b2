"""ZeroMQ sockets, wrapped: with :mod:`smr.transport.security` (the keys), the only module of
smr that imports ``zmq``; the real implementation of the interfaces in :mod:`smr.transport`.
Every socket takes this process's keys, if it has any (:func:`use_keys`).

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
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils.monitor import recv_monitor_message

from smr.ring.ids import NodeId
from smr.transport.links import ChannelEnd, MapperTransport, TransportError
from smr.transport.security import KEYS_ENV, Keys, keys_for

# Socket queue bounds in messages. A mapper never has more than its window in flight per
# node, so the send bound only matters when a node is unreachable; the receive bound is the
# node's first backpressure stage: when it fills, TCP stops and the mappers' sends fail.
SEND_QUEUE_MESSAGES_MAX: Final = 1000
RECEIVE_QUEUE_MESSAGES_MAX: Final = 1000


def _context() -> zmq.Context[zmq.Socket[bytes]]:
    return zmq.Context.instance()


class _CountingAuthenticator(ThreadAuthenticator):
    """pyzmq's ZAP handler, counting the handshakes it refuses (a key not accepted), so that
    a process knocking without the keys shows in the node's status and metrics."""

    refused = 0

    def _send_zap_reply(
        self, request_id: bytes, status_code: bytes, status_text: bytes, user_id: str = ""
    ) -> None:
        # Every ZAP answer goes through here (pyzmq's Authenticator); 200 is the only yes.
        if status_code != b"200":
            _CountingAuthenticator.refused += 1
        super()._send_zap_reply(request_id, status_code, status_text, user_id or "anonymous")


def handshakes_refused() -> int:
    """Handshakes this process's ZAP handler refused since it started (0 without keys)."""
    return _CountingAuthenticator.refused


# The keys this process's sockets use (smr.transport.security), chosen once per process
# before its first socket: by use_keys, else from $SMR_KEYS at the first socket.
_keys: Keys | None = None
_keys_chosen = False
_authenticator: ThreadAuthenticator | None = None


def use_keys(keys: Keys | None) -> None:
    """Every socket this process opens from now on uses ``keys`` (None: no security): a
    bound socket serves with the cluster's key pair and accepts only the clients in
    ``keys.clients_dir`` (ZAP); a connected one checks the node by the cluster's public key
    and shows its client pair. Call it before the first socket; sockets already open keep
    what they had."""
    global _keys, _keys_chosen
    _keys, _keys_chosen = keys, True


def use_keys_of(cluster: str | Path | None) -> Keys | None:
    """Choose this process's keys for the cluster ``cluster`` names, and return them: for a
    directory, as :func:`smr.transport.security.keys_for` finds them (its ``keys/``, else
    ``$SMR_KEYS``, else none); for seed addresses or None, ``$SMR_KEYS``'s if set, else the
    keys this process chose already (a program that started a cluster, then reaches it by
    its addresses). KeysError if the keys found are unreadable."""
    path = Path(cluster) if cluster is not None else None
    if path is not None and path.is_dir():
        use_keys(keys_for(path))
    elif os.environ.get(KEYS_ENV) or not _keys_chosen:
        use_keys(keys_for(None))
    return _keys


def keys_hint() -> str:
    """For an error about a node that takes no connection: which keys this process showed
    (a secured node completes no handshake with a process without its keys)."""
    keys = _current_keys()
    if keys is None:
        return f"this process has no keys: a secured cluster's are in DIR/keys or ${KEYS_ENV}"
    return f"or it refused this process's keys, from {keys.directory}"


def _current_keys() -> Keys | None:
    if not _keys_chosen:
        use_keys(keys_for(None))
    return _keys


def _serve_securely(socket: zmq.Socket[bytes]) -> None:
    """A bound socket: CURVE server with the cluster's pair, clients checked by ZAP."""
    global _authenticator
    keys = _current_keys()
    if keys is None:
        return
    if keys.cluster_secret is None:
        raise TransportError(
            f"{keys.directory} holds only the cluster's public key: a node needs the "
            "cluster's own keys folder (cluster.key_secret)"
        )
    if _authenticator is None:
        # ZAP: the nodes' sockets accept a CURVE client only if its public key is one of
        # the accepted clients' (a handshake with any other fails, nothing is delivered).
        _authenticator = _CountingAuthenticator(_context())
        _authenticator.start()
        _authenticator.configure_curve(domain="*", location=str(keys.clients_dir))
    socket.curve_secretkey = keys.cluster_secret
    socket.curve_publickey = keys.cluster_public
    socket.curve_server = True


def _connect_securely(socket: zmq.Socket[bytes]) -> None:
    """A connected socket: CURVE client of the cluster's key, with this process's pair."""
    keys = _current_keys()
    if keys is None:
        return
    socket.curve_serverkey = keys.cluster_public
    socket.curve_publickey = keys.client_public
    socket.curve_secretkey = keys.client_secret


def stop_security() -> None:
    """Stop the ZAP thread, if this process started one (a node, before it exits)."""
    global _authenticator
    if _authenticator is not None:
        _authenticator.stop()
        _authenticator = None


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
            _serve_securely(self._socket)
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
            _connect_securely(self._socket)
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
        silence timeout (docs/design/architecture.md#failures). The first call starts watching.
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

    def watch_replies(self, poller: zmq.Poller) -> None:
        """Have ``poller`` watch this outbox for replies (:func:`wait_any`)."""
        poller.register(self._socket, zmq.POLLIN)

    def has_replies(self, ready: Mapping[Any, int]) -> bool:
        """Whether ``ready`` (what ``poller.poll`` returned, as a dict) holds a reply for it."""
        return self._socket in ready

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
        outbox.watch_replies(poller)
    ready = dict(poller.poll(timeout_ms))
    return [outbox for outbox in outboxes if outbox.has_replies(ready)]


class Publisher:
    """A bound PUB socket. Slow subscribers lose messages (PUB semantics); the node's output
    file is the complete record, the stream is for watching."""

    def __init__(self, bind_addr: str) -> None:
        self._socket = _context().socket(zmq.PUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, SEND_QUEUE_MESSAGES_MAX)
        try:
            _serve_securely(self._socket)
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
        _connect_securely(self._socket)
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


def zeromq_mapper_transport() -> MapperTransport:
    """The real mapper transport (ZeroMQ), the emitter's default."""
    return ZmqMapperTransport()
