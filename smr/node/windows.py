"""A windowed job on a node (docs/design/windows.md#in-the-ring): window state folded into
its key's slot state, per-slot watermarks from the mappers' stamps, windows closed and
purged in the checkpoint cycle, every result an output record named by its window.

Per tuple (:meth:`NodeWindows.reduce_fn`, the store's per-tuple reduce), the windows it
falls in (a session: all its key's) are read from its key's window fields, the tuple is
judged against the slot's watermark of the last cycle and added by ``checkpoint.window_state``,
and the fields are written back: checkpoints, the backup's replay, takeovers, moves and
restarts carry them. A correction, and a late tuple with ``late_side_output``, is a record at
once. In the checkpoint cycle (:meth:`NodeWindows.close_due`), each slot's watermark
advances, every key due closes and purges, and the slot's watermark record is noted in the
store (``StateStore.note_watermark``): the delta swapped out next carries it beside the
slot's hwm vector. In memory, derived only: per slot the mappers' watermarks, resumed from
the store's record when the node gains the slot, and each key's next due time.

A result is ``{"key": K, "value": {"start_ms", "end_ms", "revision", "state"}}`` (a merged
session's also ``"replaces"``) with the origin ``["@<start>:<end>/<key as JSON>", slot,
revision, 0]``; a reader keeps each origin once (``smr.output``).

Guarantees: a node that gains a slot (takeover, move, join, restart from disk) judges every
tuple it applies or replays there against the watermark of the slot's last checkpoint it
holds, as the old owner did: a tuple the old owner dropped as late is dropped again, and a
window it closed closes again with the same state under the same origin. One case stays
open (docs/design/windows.md#closing-and-replay-giving-the-same-answer): a primary dead
between closing windows and that cycle's delta reaching its successor leaves it an older
watermark for the tuples that followed, so a tuple later than ``out_of_orderness_ms`` that
the primary dropped may be taken there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from smr.api import Job, Key
from smr.checkpoint.apply import APPLYING
from smr.checkpoint.ids import MapperId, Seq, Slot
from smr.checkpoint.store import ReduceFn, StateStore
from smr.checkpoint.watermarks import SlotWatermark, WatermarkRecord
from smr.checkpoint.window_state import (
    NOT_CLOSED,
    REVISION_FIELD,
    WindowedState,
    WindowResult,
)
from smr.checkpoint.windows import (
    FIELD_PREFIX,
    START_OF_TIME_MS,
    assign,
    window_field,
    window_of_field,
)
from smr.output.records import Emitted
from smr.values import form_text, json_form
from smr.windows.run import fold_of, lifted
from smr.windows.stamps import unstamped

__all__ = ["NodeWindows", "WindowCounts", "result_origin"]

IDLE_TIMEOUT_MS_DEFAULT: Final = 10_000
"""A mapper not heard from in a slot for this long stops holding its watermark back."""


def _no_record(_slot: Slot) -> WatermarkRecord | None:
    return None


@dataclass
class WindowCounts:
    """What a node's windows did since it started (reported by ``smr status``)."""

    windows_closed: int = 0
    window_corrections: int = 0
    late_dropped: int = 0


@dataclass
class _Slot:
    """One slot's derived window bookkeeping: its watermark and, per key holding windows,
    the watermark at which it is next due; ``read`` once its existing state was read."""

    watermark: SlotWatermark
    due_ms: dict[Key, int] = field(default_factory=dict)
    read: bool = False
    resumed: bool = False
    """Whether the watermark came from a checkpointed record (its mappers known)."""


def result_origin(result: WindowResult) -> str:
    """The first member of a result's origin: its window and key."""
    window = result.window
    return f"{FIELD_PREFIX}{window.start_ms}:{window.end_ms}/{form_text(json_form(result.key))}"


def result_record(result: WindowResult, slot: Slot) -> Emitted:
    """A window's result as an output record, named ``(window and key, slot, revision, 0)``;
    a merged session's names the sessions that already left which it replaces
    (``"replaces": [[start_ms, end_ms], ...]``)."""
    value: dict[str, Any] = {
        "start_ms": result.window.start_ms,
        "end_ms": result.window.end_ms,
        "revision": result.revision,
        "state": result.state,
    }
    if result.replaces:
        value["replaces"] = [[window.start_ms, window.end_ms] for window in result.replaces]
    return (result.key, value, result_origin(result), slot, result.revision, 0)


