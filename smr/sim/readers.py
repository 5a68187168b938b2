"""Simulated readers: clients that query keys and dump slot ranges through the node's read
path (``QUERY_REQUEST`` and ``DUMP_REQUEST`` of :mod:`smr.wire.reads`, answered by
``smr.node.control``) at seeded moments while the faults act, and read everything once more
after the ring converged; each answer is checked by :mod:`smr.sim.read_checks` against the
feed's ledger and the oracle (docs/design/simulation.md#readers).

Guarantee: no read that served a state outside its bounds passes in silence; the counts of
each kind of answer are in :attr:`SimReaders.tally` (part of the run's result).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Final

from smr.checkpoint.loss import lost_slots
from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId, Slot
from smr.sim.checks import reported_lost
from smr.sim.ledger import FeedLedger
from smr.sim.network import Link
from smr.sim.read_checks import PendingRead, ReadChecks
from smr.sim.run import Run
from smr.wire.codec import decode, encode, pack_body
from smr.wire.kinds import FrameError, RequestId
from smr.wire.reads import DumpRequest, QueryRequest

log = logging.getLogger("smr.sim")


# Messages a reader's link to one node holds unread, at most (a send past it fails).
READER_LINK_MESSAGES_MAX: Final = 64
# Keys a query names, at most, and a dump page's size in keys.
READ_KEYS_MAX: Final = 8
DUMP_PAGE_KEYS: Final = 40


class ReaderEnd:
    """The reader's connection to one node: the two simulated links, and where replies go."""

    def __init__(self, readers: SimReaders, node: NodeId) -> None:
        self.identity = f"reader>{node}"
        self.node = node
        self.closed = False
        network = readers.sim.network
        self.out: Link = network.link(self.identity, node, READER_LINK_MESSAGES_MAX)
        self.inbound: Link = network.link(node, self.identity)
        self._readers = readers

    def mail_arrived(self) -> None:
        """Read every reply that has arrived (the simulation calls it at each delivery)."""
        queue = self.inbound.queue
        sim = self._readers.sim
        while queue and queue[0].deliver_at_us <= sim.clock.now_us:
            sim.network.stats.delivered += 1
            self._readers.on_reply(self.node, list(queue.popleft().frames))


