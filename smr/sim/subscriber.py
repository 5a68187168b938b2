"""A subscriber in the simulation: the real :class:`smr.client.subscription.Subscription`, from
``"start"``, in a simulated process, following every node's output through the simulated
network while the faults act (nodes write their output files on one shared disk,
:class:`~smr.sim.nodes.MemoryOutput`, so a live node reads a dead one's file).

After the ring converged, the subscriber reads on until it is idle, and the check:

1. It returned each origin at most once.
2. Every record in every node's output file (each origin once) was returned, but for the
   nodes it names in ``unread_of_dead`` (loud).
3. Without ``combine`` (each tuple adds 1, and the job emits a key's count at every
   multiple of 50): the records, each origin once, hold every key and multiple of 50 up to
   the oracle's count: a record a dead node never wrote is emitted again by its taker's
   replay, under the same origin. With one mapper id, nothing else either. With several
   (several mappers, or one that feeds as several ids in turn, ``mapper_parts``), a
   takeover replays their tuples in the order the backups hold them, which may differ from
   the failed node's, so a count may pass a multiple of 50 on another tuple than it did
   there, whose record the failed node wrote already (docs/concepts/exactly-once.md,
   "Output"): such extra records are counted, not failed.

Guarantee: a subscriber never passes over a record in silence; the run fails otherwise.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Final, Protocol

from smr.client.control import NodeUnreachable
from smr.client.subscription import OutputRecord, Subscription
from smr.output.records import parse_line
from smr.ring.view import View
from smr.sim.clients import SimClient
from smr.sim.mappers import MapperProcess, SimMapperTransport
from smr.sim.nodes import EMIT_EVERY
from smr.sim.run import Run


class SubscriberRun(Run, Protocol):
    """What the subscriber asks of the run besides :class:`~smr.sim.run.Run`: the processes
    the run ends with it, and the nodes' output files."""

    @property
    def background(self) -> list[MapperProcess]: ...

    @property
    def output_files(self) -> Mapping[str, bytearray]: ...


log = logging.getLogger("smr.sim")

# The subscriber's idle time before it looks whether the run asks it to stop.
IDLE_S: Final = 0.3


class SimSubscriber:
    """One subscription from the start, in a simulated process (module doc)."""

    def __init__(self, sim: SubscriberRun) -> None:
        self.sim = sim
        self._rng = sim.rng("subscriber")
        self.records: list[OutputRecord] = []
        self.tally: Counter[str] = Counter()
        self.stopping = False
        self.subscription: Subscription | None = None
        self._transport = SimMapperTransport(sim, "subscriber")
        self.process = MapperProcess(sim.scheduler, "subscriber", self._body)
        self._transport.process = self.process

    def start(self) -> None:
        """Start following at a seeded moment of the feed."""
        self.sim.background.append(self.process)
        self.sim.schedule_at(self._rng.randint(0, 300_000), self.process.start)

    def _view(self, refresh: bool) -> View:
        live = self.sim.live()
        if not live:
            raise NodeUnreachable("no node answers")
        return self._rng.choice(live)[1].view

    def _body(self) -> None:
        transport = self._transport
        subscription = Subscription(
            self._view,
            SimClient(transport),
            "start",
            IDLE_S,
            clock=self.sim.clock.seconds,
            sleep=lambda seconds: transport.sleep(seconds * 1000),
        )
        self.subscription = subscription
        while True:
            # Stop after a whole pass begun once asked to: one that began before may have
            # read the files as they were long ago (a node that answers late holds it).
            last = self.stopping
            self.records.extend(subscription)
            if last:
                return

    def finish(self) -> None:
        """Let the nodes flush their output (two ticks), stop the subscriber once it is
        idle, and check what it returned (module doc)."""
        sim = self.sim
        sim.run_until(lambda: False, sim.clock.now_us + 4 * sim.tick_ms * 1000)
        self.stopping = True
        limit_us = sim.clock.now_us + sim.config.heal_limit_ms * 1000
        if not sim.run_until(lambda: self.process.done, limit_us):
            raise AssertionError("subscriber: still reading when the run ended")
        if self.process.error is not None:
            error, self.process.error = self.process.error, None
            raise AssertionError(f"subscriber failed: {type(error).__name__}: {error}")
        self.check()

    def check(self) -> None:
        """Steps 1 to 3 of the module doc."""
        assert self.subscription is not None
        returned: dict[tuple[object, ...], OutputRecord] = {}
        for record in self.records:
            assert record.origin is not None
            if record.origin in returned:
                raise AssertionError(f"subscriber: origin {record.origin} returned twice")
            returned[record.origin] = record
        self.tally["records followed"] = len(returned)
        unread = self.subscription.unread_of_dead
        written: dict[tuple[object, ...], tuple[str, object, object]] = {}
        for node, data in sorted(self.sim.output_files.items()):
            for line in bytes(data).splitlines():
                entry = parse_line(line)
                assert entry is not None, f"subscriber: a torn line in {node}'s output"
                origin = tuple(entry["origin"])
                written.setdefault(origin, (node, entry["key"], entry["value"]))
                if origin not in returned and node not in unread:
                    raise AssertionError(
                        f"subscriber: {node} wrote {entry['key']!r} = {entry['value']!r} "
                        f"(origin {list(origin)}), never returned, and {node} is not named "
                        "unread"
                    )
        if unread:
            self.tally["nodes named unread"] += len(unread)
            return
        if not self.sim.config.combine:
            self._check_records(written)

    def _check_records(self, written: dict[tuple[object, ...], tuple[str, object, object]]) -> None:
        expected: Counter[tuple[object, object]] = Counter(
            (key, value)
            for key, count in self.sim.oracle.items()
            for value in range(EMIT_EVERY, count + 1, EMIT_EVERY)
        )
        actual: Counter[tuple[object, object]] = Counter(
            (key, value) for _, key, value in written.values()
        )
        missing = sorted(map(str, (expected - actual).elements()))
        extra = sorted(map(str, (actual - expected).elements()))
        mapper_ids = {origin[0] for origin in written}
        if extra and not missing and len(mapper_ids) > 1:
            # A takeover's replay applies the tuples of different mapper ids in the order the
            # backups hold them: a count may pass a multiple of 50 on another tuple than at
            # the failed node, which wrote its record already (docs: exactly-once, Output).
            self.tally["records of another apply order"] += len(extra)
        elif missing or extra:
            raise AssertionError(
                f"subscriber: the output holds {len(missing)} records too few and {len(extra)} "
                f"too many, e.g. missing {missing[:4]}, extra {extra[:4]}"
            )
