"""Simulated readers: clients that read the ring while the faults act and after it
converged, through the node's read path (``QUERY_REQUEST`` and ``DUMP_REQUEST`` of
:mod:`smr.wire.reads`, answered by ``smr.node.control``), and the check of every answer
against the oracle.

What "exact" means for a read that runs beside writes. A key's count is a number of tuples
applied; the feed knows, per key, two bounds at every moment (:class:`FeedLedger`):

- the *floor*: the tuples of the key that were acknowledged (each mapper's words up to its
  last ``drain``, ``finish_mapper`` or ``close`` that returned), counted when the read is
  sent; an acknowledged tuple is applied at its slot's primary and never leaves the ring;
- the *ceiling*: the tuples of the key passed to ``emit`` so far, counted when the answer
  is read; nothing not emitted can have been applied, and nothing is applied twice.

A read is then checked by what it answered, per key:

1. An ERROR, or a node saying it is not the key's primary (``owner`` false, or a dump page
   that stops before the slot): a refusal, always allowed (the reader asks again later).
2. A state served as the primary's: its count must lie within ``[floor, ceiling]``. A count
   above the ceiling is a tuple applied twice (or made up); one below the floor lost an
   acknowledged tuple. Two cases are told apart and counted, not failed, unless the run
   asks for strict reads (``SimConfig.strict_reads``), because they are the known limits
   of reads today: a slot the serving node marks lost (``checkpoint.loss``) served at all
   (as empty or in part, where reads should refuse it), and a count below the floor from a
   node that the newest view of a live node, when the answer is read, no longer makes the
   slot's primary (a node cut off from the ring, or paused, serving its last state until
   it learns it lost the slot).
3. A dump page serves whole slots: every key with a floor above 0 in a served slot must be
   in the page (a key left out is a count of 0, checked by 2), and every key in it must
   hash to a served slot.
4. After the ring converged (every mapper's ``close`` returned, so floor equals ceiling
   equals the oracle) and every owner holds its read lease, the readers read everything
   once more, each key at its primary by
   the common view, and the whole ring by dump pages: every answer must be the oracle's
   count exactly, no refusal allowed (:meth:`SimReaders.read_all_converged`), but for
   keys of slots marked lost, counted by 2.

Guarantee: no read that served a state outside its bounds passes in silence; the counts of
each kind of answer are in :attr:`SimReaders.tally` (part of the run's result).
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from smr.checkpoint.loss import lost_slots
from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import Ring
from smr.sim.checks import reported_lost
from smr.sim.network import Link
from smr.sim.run import Run
from smr.wire.codec import decode, encode, pack_body, unpack_body
from smr.wire.kinds import FrameError, RequestId
from smr.wire.messages import Error
from smr.wire.reads import DumpReply, DumpRequest, QueryReply, QueryRequest

log = logging.getLogger("smr.sim")


# Messages a reader's link to one node holds unread, at most (a send past it fails).
READER_LINK_MESSAGES_MAX: Final = 64
# Keys a query names, at most, and a dump page's size in keys.
READ_KEYS_MAX: Final = 8
DUMP_PAGE_KEYS: Final = 40


class FeedLedger:
    """Per key, how many of its tuples the mappers emitted and how many were acknowledged so
    far (the bounds of a read, see the module doc). The feed reports its progress through
    :meth:`emitting` and :meth:`acked`; positions only grow."""

    def __init__(self) -> None:
        # Per mapper: key -> the positions (0-based) of its tuples in the mapper's words.
        self._positions: list[dict[str, list[int]]] = []
        self._emitted: list[int] = []
        self._acked: list[int] = []

    def add_mapper(self, words: Sequence[str]) -> MapperProgress:
        """Register a mapper's words; what its feed reports its progress through."""
        positions: dict[str, list[int]] = {}
        for position, word in enumerate(words):
            positions.setdefault(word, []).append(position)
        self._positions.append(positions)
        self._emitted.append(0)
        self._acked.append(0)
        return MapperProgress(self, len(self._positions) - 1)

    def emitting(self, mapper: int, through: int) -> None:
        """Mapper ``mapper`` may have emitted its words up to position ``through`` (exclusive)."""
        self._emitted[mapper] = max(self._emitted[mapper], through)

    def acked(self, mapper: int, through: int) -> None:
        """Every word of mapper ``mapper`` up to ``through`` (exclusive) was acknowledged."""
        self._acked[mapper] = max(self._acked[mapper], through)
        self.emitting(mapper, through)

    def floor(self, key: str) -> int:
        """The acknowledged tuples of ``key``."""
        return self._count(key, self._acked)

    def ceiling(self, key: str) -> int:
        """The emitted tuples of ``key`` (an upper bound)."""
        return self._count(key, self._emitted)

    def _count(self, key: str, through: list[int]) -> int:
        total = 0
        for positions, end in zip(self._positions, through, strict=True):
            found = positions.get(key)
            if found:
                total += bisect_left(found, end)
        return total

    def keys(self) -> list[str]:
        """Every key a mapper emits, sorted."""
        return sorted({key for positions in self._positions for key in positions})


