"""A NodeCore in process for the roles' tests that need the core around them: node a of
the two-node view of ``tests.smr.node.test_core.Harness``, with r = 1 (it backs up b, whose
range it covers from the start) and the peer messages it sends kept in ``sent``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from smr.node.core import NodeCore
from smr.node.settings import NodeSettings
from smr.output.files import OutputSink
from smr.ring.ids import NodeId
from smr.ring.placement import SlotRange
from smr.wire.codec import decode
from smr.wire.messages import Message
from tests.smr.links import CallbackLinks
from tests.smr.node.test_core import JOB, SLOT_BITS, Harness

A, B = NodeId("a"), NodeId("b")


class Secondary(Harness):
    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.sent: list[tuple[NodeId, Message]] = []
        output = OutputSink("a", tmp_path / "a2.jsonl", self.published.append)
        self.core = NodeCore(
            A,
            JOB,
            self.view,
            SLOT_BITS,
            CallbackLinks(self._reply, self._send),
            output,
            settings=NodeSettings(replication=1),
        )

    def _send(self, node: NodeId, frames: Sequence[bytes]) -> bool:
        self.sent.append((node, decode(frames)))
        return True

    @property
    def b_range(self) -> SlotRange:
        b_range = self.core.ring.range_of(B)
        assert b_range is not None
        return b_range
