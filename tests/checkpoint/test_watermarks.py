"""Specification of ``checkpoint.watermarks``: a slot's watermark is the minimum over the
mappers that are neither idle nor finished, the end of time once all finished, held while
all are idle, and never lower than it was; and windows fed through it close as a plain
model of the same history says, idle and finished mappers included."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from smr.checkpoint.ids import MapperId
from smr.checkpoint.watermarks import SlotWatermark
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
