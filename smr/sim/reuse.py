"""A reused stream identity in the simulation: once mapper ``m0``'s ``close()`` returned
(every tuple it sent acknowledged), a second stream names the same id at position 0 without
saying it resumes, as a program run twice with ``smr.connect(..., mapper_id="m0")`` does.

The second stream asks the nodes for the id's history first, by the real check
(:func:`smr.stream_history.mapper_history`, over the simulated network in virtual time), as
``smr.connection`` does before its first write. The check must refuse it:
:class:`~smr.stream_history.MapperIdReused` (the id delivered tuples or finished), or
:class:`~smr.stream_history.HistoryUnknown` (a primary did not answer in time, or slots are
lost): both loud, and nothing is sent. A check that passes would let the stream's tuples be
taken for resends of the first stream's and dropped in silence: the run fails at once.

Guarantee: every simulated reuse ends refused, or the run fails naming the history found.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from checkpoint.ids import MapperId
from ring.view import View
from smr.client import NodeUnreachable
from smr.protocol import FrameError, HistoryReply, HistoryRequest, RequestId, decode, encode
from smr.sim.mappers import MapperProcess, SimChannelEnd, SimMapperTransport
from smr.stream_history import HistoryUnknown, MapperIdReused, mapper_history

if TYPE_CHECKING:
    from smr.sim.simulation import Simulation

log = logging.getLogger("smr.sim")

# The real client's request timeout (smr.client.REQUEST_TIMEOUT_MS_DEFAULT) and a writer's
# default wait for the whole check (smr.connection).
REQUEST_TIMEOUT_MS: Final = 2000
CHECK_TIMEOUT_S: Final = 10.0
# How often the second stream looks whether the first one's close() returned.
POLL_MS: Final = 50


class SimHistoryClient:
    """The ``history_each`` of :class:`smr.client.Client` over the simulated network, for a
    simulated process (:class:`~smr.stream_history.HistoryAsker`)."""

    def __init__(self, transport: SimMapperTransport) -> None:
        self._transport = transport
        self._ends: dict[str, SimChannelEnd] = {}
        self._next_req = 0

    def history_each(
        self, addrs: Sequence[str], mapper: MapperId
    ) -> dict[str, HistoryReply | NodeUnreachable | RuntimeError]:
        """Ask every node at ``addrs`` at once; each answer, or why there is none."""
        sim = self._transport.sim
        answers: dict[str, HistoryReply | NodeUnreachable | RuntimeError] = {}
        waiting: dict[str, int] = {}
        for addr in dict.fromkeys(addrs):
            if addr not in self._ends:
                opened = self._transport.open(addr, 64)
                assert isinstance(opened, SimChannelEnd)
                self._ends[addr] = opened
            end = self._ends[addr]
            self._next_req += 1
            if end.send(encode(HistoryRequest(RequestId(self._next_req), mapper))):
                waiting[addr] = self._next_req
            else:
                answers[addr] = NodeUnreachable(f"{addr}: no connection")
        deadline_us = sim.clock.now_us + REQUEST_TIMEOUT_MS * 1000
        while waiting and sim.clock.now_us < deadline_us:
            left_ms = max(1, (deadline_us - sim.clock.now_us) // 1000)
            ends = [self._ends[addr] for addr in waiting]
            for ready in self._transport.wait_any(ends, left_ms):
                assert isinstance(ready, SimChannelEnd)
                end = ready
                while (frames := end.receive()) is not None:
                    try:
                        message = decode(frames)
                    except FrameError as error:
                        answers[end.addr] = RuntimeError(str(error))
                        waiting.pop(end.addr, None)
                        continue
                    # An answer to an earlier ask that timed out is skipped.
                    if getattr(message, "req", None) != waiting.get(end.addr):
                        continue
                    waiting.pop(end.addr)
                    if isinstance(message, HistoryReply):
                        answers[end.addr] = message
                    else:
                        answers[end.addr] = RuntimeError(f"{end.addr} answered {message!r}")
        for addr in waiting:
            answers[addr] = NodeUnreachable(f"{addr}: no answer in {REQUEST_TIMEOUT_MS} ms")
        return answers


class IdReuse:
    """The second stream of ``m0`` (module doc); ``tally`` says how each ended."""

    def __init__(self, sim: Simulation, first: MapperProcess) -> None:
        self.sim = sim
        self._first = first
        self._rng = sim._rng("reuse")
        self.tally: Counter[str] = Counter()
        self._transport = SimMapperTransport(sim, "m0-again")
        self.process = MapperProcess(sim, "m0-again", self._body)
        self._transport.process = self.process

    def start(self) -> None:
        """Start the second stream's process (it waits for the first's close)."""
        self.sim.mappers.append(self.process)
        self.sim._schedule(self.sim.clock.now_us, self.process.start)

    def _view(self, refresh: bool) -> View:
        # The view of some live node, as a client fetches it from any it reaches.
        live = self.sim._live()
        if not live:
            raise NodeUnreachable("no node answers")
        return self._rng.choice(live)[1].view

    def _body(self) -> None:
        sim = self.sim
        transport = self._transport
        while not self._first.done:
            transport.sleep(POLL_MS)
        transport.sleep(self._rng.randint(0, 500))
        mapper = MapperId("m0")
        try:
            history = mapper_history(
                SimHistoryClient(transport),
                self._view,
                sim.config.slot_bits,
                mapper,
                CHECK_TIMEOUT_S,
                clock=sim.clock.seconds,
                sleep=lambda seconds: transport.sleep(seconds * 1000),
            )
        except HistoryUnknown as unknown:
            self.tally["id reuse refused: history unknown"] += 1
            sim._note(f"id reuse refused: {unknown}")
            return
        if history.used:
            self.tally["id reuse refused"] += 1
            sim._note(f"id reuse refused: {MapperIdReused(history)}")
            return
        raise AssertionError(
            "mapper id m0 was started again at position 0 after its first stream was "
            f"acknowledged, and the history check passed it ({history!r}): its tuples would be "
            "taken for resends and dropped in silence"
        )
