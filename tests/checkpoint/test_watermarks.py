"""Specification of ``checkpoint.watermarks``: a slot's watermark is the minimum over the
mappers that are neither idle nor finished, the end of time once all finished, held while
all are idle, and never lower than it was; windows fed through it close as a plain
model of the same history says, idle and finished mappers included; and a slot's watermark
travels with the slot (its record through a swap, a replica, a snapshot, a promotion and a
move) and goes on, resumed from it, as the original does."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from smr.checkpoint.delta import Delta, decode_delta, encode_delta
from smr.checkpoint.delta_parts import restrict_delta
from smr.checkpoint.ids import MapperId, Slot
from smr.checkpoint.store import StateStore
from smr.checkpoint.watermarks import (
    MapperStanding,
    SlotWatermark,
    WatermarkRecord,
    merge_records,
)
from smr.checkpoint.window_state import WindowedState, latest_windows
from smr.checkpoint.windows import END_OF_TIME_MS, START_OF_TIME_MS, Window, WindowSpec

IDLE_MS = 50
MAPPERS = [MapperId("m1"), MapperId("m2"), MapperId("m3")]

# ("heard", mapper, stamp_ms, pause_ms) | ("finished", mapper, pause_ms) | ("advance", pause_ms):
# pause_ms of the node's clock pass before each step.
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("heard"), st.sampled_from(MAPPERS), st.integers(-10, 200), st.integers(0, 40)
        ),
        st.tuples(st.just("finished"), st.sampled_from(MAPPERS), st.integers(0, 40)),
        st.tuples(st.just("advance"), st.integers(0, 80)),
    ),
    max_size=50,
)


def model_watermark(history: list[tuple[Any, ...]], now_ms: int, previous_ms: int) -> int:
    """The slot's watermark at ``now_ms`` from every step so far, written from the rules."""
    stamps: dict[str, int] = {}
    heard: dict[str, int] = {}
    done: set[str] = set()
    for step, at_ms in history:
        if step[0] == "finished":
            done.add(step[1])
            heard[step[1]] = at_ms
            stamps.setdefault(step[1], START_OF_TIME_MS)
        elif step[0] == "heard" and step[1] not in done:
            stamps[step[1]] = max(stamps.get(step[1], START_OF_TIME_MS), step[2])
            heard[step[1]] = at_ms
    holding = [stamps[m] for m in stamps if m not in done and now_ms - heard[m] < IDLE_MS]
    if holding:
        return max(previous_ms, min(holding))
    if stamps and set(stamps) == done:
        return END_OF_TIME_MS
    return previous_ms


@settings(max_examples=500, deadline=None)
@given(steps)
def test_slot_watermark_follows_the_rules(plan):
    slot = SlotWatermark(IDLE_MS)
    now_ms = 0
    history: list[tuple[Any, ...]] = []
    previous_ms = START_OF_TIME_MS
    for step in plan:
        now_ms += step[-1]
        history.append((step, now_ms))
        if step[0] == "heard":
            slot.heard(step[1], step[2], now_ms)
        elif step[0] == "finished":
            slot.finished(step[1], now_ms)
        else:
            current_ms = slot.advance(now_ms)
            assert current_ms == model_watermark(history, now_ms, previous_ms)
            assert current_ms >= previous_ms
            previous_ms = current_ms


