"""Whether a mapper id was used before: asked of the nodes before a new stream writes under it.

A tuple's identity is ``(mapper id, slot, seq)``, and a seq at or below a slot's hwm is taken
for a resend and dropped (docs/concepts/exactly-once.md). A stream that starts again at
position 0 under an id that already delivered tuples would have its tuples dropped in
silence, up to where the old stream got. So an id has a history (the primaries keep its hwm
per slot, and a finished mapper's last seq, ``smr.node.retirement``), and a writer that
names its id without saying where it resumes asks for it first (``smr.connection``):

1. Ask every owner of the view at once (``HistoryRequest``); each answers for the slots it
   is primary of by its own view.
2. Slots lost (their state, hwms included, went beyond the replication factor and may come
   back with it) make the history unknown: :class:`HistoryUnknown` at once.
3. Answers that cover every slot give the history (:class:`MapperHistory`). Otherwise ask
   again by a fresher view until the timeout, then :class:`HistoryUnknown` names the slots
   no primary answered for, and why: a check that cannot reach every primary never passes.

The caller refuses a used id with :class:`MapperIdReused` before it sends anything.

Guarantee: a writer is refused if, when it asks, a tuple of the same id was applied at its
slot's primary, or the id finished (every tuple a returned ``flush()`` covered was). The ask
and the first write are not one step: two writers that start the same unused id at the same
moment may both pass, so writers that run at once need ids of their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from smr.checkpoint.ids import MapperId
from smr.client.control import NodeUnreachable
from smr.ring.ids import Slot
from smr.ring.placement import SlotRange
from smr.ring.view import View
from smr.wire.reads import HistoryReply

# Between two asks of a check whose answers left slots uncovered (a node down, a view moving).
RETRY_PAUSE_S: Final = 0.05


class HistoryUnknown(NodeUnreachable):
    """Whether a mapper id was used before cannot be told: a slot's primary did not answer
    within the timeout, or slots are lost (the message names them)."""


@dataclass(frozen=True)
class MapperHistory:
    """What the nodes hold of one mapper id."""

    mapper: MapperId
    slots: int = 0
    """Slots whose primary holds a hwm of it: a tuple of it was applied there."""
    seq_max: int = 0
    """The highest of those hwms (0 if none): without ``combine``, the stream's position
    after the last tuple applied."""
    finished_at: int | None = None
    """Its last seq if it said it finished (``smr.mapper.finish``), else None."""

    @property
    def used(self) -> bool:
        """Whether the id already delivered tuples (or finished)."""
        return self.slots > 0 or self.finished_at is not None

    def describe(self) -> str:
        """What it delivered, in words: ``to 4,096 slots, seqs up to 58,605``."""
        parts = []
        if self.slots:
            parts.append(f"to {self.slots:,} slots, seqs up to {self.seq_max:,}")
        if self.finished_at is not None:
            parts.append(f"finished at seq {self.finished_at:,}")
        return "; ".join(parts)


ADVICE_CONNECT: Final = (
    "pass the position flush() returned (position=...) to continue it, or use a new mapper_id"
)


class MapperIdReused(ValueError):
    """A new stream names a mapper id that already delivered tuples, without saying where it
    resumes: its tuples would be taken for resends of the old stream's and dropped. Nothing
    was sent. ``history`` says what the id delivered."""

    def __init__(self, history: MapperHistory, advice: str = ADVICE_CONNECT) -> None:
        super().__init__(
            f"mapper id {history.mapper} already delivered tuples ({history.describe()}); " + advice
        )
        self.history = history


class HistoryAsker(Protocol):
    """What :func:`mapper_history` asks through: :class:`smr.client.control.Client`, or a simulated
    client (``smr.sim``)."""

    def history_each(
        self, addrs: list[str], mapper: MapperId
    ) -> dict[str, HistoryReply | NodeUnreachable | RuntimeError]:
        """What each node at ``addrs`` holds of ``mapper``, or why it did not answer."""
        ...


def uncovered(ranges: Iterable[SlotRange], slot_count: int) -> list[SlotRange]:
    """The runs of slots of a ring of ``slot_count`` that none of ``ranges`` holds, in slot
    order (a run never wraps past the top slot)."""
    held = bytearray(slot_count)
    for slot_range in ranges:
        for slot in slot_range.slots():
            held[slot] = 1
    runs: list[SlotRange] = []
    start = 0
    while start < slot_count:
        start = held.find(0, start)
        if start < 0:
            break
        end = held.find(1, start)
        end = slot_count if end < 0 else end
        runs.append(SlotRange(Slot(start), end - start, slot_count))
        start = end
    return runs


def combine(mapper: MapperId, replies: Iterable[HistoryReply]) -> MapperHistory:
    """The history the replies tell, together (each node's slots are its own)."""
    slots = seq_max = 0
    finished_at: int | None = None
    for reply in replies:
        slots += reply.slots
        seq_max = max(seq_max, reply.seq_max)
        if reply.last is not None:
            finished_at = max(finished_at or 0, reply.last)
    return MapperHistory(mapper, slots, seq_max, finished_at)


def mapper_history(
    client: HistoryAsker,
    view_of: Callable[[bool], View],
    slot_bits: int,
    mapper: MapperId,
    timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> MapperHistory:
    """Steps 1 to 3: the history of ``mapper`` on the primaries of every slot, asked by
    ``view_of(refresh)``'s view; :class:`HistoryUnknown` if it cannot be told. ``clock``
    and ``sleep`` measure and wait out the timeout (the caller's time: virtual in a
    simulation)."""
    slot_count = 1 << slot_bits
    deadline = clock() + timeout_s
    refresh = False
    while True:
        # 1.
        try:
            view = view_of(refresh)
        except NodeUnreachable as error:
            failures = [str(error)]
        else:
            addrs = {member.addr: member.node_id for member in view.owners()}
            answers = client.history_each(list(addrs), mapper)
            replies = [a for a in answers.values() if isinstance(a, HistoryReply)]
            failures = [
                f"{addrs[addr]}: {answer}"
                for addr, answer in answers.items()
                if not isinstance(answer, HistoryReply)
            ]
            # 2.
            lost = sum(reply.lost for reply in replies)
            if lost:
                raise HistoryUnknown(
                    f"cannot tell whether mapper id {mapper} was used before: {lost:,} slots "
                    "are lost, their hwms with their state ('smr status' names them)"
                )
            # 3.
            gaps = uncovered(
                (SlotRange(r.start, r.length, slot_count) for r in replies), slot_count
            )
            if not gaps:
                return combine(mapper, replies)
            failures.append("no primary answered for slots " + _runs(gaps))
        if clock() >= deadline:
            raise HistoryUnknown(
                f"cannot tell whether mapper id {mapper} was used before within {timeout_s} s: "
                + "; ".join(failures)
            )
        sleep(RETRY_PAUSE_S)
        refresh = True


def _runs(gaps: list[SlotRange]) -> str:
    shown = ", ".join(
        str(gap.start) if gap.length == 1 else f"{gap.start}-{gap.start + gap.length - 1}"
        for gap in gaps[:3]
    )
    return shown + (f" and {len(gaps) - 3} more runs" if len(gaps) > 3 else "")
