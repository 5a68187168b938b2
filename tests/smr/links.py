"""Node links from plain functions, for tests that drive a NodeCore by hand, and mapper
transports for tests that drive an Emitter: one whose nodes ack at once, one whose nodes
can all be down for a while, one that only keeps what is sent."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from smr.ring.ids import Epoch, NodeId
from smr.wire.codec import decode, encode
from smr.wire.messages import Ack, Batch, Message


def _refuse(node: NodeId, frames: Sequence[bytes]) -> bool:
    return False


@dataclass
class CallbackLinks:
    """A :class:`smr.transport.links.NodeLinks` whose replies and peer sends call the functions
    given; no connection ever drops."""

    reply_to: Callable[[bytes, Sequence[bytes]], bool]
    send_to: Callable[[NodeId, Sequence[bytes]], bool] = _refuse

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        return self.reply_to(identity, frames)

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        return self.send_to(node, frames)

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        return []


class _AckingEnd:
    """A channel end that acks every batch at once and keeps its bodies; while its node is
    down (``up[0]`` False) what it is sent is lost."""

    def __init__(
        self, addr: str, bodies: list[tuple[int, bytes]], up: list[bool] | None = None
    ) -> None:
        self.addr = addr
        self._bodies = bodies
        self._up = [True] if up is None else up
        self._replies: list[list[bytes]] = []

    def send(self, frames: Sequence[bytes]) -> bool:
        message = decode(frames)
        if isinstance(message, Batch) and self._up[0]:
            self._bodies.append((message.n, message.body))
            self._replies.append(encode(Ack(message.stream, message.chan, Epoch(1))))
        return True

    def receive(self) -> list[bytes] | None:
        return self._replies.pop(0) if self._replies else None

    def close(self) -> None:
        pass


@dataclass
class AckingTransport:
    """A :class:`smr.transport.links.MapperTransport` whose nodes ack every batch at once;
    ``bodies`` holds ``(tuple count, body)`` of every batch sent, in order."""

    bodies: list[tuple[int, bytes]] = field(default_factory=list)

    def open(self, addr: str, send_queue_messages_max: int) -> _AckingEnd:
        return _AckingEnd(addr, self.bodies)

    def wait_any(self, ends: Sequence[Any], timeout_ms: int) -> list[Any]:
        return [end for end in ends if end._replies]


@dataclass
class OutageTransport:
    """A :class:`smr.transport.links.MapperTransport` whose nodes ack every batch at once while
    they are up (``up[0]``) and lose what they are sent while down; a wait that finds no
    reply takes its whole timeout on ``now``, the emitter's clock."""

    now: list[float]
    up: list[bool] = field(default_factory=lambda: [True])

    def open(self, addr: str, send_queue_messages_max: int) -> _AckingEnd:
        return _AckingEnd(addr, [], self.up)

    def wait_any(self, ends: Sequence[Any], timeout_ms: int) -> list[Any]:
        ready = [end for end in ends if end._replies]
        if not ready:
            self.now[0] += timeout_ms / 1000
        return ready


class RecordingEnd:
    """A channel end that keeps what the emitter sends: the transport, not node logic."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.sent: list[Message] = []

    def send(self, frames: Sequence[bytes]) -> bool:
        self.sent.append(decode(frames))
        return True

    def receive(self) -> list[bytes] | None:
        return None

    def close(self) -> None:
        pass


class RecordingTransport:
    """A :class:`smr.transport.links.MapperTransport` of `RecordingEnd` s, one per address: no
    reply ever comes unless a test hands one to the emitter."""

    def __init__(self) -> None:
        self.ends: dict[str, RecordingEnd] = {}

    def open(self, addr: str, send_queue_messages_max: int) -> RecordingEnd:
        return self.ends.setdefault(addr, RecordingEnd(addr))

    def wait_any(self, ends: Sequence[Any], timeout_ms: int) -> list[Any]:
        return []