class SimReaders:
    """The run's readers: reads at seeded moments while the run goes on, each answer checked
    (:class:`~smr.sim.read_checks.ReadChecks`); a broken bound raises AssertionError at once."""

    def __init__(self, sim: Run, ledger: FeedLedger) -> None:
        self.sim = sim
        self.ledger = ledger
        self._rng = sim.rng("readers")
        self._ends: dict[NodeId, ReaderEnd] = {}
        self._pending: dict[int, PendingRead] = {}
        self._next_req = 0
        self.tally: Counter[str] = Counter()
        self.reading = False
        self._every_us = self._rng.choice((20, 50, 150)) * 1000
        slot_bits = sim.config.slot_bits
        self._keys = ledger.keys()
        self._slot_keys: dict[int, list[str]] = {}
        for key in self._keys:
            self._slot_keys.setdefault(slot_of(key, slot_bits), []).append(key)
        self.checks = ReadChecks(sim, ledger, self._slot_keys, self.tally, self)

    # -- sending --------------------------------------------------------------------------

    def start(self) -> None:
        """Begin reading at a seeded moment; reads go on until :meth:`stop`."""
        self.reading = True
        self.sim.schedule_at(self._rng.randint(1, self._every_us), self._read_once)

    def stop(self) -> None:
        """Send no more reads during the run (answers still arriving are checked)."""
        self.reading = False

    def _end(self, node: NodeId) -> ReaderEnd:
        end = self._ends.get(node)
        if end is None:
            end = self._ends[node] = ReaderEnd(self, node)
            self.sim.connect(end)
        return end

    def _send(self, node: NodeId, read: PendingRead, make: Any) -> None:
        self._next_req += 1
        req = self._next_req
        frames = encode(make(RequestId(req)))
        end = self._end(node)
        if self.sim.send_to_node(end.out, end.identity.encode(), frames):
            self._pending[req] = read
            self.tally[f"{read.what} sent"] += 1
        else:
            self.tally["unreachable"] += 1

    def _read_once(self) -> None:
        if not self.reading:
            return
        self.sim.schedule_at(self.sim.clock.now_us + self._every_us, self._read_once)
        live = self.sim.live()
        if not live or not self._keys:
            return
        rng = self._rng
        # A client follows a view it fetched from some node (perhaps a stale one); now and
        # then it asks a node at random, as a client with an old address list would.
        _, core = rng.choice(live)
        nodes = [*self.sim.node_ids, *self.sim.standby_ids]
        if rng.random() < 0.5:
            keys = rng.sample(self._keys, min(len(self._keys), rng.randint(1, READ_KEYS_MAX)))
            slot = slot_of(keys[0], self.sim.config.slot_bits)
            node = core.ring.primary(slot) if rng.random() < 0.8 else rng.choice(nodes)
            self.query(node, keys)
        else:
            slot_count = 1 << self.sim.config.slot_bits
            start = Slot(rng.randrange(slot_count))
            end = Slot(min(slot_count, start + rng.randint(1, slot_count)))
            node = core.ring.primary(start) if rng.random() < 0.8 else rng.choice(nodes)
            self.dump(node, start, end)

    def query(self, node: NodeId, keys: list[str], final: bool = False) -> None:
        """Ask ``node`` for the states of ``keys``."""
        floors = {key: self.ledger.floor(key) for key in keys}
        read = PendingRead(node, "query", self.sim.clock.now_us, keys, floors, final=final)
        self._send(node, read, lambda req: QueryRequest(req, pack_body(list(keys))))

    def dump(self, node: NodeId, start: int, end: int, final: bool = False) -> None:
        """Ask ``node`` for a page of the states of slots ``[start, end)``."""
        floors = {
            key: self.ledger.floor(key)
            for slot in range(start, end)
            for key in self._slot_keys.get(slot, ())
        }
        read = PendingRead(node, "dump", self.sim.clock.now_us, [], floors, start, end, final)
        self._send(
            node,
            read,
            lambda req: DumpRequest(req, Slot(start), Slot(end), max_keys=DUMP_PAGE_KEYS),
        )

    # -- answers --------------------------------------------------------------------------

    def on_reply(self, node: NodeId, frames: list[bytes]) -> None:
        """Check one answer (``ReadChecks.answer``)."""
        try:
            message = decode(frames)
        except FrameError as error:
            raise AssertionError(f"reader: {node} answered a bad frame: {error}") from error
        req = getattr(message, "req", None)
        read = self._pending.pop(req, None) if isinstance(req, int) else None
        if read is None:
            raise AssertionError(f"reader: {node} answered request {message!r} never sent")
        self.checks.answer(read, message, self._lost_at(node))

    def _lost_at(self, node: NodeId) -> set[Slot]:
        """The slots ``node`` knows are lost now, if it lives: marked lost (not accepted)
        in its store, or in its offline set."""
        core = self.sim.live_cores().get(node)
        return set() if core is None else lost_slots(core.store) | reported_lost(core)

    # -- after convergence -----------------------------------------------------------------

    def read_all_converged(self, excused: set[str] | frozenset[str] = frozenset()) -> None:
        """Step 4 of the checks: read every key at its primary and dump every owner's range,
        run until every answer came, and require the oracle's counts exactly (but for the
        keys ``excused``: a known silent difference, counted by the caller)."""
        sim = self.sim
        self.reading = False
        self.checks.begin_final()
        live = sim.live()
        ring = live[0][1].ring
        # A converged ring serves reads once each owner holds its read lease again (a
        # secondary it gained in the last view change has echoed a beat): until then its
        # refusals are the lease's, allowed at any time.
        limit_us = sim.clock.now_us + sim.config.heal_limit_ms * 1000
        if not sim.run_until(
            lambda: all(c.membership.holds_read_lease() for _, c in live), limit_us
        ):
            raise AssertionError("reader: after convergence an owner never held its read lease")
        by_primary: dict[NodeId, list[str]] = {}
        for key in self._keys:
            by_primary.setdefault(ring.primary(Slot(slot_of(key, ring.slot_bits))), []).append(key)
        for node, keys in sorted(by_primary.items()):
            for at in range(0, len(keys), READ_KEYS_MAX):
                self.query(node, keys[at : at + READ_KEYS_MAX], final=True)
        for owner, slot_range in ring.ranges():
            for run_start, run_length in _runs(
                slot_range.start, slot_range.length, ring.slot_count
            ):
                self.dump(owner, Slot(run_start), Slot(run_start + run_length), final=True)
        limit_us = sim.clock.now_us + sim.config.heal_limit_ms * 1000

        # Reads sent during the run to a node that died since stay unanswered: not waited for.
        def final_left() -> int:
            return sum(1 for read in self._pending.values() if read.final)

        if not sim.run_until(lambda: not final_left(), limit_us):
            raise AssertionError(f"reader: {final_left()} reads unanswered after convergence")
        self.checks.check_final(excused, ring.slot_count)


def _runs(start: int, length: int, slot_count: int) -> list[tuple[int, int]]:
    """A ring range as at most two runs that do not wrap past the top slot."""
    first = min(length, slot_count - start)
    runs = [(start, first)]
    if length > first:
        runs.append((0, length - first))
    return runs
