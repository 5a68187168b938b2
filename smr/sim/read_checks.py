"""The check of every answer the simulated readers get, against the feed's ledger during the
run and against the oracle after convergence: :class:`ReadChecks`, steps 1 to 4 of
docs/design/simulation.md#readers. Guarantee: no read that served a state outside its bounds
passes in silence."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import Ring
from smr.sim.ledger import FeedLedger
from smr.sim.run import Run
from smr.wire.codec import unpack_body
from smr.wire.messages import Error, Message
from smr.wire.reads import DumpReply, QueryReply


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


class Rereads(Protocol):
    """The final reads a check asks again (``SimReaders`` offers them)."""

    def query(self, node: NodeId, keys: list[str], final: bool = False) -> None: ...

    def dump(self, node: NodeId, start: int, end: int, final: bool = False) -> None: ...


class ReadChecks:
    """Every answer checked (docs/design/simulation.md#readers); a broken bound raises
    AssertionError at once, and each kind of answer is counted in ``tally``."""

    def __init__(
        self,
        sim: Run,
        ledger: FeedLedger,
        slot_keys: Mapping[int, list[str]],
        tally: Counter[str],
        rereads: Rereads,
    ) -> None:
        """``slot_keys``: the keys the feed emits, by slot; ``tally``: where the answers are
        counted; ``rereads``: where the final reads a refusal splits are sent again."""
        self.sim = sim
        self.ledger = ledger
        self._slot_keys = slot_keys
        self.tally = tally
        self._rereads = rereads
        # The final reads' answers: key -> count, and the slots the dump pages covered.
        self._final_counts: dict[str, int] = {}
        self._final_dumped: dict[str, int] = {}
        self._final_slots: set[int] = set()
        self._final_lost: set[str] = set()

    def answer(self, read: PendingRead, message: Message, lost: set[Slot]) -> None:
        """Check the answer to ``read``, knowing the slots its node marks ``lost`` now."""
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
        raise AssertionError(f"reader: {read.node} answered a {read.what} with {message!r}")

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
                self._rereads.query(read.node, keys, final=True)
            else:
                self._rereads.dump(read.node, slot, slot + 1, final=True)

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
                self._rereads.dump(read.node, resume, read.end, final=True)

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
        """Why a read below its floor is a known limit of reads today (step 2)."""
        cores = self.sim.live_cores()
        if node not in cores:
            return None
        # Judged when the answer is read: the node may have learned since it answered.
        newest = max((c.view for c in cores.values()), key=lambda view: view.epoch)
        if Ring(newest, self.sim.config.slot_bits).primary(Slot(slot)) != node:
            return "stale primary served"
        return None

    # -- after convergence -----------------------------------------------------------------

    def begin_final(self) -> None:
        """The final reads begin (step 4): forget the answers of any earlier ones."""
        self._final_counts.clear()
        self._final_dumped.clear()
        self._final_slots.clear()
        self._final_lost.clear()

    def check_final(self, excused: set[str] | frozenset[str], slot_count: int) -> None:
        """Every final answer came: the queries and the dump must each equal the oracle
        (but for keys of slots marked lost and the keys ``excused``), and the dump must
        have covered all ``slot_count`` slots."""
        # Keys of slots marked lost were counted as such (strict reads failed on them).
        lost = self._final_lost | excused
        oracle = {key: count for key, count in self.sim.oracle.items() if key not in lost}
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
        if len(self._final_slots) != slot_count:
            raise AssertionError(
                f"reader: after convergence the dump covered {len(self._final_slots)} of "
                f"{slot_count} slots"
            )
