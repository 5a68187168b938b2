"""Node links from plain functions, for tests that drive a NodeCore by hand."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ring.ids import NodeId


def _refuse(node: NodeId, frames: Sequence[bytes]) -> bool:
    return False


@dataclass
class CallbackLinks:
    """A :class:`smr.transport.NodeLinks` whose replies and peer sends call the functions
    given; no connection ever drops."""

    reply_to: Callable[[bytes, Sequence[bytes]], bool]
    send_to: Callable[[NodeId, Sequence[bytes]], bool] = _refuse

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        return self.reply_to(identity, frames)

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        return self.send_to(node, frames)

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        return []
