"""A reused stream identity in the simulation: once mapper ``m0``'s ``close()`` returned
(every tuple it sent acknowledged), a second stream names the same id at position 0 without
saying it resumes, as a program run twice with ``smr.connect(..., mapper_id="m0")`` does.

The second stream asks the nodes for the id's history first, by the real check
(:func:`smr.client.history.mapper_history`, over the simulated network in virtual time), as
``smr.connection`` does before its first write. The check must refuse it:
:class:`~smr.client.history.MapperIdReused` (the id delivered tuples or finished), or
:class:`~smr.client.history.HistoryUnknown` (a primary did not answer in time, or slots are
lost): both loud, and nothing is sent. A check that passes would let the stream's tuples be
taken for resends of the first stream's and dropped in silence: the run fails at once.

Guarantee: every simulated reuse ends refused, or the run fails naming the history found.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Final, Protocol

from smr.checkpoint.ids import MapperId
from smr.client.control import NodeUnreachable
from smr.client.history import HistoryUnknown, MapperIdReused, mapper_history
from smr.ring.view import View
from smr.sim.clients import SimClient
from smr.sim.mappers import MapperProcess, SimMapperTransport
from smr.sim.run import Run


class ReuseRun(Run, Protocol):
    """What the id reuse asks of the run besides :class:`~smr.sim.run.Run`: the mappers
    the run waits for, to join them."""

    @property
    def mappers(self) -> list[MapperProcess]: ...


log = logging.getLogger("smr.sim")

# A writer's default wait for the whole check (smr.connection).
CHECK_TIMEOUT_S: Final = 10.0
# How often the second stream looks whether the first one's close() returned.
POLL_MS: Final = 50


class IdReuse:
    """The second stream of ``m0`` (module doc); ``tally`` says how each ended."""

    def __init__(self, sim: ReuseRun, first: MapperProcess) -> None:
        self.sim = sim
        self._first = first
        self._rng = sim.rng("reuse")
        self.tally: Counter[str] = Counter()
        self._transport = SimMapperTransport(sim, "m0-again")
        self.process = MapperProcess(sim.scheduler, "m0-again", self._body)
        self._transport.process = self.process

    def start(self) -> None:
        """Start the second stream's process (it waits for the first's close)."""
        self.sim.mappers.append(self.process)
        self.sim.schedule_at(self.sim.clock.now_us, self.process.start)

    def _view(self, refresh: bool) -> View:
        # The view of some live node, as a client fetches it from any it reaches.
        live = self.sim.live()
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
                SimClient(transport),
                self._view,
                sim.config.slot_bits,
                mapper,
                CHECK_TIMEOUT_S,
                clock=sim.clock.seconds,
                sleep=lambda seconds: transport.sleep(seconds * 1000),
            )
        except HistoryUnknown as unknown:
            self.tally["id reuse refused: history unknown"] += 1
            sim.note(f"id reuse refused: {unknown}")
            return
        if history.used:
            self.tally["id reuse refused"] += 1
            sim.note(f"id reuse refused: {MapperIdReused(history)}")
            return
        raise AssertionError(
            "mapper id m0 was started again at position 0 after its first stream was "
            f"acknowledged, and the history check passed it ({history!r}): its tuples would be "
            "taken for resends and dropped in silence"
        )
