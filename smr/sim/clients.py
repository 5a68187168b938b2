"""A control client over the simulated network, for simulated processes (a reused stream's
history check, a subscriber): the requests of :class:`smr.client.control.Client` they need, each
answered or timed out in virtual time."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from smr.checkpoint.ids import MapperId
from smr.client.control import NodeUnreachable
from smr.ring.ids import NodeId
from smr.sim.mappers import SimChannelEnd, SimMapperTransport
from smr.wire.codec import decode, encode
from smr.wire.kinds import FrameError, RequestId
from smr.wire.messages import Error, Message
from smr.wire.reads import HistoryReply, HistoryRequest, OutputReply, OutputRequest

# The real client's request timeout (smr.client.control.REQUEST_TIMEOUT_MS_DEFAULT).
REQUEST_TIMEOUT_MS: Final = 2000
# Messages a client's link to one node holds unread, at most.
CLIENT_LINK_MESSAGES_MAX: Final = 64

Answer = HistoryReply | OutputReply | NodeUnreachable | RuntimeError


class SimClient:
    """``history_each`` and ``output_each`` of :class:`smr.client.control.Client`, sent from a
    simulated process over its :class:`~smr.sim.mappers.SimMapperTransport`: every address
    asked at once, each answer (an ERROR as RuntimeError) or NodeUnreachable after the
    timeout."""

    def __init__(self, transport: SimMapperTransport) -> None:
        self._transport = transport
        self._ends: dict[str, SimChannelEnd] = {}
        self._next_req = 0

    def history_each(
        self, addrs: Sequence[str], mapper: MapperId
    ) -> dict[str, HistoryReply | NodeUnreachable | RuntimeError]:
        """What each node at ``addrs`` holds of ``mapper`` (``smr.client.history``)."""
        answers = self._request_each(
            {addr: lambda req: HistoryRequest(req, mapper) for addr in addrs}, HistoryReply
        )
        return {addr: a for addr, a in answers.items() if not isinstance(a, OutputReply)}

    def output_each(
        self, offsets: Mapping[str, int], max_bytes: int, of: Mapping[str, str] | None = None
    ) -> dict[str, OutputReply | NodeUnreachable | RuntimeError]:
        """Each address's output lines from its offset, or those of the node ``of`` names."""
        of = of or {}

        def make(addr: str, offset: int) -> Callable[[RequestId], Message]:
            node = None if addr not in of else NodeId(of[addr])
            return lambda req: OutputRequest(req, offset, max_bytes, node)

        answers = self._request_each(
            {addr: make(addr, offset) for addr, offset in offsets.items()}, OutputReply
        )
        return {addr: a for addr, a in answers.items() if not isinstance(a, HistoryReply)}

    def _end(self, addr: str) -> SimChannelEnd:
        if addr not in self._ends:
            opened = self._transport.open(addr, CLIENT_LINK_MESSAGES_MAX)
            assert isinstance(opened, SimChannelEnd)
            self._ends[addr] = opened
        return self._ends[addr]

    def _request_each(
        self, requests: Mapping[str, Callable[[RequestId], Message]], expect: type
    ) -> dict[str, Answer]:
        sim = self._transport.sim
        answers: dict[str, Answer] = {}
        waiting: dict[str, int] = {}
        for addr, make in requests.items():
            self._next_req += 1
            if self._end(addr).send(encode(make(RequestId(self._next_req)))):
                waiting[addr] = self._next_req
            else:
                answers[addr] = NodeUnreachable(f"{addr}: no connection")
        deadline_us = sim.clock.now_us + REQUEST_TIMEOUT_MS * 1000
        while waiting and sim.clock.now_us < deadline_us:
            left_ms = max(1, (deadline_us - sim.clock.now_us) // 1000)
            ends = [self._ends[addr] for addr in waiting]
            for ready in self._transport.wait_any(ends, left_ms):
                assert isinstance(ready, SimChannelEnd)
                self._take(ready, waiting, answers, expect)
        for addr in waiting:
            answers[addr] = NodeUnreachable(f"{addr}: no answer in {REQUEST_TIMEOUT_MS} ms")
        return answers

    def _take(
        self, end: SimChannelEnd, waiting: dict[str, int], answers: dict[str, Answer], expect: type
    ) -> None:
        """Every reply that arrived on ``end``: the awaited one answers its address (an
        answer to an earlier ask that timed out is skipped)."""
        while (frames := end.receive()) is not None:
            try:
                message = decode(frames)
            except FrameError as error:
                answers[end.addr] = RuntimeError(str(error))
                waiting.pop(end.addr, None)
                continue
            if getattr(message, "req", None) != waiting.get(end.addr):
                continue
            waiting.pop(end.addr)
            if isinstance(message, expect):
                answers[end.addr] = message  # type: ignore[assignment]
            elif isinstance(message, Error):
                answers[end.addr] = RuntimeError(f"{end.addr} refused: {message.message}")
            else:
                answers[end.addr] = RuntimeError(f"{end.addr} answered {message!r}")