@dataclass(frozen=True)
class MapperProgress:
    """One mapper's feed reporting to the ledger (:meth:`FeedLedger.emitting`, ``acked``)."""

    ledger: FeedLedger
    mapper: int

    def emitting(self, through: int) -> None:
        """The words up to ``through`` (exclusive) may have been emitted."""
        self.ledger.emitting(self.mapper, through)

    def acked(self, through: int) -> None:
        """The words up to ``through`` (exclusive) were acknowledged."""
        self.ledger.acked(self.mapper, through)


@dataclass
class PendingRead:
    """A read sent and not answered yet."""

    node: NodeId
    what: str  # "query" or "dump"
    sent_us: int
    keys: list[str] = field(default_factory=list)
    floors: dict[str, int] = field(default_factory=dict)
    start: int = 0
    end: int = 0
    final: bool = False


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
    (see the module doc); a broken bound raises AssertionError at once."""

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
        # The final reads' answers: key -> count, and the slots the dump pages covered.
        self._final_counts: dict[str, int] = {}
        self._final_dumped: dict[str, int] = {}
        self._final_slots: set[int] = set()
        self._final_lost: set[str] = set()

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
        """Check one answer (see the module doc)."""
        try:
            message = decode(frames)
        except FrameError as error:
            raise AssertionError(f"reader: {node} answered a bad frame: {error}") from error
        req = getattr(message, "req", None)
        read = self._pending.pop(req, None) if isinstance(req, int) else None
        if read is None:
            raise AssertionError(f"reader: {node} answered request {message!r} never sent")
        lost = self._lost_at(node)
        if isinstance(message, Error):
            self.tally["refused with an error"] += 1
            if read.final:
                self._final_refused(read, message.message, lost)
            return
        if isinstance(message, QueryReply):
            answers = unpack_body(message.body)
            for key, answer in zip(read.keys, answers, strict=True):
                if answer.get("lost"):
                    self._reported_lost(read, [int(answer["slot"])], lost)
                    continue
                if not answer["owner"]:
                    self._refused(read, key)
                    continue
                state = answer["state"]
                count = (state or {}).get("count", 0)
                self._check(read, key, int(answer["slot"]), count, lost)
            return
        if isinstance(message, DumpReply):
            self._check_page(read, message, lost)
            return
        raise AssertionError(f"reader: {node} answered a {read.what} with {message!r}")

    def _refused(self, read: PendingRead, what: str) -> None:
        self.tally["refused: not the primary"] += 1
        if read.final:
            raise AssertionError(
                f"reader: after convergence {read.node} refused {what}: not its primary, "
                "though the common view says it is"
            )

    def _final_refused(self, read: PendingRead, why: str, lost: set[Slot]) -> None:
        """After convergence only a slot marked lost may be refused: its keys are left out
        of the comparison, and the other slots of a refused page are asked one by one."""
        slot_bits = self.sim.config.slot_bits
        slots: set[int]
        if read.what == "query":
            slots = {slot_of(key, slot_bits) for key in read.keys}
        else:
            slots = set(range(read.start, read.end))
        if not slots & lost:
            raise AssertionError(
                f"reader: after convergence {read.node} refused a {read.what}: {why}"
            )
        for slot in sorted(slots):
            if slot in lost:
                self._final_lost.update(self._slot_keys.get(slot, ()))
                self._final_slots.add(slot)
            elif read.what == "query":
                keys = [key for key in read.keys if slot_of(key, slot_bits) == slot]
                self.query(read.node, keys, final=True)
            else:
                self.dump(read.node, slot, slot + 1, final=True)

    def _lost_at(self, node: NodeId) -> set[Slot]:
        """The slots ``node`` knows are lost now, if it lives: marked lost (not accepted)
        in its store, or in its offline set."""
        core = self.sim.live_cores().get(node)
        return set() if core is None else lost_slots(core.store) | reported_lost(core)

    def _reported_lost(self, read: PendingRead, slots: Iterable[int], lost: set[Slot]) -> None:
        """``read.node`` answered ``slots`` lost (an explicit answer, never served as empty):
        right only where its ledger holds them; their keys are left out of the comparison."""
        slots = list(slots)
        unmarked = [slot for slot in slots if slot not in lost]
        if unmarked:
            raise AssertionError(
                f"reader: {read.node} answered slots {unmarked[:5]} lost, which it does not "
                "mark lost"
            )
        self.tally["refused: slot lost"] += 1
        if read.final:
            for slot in slots:
                self._final_lost.update(self._slot_keys.get(slot, ()))
                self._final_slots.add(slot)

    def _check_page(self, read: PendingRead, page: DumpReply, lost: set[Slot]) -> None:
        served_end = read.end if page.next_start is None else page.next_start
        lost_end = page.lost_until if page.next_start is not None else None
        if lost_end is not None:
            self._reported_lost(read, range(served_end, lost_end), lost)
        elif served_end <= read.start:
            self._refused(read, f"slot {read.start}")
            return
        slot_bits = self.sim.config.slot_bits
        seen: dict[str, int] = {}
        for slot, key, state in unpack_body(page.body):
            if not read.start <= slot < served_end or slot_of(key, slot_bits) != slot:
                raise AssertionError(
                    f"reader: {read.node} served key {key!r} as slot {slot}, outside the "
                    f"page [{read.start}, {served_end}) or not its slot"
                )
            seen[key] = state.get("count", 0)
        for slot in range(read.start, served_end):
            for key in self._slot_keys.get(slot, ()):
                self._check(read, key, slot, seen.pop(key, 0), lost)
        for key, count in seen.items():
            # A key no mapper emits.
            self._check(read, key, slot_of(key, slot_bits), count, lost)
        if read.final:
            self._final_slots.update(range(read.start, served_end))
            resume = lost_end if lost_end is not None else page.next_start
            if resume is not None and resume < read.end:
                self.dump(read.node, resume, read.end, final=True)

    def _check(self, read: PendingRead, key: str, slot: int, count: int, lost: set[Slot]) -> None:
        self.tally["served"] += 1
        floor = read.floors.get(key, 0)
        ceiling = self.ledger.ceiling(key)
        if slot in lost:
            # The node knows it holds no exact copy: whatever it served is not the state.
            what = f"{read.node} served {key!r} of slot {slot}, which it marks lost"
            if self.sim.config.strict_reads:
                raise AssertionError(f"reader: {what} (lost slot served)")
            self.tally["lost slot served"] += 1
            if read.final:
                self._final_lost.add(key)
            return
        if read.final:
            # Compared with the oracle once every final answer came (excused keys aside).
            into = self._final_counts if read.what == "query" else self._final_dumped
            into[key] = count
            return
        if count > ceiling:
            raise AssertionError(
                f"reader: {read.node} served {key!r} (slot {slot}) with count {count}, above "
                f"the {ceiling} tuples emitted so far: a tuple applied twice"
            )
        if count >= floor:
            return
        what = (
            f"{read.node} served {key!r} (slot {slot}) with count {count}, below the {floor} "
            f"tuples acknowledged when the {read.what} was sent at "
            f"{read.sent_us / 1000:.3f} ms"
        )
        excuse = self._excuse(read.node, slot)
        if excuse is None or self.sim.config.strict_reads:
            raise AssertionError(f"reader: {what}" + (f" ({excuse})" if excuse else ""))
        self.tally[excuse] += 1
        self.sim.note(f"reader: {what} ({excuse})")

    def _excuse(self, node: NodeId, slot: int) -> str | None:
        """Why a read below its floor is a known limit of reads today (module doc, 2.)."""
        cores = self.sim.live_cores()
        if node not in cores:
            return None
        # Judged when the answer is read: the node may have learned since it answered.
        newest = max((c.view for c in cores.values()), key=lambda view: view.epoch)
        if Ring(newest, self.sim.config.slot_bits).primary(Slot(slot)) != node:
            return "stale primary served"
        return None

    # -- after convergence -----------------------------------------------------------------

    def read_all_converged(self, excused: set[str] | frozenset[str] = frozenset()) -> None:
        """Module doc, 4.: read every key at its primary and dump every owner's range, run
        until every answer came, and require the oracle's counts exactly (but for the keys
        ``excused``: a known silent difference, counted by the caller)."""
        sim = self.sim
        self.reading = False
        self._final_counts.clear()
        self._final_dumped.clear()
        self._final_slots.clear()
        self._final_lost.clear()
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
        # Keys of slots marked lost were counted as such (strict reads failed on them).
        lost = self._final_lost | excused
        oracle = {key: count for key, count in sim.oracle.items() if key not in lost}
        for name, answers in (("queries", self._final_counts), ("dump", self._final_dumped)):
            answered = {key: count for key, count in answers.items() if key not in lost}
            if answered != oracle:
                wrong = sorted(
                    k for k in oracle.keys() | answered.keys() if answered.get(k) != oracle.get(k)
                )
                raise AssertionError(
                    f"reader: after convergence the {name} differ from the oracle in "
                    f"{len(wrong)} keys, e.g. "
                    + ", ".join(f"{k}: {answered.get(k)} != {oracle.get(k)}" for k in wrong[:4])
                )
        if len(self._final_slots) != ring.slot_count:
            raise AssertionError(
                f"reader: after convergence the dump covered {len(self._final_slots)} of "
                f"{ring.slot_count} slots"
            )


def _runs(start: int, length: int, slot_count: int) -> list[tuple[int, int]]:
    """A ring range as at most two runs that do not wrap past the top slot."""
    first = min(length, slot_count - start)
    runs = [(start, first)]
    if length > first:
        runs.append((0, length - first))
    return runs
