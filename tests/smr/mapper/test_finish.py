"""Telling the nodes a mapper finished: every live node is sent ``MapperDone`` with the
mapper's last seq; a channel not yet connected is sent it again on each turn of the wait;
the answers are counted, and a node that never answers only ends the wait at its deadline."""

from __future__ import annotations

from collections.abc import Sequence

from smr.checkpoint.ids import MapperId
from smr.mapper.channels import Channel
from smr.mapper.finish import announce_done
from smr.ring.ids import NodeId
from smr.wire.codec import decode
from smr.wire.messages import MapperDone


class _End:
    """A channel end that refuses the first ``refusals`` sends and keeps the notices."""

    def __init__(self, refusals: int = 0) -> None:
        self.addr = "sim://n"
        self.refusals = refusals
        self.notices: list[MapperDone] = []

    def send(self, frames: Sequence[bytes]) -> bool:
        if self.refusals:
            self.refusals -= 1
            return False
        message = decode(frames)
        assert isinstance(message, MapperDone)
        self.notices.append(message)
        return True

    def receive(self) -> list[bytes] | None:
        return None

    def close(self) -> None:
        pass


def test_every_node_is_told_the_last_seq_and_the_answers_are_counted() -> None:
    ends = [_End(), _End(refusals=2)]
    channels = [Channel(NodeId(f"n{i}"), end) for i, end in enumerate(ends)]
    now = [0.0]

    def answers(timeout_ms: int) -> set[int]:
        now[0] += timeout_ms / 1000
        return {notice.req for end in ends for notice in end.notices}

    answered = announce_done(MapperId("m"), 41, channels, lambda: now[0], answers)
    assert answered == 2
    assert [(n.mapper, n.last) for end in ends for n in end.notices] == [("m", 41), ("m", 41)]


def test_a_silent_node_ends_the_wait_at_the_deadline_uncounted() -> None:
    end = _End()
    now = [0.0]

    def answers(timeout_ms: int) -> set[int]:
        now[0] += timeout_ms / 1000
        return set()

    answered = announce_done(
        MapperId("m"), 7, [Channel(NodeId("n0"), end)], lambda: now[0], answers, wait_s=0.1
    )
    assert answered == 0 and len(end.notices) == 1 and now[0] >= 0.1