def test_an_idle_mapper_stops_holding_windows_open_and_a_finished_one_never_again():
    slot = SlotWatermark(idle_timeout_ms=100)
    windows = WindowedState(WindowSpec("tumbling", size_ms=10), lambda k, v, s: s.update(n=1))
    slot.heard(MapperId("busy"), 5, now_ms=0)
    slot.heard(MapperId("quiet"), 0, now_ms=0)
    windows.add("k", 3, 1)
    assert windows.advance(slot.advance(now_ms=50)) == []  # quiet holds it at 0
    slot.heard(MapperId("busy"), 25, now_ms=120)
    [final] = windows.advance(slot.advance(now_ms=120))  # quiet idle for 120 ms
    assert final.window == Window(0, 10) and slot.current_ms == 25
    slot.heard(MapperId("quiet"), 2, now_ms=130)  # awake again, behind: cannot lower it
    assert slot.advance(now_ms=130) == 25
    windows.add("k", 2, 1)  # its old tuple is late, counted
    assert windows.late_dropped == 1
    slot.finished(MapperId("quiet"), now_ms=140)
    slot.finished(MapperId("busy"), now_ms=140)
    assert slot.advance(now_ms=140) == END_OF_TIME_MS


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(MAPPERS), st.integers(0, 100), st.integers(0, 30)), max_size=60
    ),
    st.sets(st.sampled_from(MAPPERS)),
)
def test_windows_fed_by_several_mappers_equal_a_model_whatever_idles_or_finishes(feed, finishers):
    """Mappers with out-of-order event times stamp their own watermark (largest event time
    minus 10 ms); a mapper that goes quiet idles out; at the end the finishers finish and,
    if some did not, their idleness lets the rest close. Whatever was taken reads back as the
    model's windows, and what was dropped is counted."""
    spec = WindowSpec("tumbling", size_ms=20, allowed_lateness_ms=5)
    slot = SlotWatermark(IDLE_MS)
    windows = WindowedState(spec, lambda k, v, s: s.update(sum=s.get("sum", 0) + v))
    largest: dict[str, int] = {}
    taken: list[tuple[int, int]] = []
    results = []
    now_ms = 0
    for mapper, event_time_ms, pause_ms in feed:
        now_ms += pause_ms
        watermark_ms = windows.watermark_ms
        if event_time_ms + spec.allowed_lateness_ms > watermark_ms:
            taken.append((event_time_ms, event_time_ms))
        results += windows.add("k", event_time_ms, event_time_ms)
        largest[mapper] = max(largest.get(mapper, event_time_ms), event_time_ms)
        slot.heard(mapper, largest[mapper] - 10, now_ms)
        results += windows.advance(slot.advance(now_ms))
    for mapper in finishers:
        slot.finished(mapper, now_ms)
    results += windows.advance(slot.advance(now_ms + IDLE_MS))
    if slot.current_ms != END_OF_TIME_MS:  # someone never finished: close by hand
        results += windows.advance(END_OF_TIME_MS)
    expected: dict[Any, Any] = {}
    for event_time_ms, value in taken:
        window = Window(event_time_ms // 20 * 20, event_time_ms // 20 * 20 + 20)
        expected.setdefault(("k", window), {"sum": 0})["sum"] += value
    assert latest_windows(results) == expected
    assert windows.late_dropped == len(feed) - len(taken)
    assert list(windows.held()) == []


@settings(max_examples=300, deadline=None)
@given(steps, steps)
def test_a_watermark_resumed_from_its_record_goes_on_as_the_original(before, after):
    """Resumed from its record (through the delta codec), a slot's watermark is the
    original's, with the same mappers idle and finished; and it goes on exactly as the
    original through any later steps when its active mappers were last heard from at the
    resume (when they were is the one thing the record leaves out: it is of the old owner's
    clock)."""
    original = SlotWatermark(IDLE_MS)
    now_ms = 0
    for step in before:
        now_ms += step[-1]
        _play(original, step, now_ms)
    for mapper, standing in original.mappers().items():
        if not original.is_idle(mapper, now_ms):
            original.heard(mapper, standing.watermark_ms, now_ms)
    record = decode_delta(
        encode_delta(Delta({}, {}, watermarks={Slot(0): original.record(now_ms)}))
    ).watermarks[Slot(0)]
    resumed = SlotWatermark.resumed(IDLE_MS, record, now_ms)
    assert resumed.current_ms == original.current_ms
    assert resumed.record(now_ms) == original.record(now_ms)
    for step in after:
        now_ms += step[-1]
        _play(original, step, now_ms)
        _play(resumed, step, now_ms)
        assert resumed.current_ms == original.current_ms
    assert resumed.advance(now_ms + IDLE_MS) == original.advance(now_ms + IDLE_MS)


def test_a_mapper_idle_at_the_old_owner_stays_idle_and_an_active_one_holds_back():
    """A node that gains the slot does not wait out the idle timeout of a mapper that had
    already gone quiet, and an active mapper holds the watermark back there as it did."""
    old = SlotWatermark(idle_timeout_ms=100)
    old.heard(MapperId("quiet"), 5, now_ms=0)
    old.heard(MapperId("busy"), 50, now_ms=150)
    assert old.advance(now_ms=160) == 50  # quiet for 160 ms: only busy counts
    resumed = SlotWatermark.resumed(100, old.record(160), now_ms=9_000)
    assert resumed.current_ms == 50
    resumed.heard(MapperId("busy"), 70, now_ms=9_010)
    assert resumed.advance(now_ms=9_010) == 70  # quiet still idle
    resumed.heard(MapperId("quiet"), 60, now_ms=9_020)
    assert resumed.advance(now_ms=9_020) == 70  # awake behind: cannot lower it
    assert resumed.record(9_020).mappers[MapperId("quiet")] == MapperStanding(60, False, False)


def _play(slot: SlotWatermark, step: tuple[Any, ...], now_ms: int) -> None:
    if step[0] == "heard":
        slot.heard(step[1], step[2], now_ms)
    elif step[0] == "finished":
        slot.finished(step[1], now_ms)
    else:
        slot.advance(now_ms)


records = st.builds(
    WatermarkRecord,
    st.integers(-50, 50),
    st.dictionaries(
        st.sampled_from(MAPPERS),
        st.builds(MapperStanding, st.integers(-50, 50), st.booleans(), st.booleans()),
    ),
)


@given(records, records, records)
def test_merging_records_keeps_the_later_of_each_part_in_any_order(a, b, c):
    merged = merge_records(a, b)
    assert merged == merge_records(b, a)
    assert merge_records(merged, c) == merge_records(a, merge_records(b, c))
    assert merge_records(merged, a) == merged
    assert merged.current_ms == max(a.current_ms, b.current_ms)
    for mapper, (watermark_ms, finished, idle) in merged.mappers.items():
        sides = [r.mappers[mapper] for r in (a, b) if mapper in r.mappers]
        assert watermark_ms == max(side.watermark_ms for side in sides)
        assert finished == any(side.finished for side in sides)
        assert idle == all(side.idle for side in sides)


def test_a_slot_watermark_travels_with_the_slot_through_swap_replica_snapshot_and_adopt():
    """Noted by the primary, the record leaves with the next swap and only then; a replica
    applying the deltas holds it (an older delta after a newer never lowers it); a snapshot
    and a promotion (adopt) carry it with the slot's state; a move's copy (restrict_delta)
    carries only its slots'; dropping the slot forgets it."""
    primary, replica = StateStore(), StateStore()
    early = WatermarkRecord(10, {MapperId("m1"): MapperStanding(12, False, False)})
    late = WatermarkRecord(
        40,
        {
            MapperId("m1"): MapperStanding(45, False, False),
            MapperId("m2"): MapperStanding(41, True, False),
        },
    )
    primary.note_watermark(Slot(3), early)
    first = primary.swap()
    primary.merge_inactive()
    assert first.watermarks == {Slot(3): early}
    assert primary.swap().watermarks == {}, "an unchanged watermark is not shipped again"
    primary.merge_inactive()
    primary.note_watermark(Slot(3), late)
    primary.note_watermark(Slot(5), early)
    second = primary.swap()
    primary.merge_inactive()
    for delta in (second, first):  # the older one last
        replica.apply_delta(decode_delta(encode_delta(delta)))
    assert replica.watermark(Slot(3)) == late and replica.watermark(Slot(5)) == early
    assert Slot(5) in replica.slots(), "a slot with only a watermark is a slot of the store"
    snapshot = decode_delta(encode_delta(replica.snapshot([Slot(3)])))
    assert snapshot.watermarks == {Slot(3): late}
    successor = StateStore()
    successor.adopt(replica, {Slot(3), Slot(5)})
    assert successor.watermark(Slot(3)) == late and replica.watermark(Slot(3)) is None
    assert restrict_delta(second, {Slot(5)}).watermarks == {Slot(5): early}
    successor.drop_slots([Slot(3)])
    assert successor.watermark(Slot(3)) is None and successor.watermark(Slot(5)) == early