class NodeWindows:
    """A windowed job's windows on one node (steps in the module docstring)."""

    def __init__(
        self,
        job: Job,
        clock: Callable[[], float],
        emitted: list[Emitted],
        idle_timeout_ms: int = IDLE_TIMEOUT_MS_DEFAULT,
    ) -> None:
        """``emitted``: where corrections and late tuples go as they are applied (the
        reducer's list, handed to the output after each batch)."""
        spec = job.window
        assert spec is not None, "NodeWindows takes a windowed job"
        self.spec = spec
        self._fold = fold_of(job)
        self._aggregation = job.aggregation
        self._late_side_output = job.late_side_output
        self._clock = clock
        self._emitted = emitted
        self._idle_timeout_ms = idle_timeout_ms
        # The watermark record of a slot in the store tuples are applied to (applying_to).
        self._checkpointed: Callable[[Slot], WatermarkRecord | None] = _no_record
        self._slots: dict[Slot, _Slot] = {}
        # Writers registered (register) within the last idle timeout, and when: each slot
        # made here meanwhile counts them too.
        self._registered: dict[MapperId, int] = {}
        # Writers that said they finished within the last idle timeout, and when (a slot
        # gained meanwhile may know them from its record as still writing).
        self._finished: dict[MapperId, int] = {}
        self.counts = WindowCounts()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def applying_to(self, store: StateStore) -> None:
        """Tuples are applied (or replayed) to ``store`` from now on: a slot gained there
        resumes the watermark record ``store`` holds of it (``StateStore.watermark``)."""
        self._checkpointed = store.watermark

    def _slot(self, slot: Slot) -> _Slot:
        """The slot's bookkeeping; a slot not known here starts from the watermark its
        checkpoints carried (the record in the store), or from the start of time."""
        known = self._slots.get(slot)
        if known is None:
            record = self._checkpointed(slot)
            if record is None:
                watermark = SlotWatermark(self._idle_timeout_ms)
            else:
                watermark = SlotWatermark.resumed(self._idle_timeout_ms, record, self._now_ms())
            known = self._slots[slot] = _Slot(watermark, resumed=record is not None)
            for mapper, registered_ms in self._registered.items():
                known.watermark.heard(mapper, START_OF_TIME_MS, registered_ms)
            for mapper, finished_ms in self._finished.items():
                if watermark.knows(mapper):
                    watermark.finished(mapper, finished_ms)
        return known

    def register(self, mapper: MapperId) -> None:
        """A writer of ``mapper`` is about to send its first tuple (every windowed writer
        asks the owners first, ``smr.client.history``): from now on it holds back every slot
        of this node, at the start of time until its stamps reach the slot, until it goes
        idle there or finishes. So two writers that start together are each known to every
        node before either one's tuples can advance a watermark past the other's. A writer
        registered after a slot's watermark advanced finds it where it is: a watermark never
        goes back."""
        now_ms = self._now_ms()
        self._registered[mapper] = now_ms
        for known in self._slots.values():
            known.watermark.heard(mapper, START_OF_TIME_MS, now_ms)

    def writer_finished(self, mapper: MapperId) -> None:
        """``mapper`` said it finished (its ``MapperDone``): it never holds a slot of this node
        back again. Told at once, not asked in the next cycle: a node forgets a finished
        mapper that never wrote to it once its lease ran out (``smr.node.retirement``), and
        a registered writer that never wrote here would hold its slots for ever."""
        now_ms = self._now_ms()
        self._registered.pop(mapper, None)
        self._finished[mapper] = now_ms
        for known in self._slots.values():
            if known.watermark.knows(mapper):
                known.watermark.finished(mapper, now_ms)

    def watermark_ms(self, slot: Slot) -> int:
        """The slot's watermark as of the last cycle (the start of time if unknown here)."""
        known = self._slots.get(slot)
        return START_OF_TIME_MS if known is None else known.watermark.current_ms

    def reduce_fn(self) -> ReduceFn:
        """Step 1 as the store's ``reduce_fn(key, value, state)``: raises (the store keeps the
        state as it was and counts the tuple failed) on a value without stamps or a fold
        that raises."""
        spec, fold, counts, emitted = self.spec, self._fold, self.counts, self._emitted
        aggregation = self._aggregation
        applying = APPLYING

        def reduce_windowed(key: Key, value: Any, state: dict[str, Any]) -> None:
            mapper, slot, seq = applying
            event_time_ms, stamp_ms, user_value = unstamped(value)
            known = self._slot(slot)
            known.watermark.heard(mapper, stamp_ms, self._now_ms())
            late: list[Any] = []
            # Only the windows the tuple falls in are read and written back: the key's other
            # windows are untouched by it. A session may merge with any of its key's
            # sessions: all of them are.
            prefixes = (
                (FIELD_PREFIX,)
                if spec.merging
                else tuple(window_field(w, "") for w in assign(spec, event_time_ms))
            )
            touched = {name: v for name, v in state.items() if name.startswith(prefixes)}
            windows = WindowedState.restore(
                spec,
                fold,
                known.watermark.current_ms,
                {key: touched},
                lambda _k, v, t: late.append((v, t)),
            )
            partial = user_value if aggregation is None else lifted(aggregation, key, user_value)
            corrections = windows.add(key, event_time_ms, partial)
            if late:
                counts.late_dropped += 1
                if self._late_side_output:
                    late_value = {"late": {"event_time_ms": event_time_ms, "value": user_value}}
                    emitted.append((key, late_value, mapper, slot, seq, 0))
                return
            for name in touched:
                del state[name]
            state.update(windows.export_key(key))
            counts.window_corrections += len(corrections)
            emitted.extend(result_record(result, slot) for result in corrections)
            due_ms = windows.next_due_ms()
            if due_ms is not None:
                known.due_ms[key] = min(due_ms, known.due_ms.get(key, due_ms))

        return reduce_windowed

    def close_due(
        self,
        store: StateStore,
        owns: Callable[[Slot], bool],
        finished: Callable[[MapperId], Seq | None],
        emit: Callable[[list[Emitted]], None],
        owned: Iterable[Slot] = (),
    ) -> None:
        """Step 2 for the slots this node is primary of (``owns``, ``owned`` listing them), in
        ``store``; ``finished(mapper)`` is a finished mapper's last seq (None while it may
        send); ``emit`` takes the results. Each slot's watermark is noted in ``store`` (its
        next delta carries it). While writers are registered, every owned slot holds them,
        tuples or not: a node that gains the slot later learns of them from its record."""
        self.applying_to(store)
        for slot in [slot for slot in self._slots if not owns(slot)]:
            del self._slots[slot]
        now_ms = self._now_ms()
        self._registered = {
            mapper: registered_ms
            for mapper, registered_ms in self._registered.items()
            if now_ms - registered_ms < self._idle_timeout_ms and finished(mapper) is None
        }
        self._finished = {
            mapper: finished_ms
            for mapper, finished_ms in self._finished.items()
            if now_ms - finished_ms < self._idle_timeout_ms
        }
        for slot in self._unread(store, owns):
            self._read_slot(store, slot, now_ms)
        if self._registered:
            for slot in owned:
                self._slot(slot)
        for slot, known in self._slots.items():
            watermark = known.watermark
            for mapper in watermark.running():
                if finished(mapper) is not None:
                    watermark.finished(mapper, now_ms)
            before_ms = watermark.current_ms
            after_ms = watermark.advance(now_ms)
            store.note_watermark(slot, watermark.record(now_ms))
            if after_ms == before_ms:
                continue
            results = self._close_slot(store, slot, known, before_ms, after_ms)
            if results:
                emit(results)

    def _unread(self, store: StateStore, owns: Callable[[Slot], bool]) -> list[Slot]:
        """The owned slots holding state here that were not read since gained."""
        unread = {slot for slot, known in self._slots.items() if not known.read}
        unread.update(slot for slot in store.slots() if slot not in self._slots and owns(slot))
        return sorted(unread)

    def _read_slot(self, store: StateStore, slot: Slot, now_ms: int) -> None:
        """A slot gained (or first seen since the start): its keys' next due times and, when
        no checkpoint carried its watermark (a delta of version 2), a watermark at least the
        last instant of its newest closed window and the mappers of its hwm vector as known
        (they hold the watermark back until they finish or go idle)."""
        known = self._slot(slot)
        known.read = True
        floor_ms = START_OF_TIME_MS
        for _slot, key, state in store.items([slot]):
            windows = WindowedState.restore(self.spec, self._fold, START_OF_TIME_MS, {key: state})
            due_ms = windows.next_due_ms()
            if due_ms is not None:
                known.due_ms[key] = min(due_ms, known.due_ms.get(key, due_ms))
            for name, value in state.items():
                parsed = window_of_field(name)
                if parsed is not None and parsed[1] == REVISION_FIELD and value != NOT_CLOSED:
                    floor_ms = max(floor_ms, parsed[0].close_ms)
        known.watermark.hold_at_least(floor_ms)
        if known.resumed:
            return
        for mapper in store.hwm_vector(slot):
            if mapper not in known.watermark.mappers():
                known.watermark.heard(mapper, START_OF_TIME_MS, now_ms)

    def _close_slot(
        self, store: StateStore, slot: Slot, known: _Slot, before_ms: int, after_ms: int
    ) -> list[Emitted]:
        """Close and purge what the watermark's rise from ``before_ms`` to ``after_ms`` made
        due in ``slot``; the keys' fields written back; the results as records."""
        records: list[Emitted] = []
        due = sorted(
            (key for key, due_ms in known.due_ms.items() if due_ms <= after_ms),
            key=lambda key: (isinstance(key, int), key),
        )
        for key in due:
            state = store.read(slot, key)
            windows = WindowedState.restore(self.spec, self._fold, before_ms, {key: state})
            finals = windows.advance(after_ms)
            store.commit(slot, key, state, _written_back(state, windows.export_key(key)))
            self.counts.windows_closed += len(finals)
            records.extend(result_record(result, slot) for result in finals)
            due_ms = windows.next_due_ms()
            if due_ms is None:
                del known.due_ms[key]
            else:
                known.due_ms[key] = due_ms
        return records


def _written_back(state: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """``state`` with its window fields replaced by ``fields`` (a new dict)."""
    after = {name: value for name, value in state.items() if not name.startswith(FIELD_PREFIX)}
    after.update(fields)
    return after
