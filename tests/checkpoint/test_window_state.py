"""Specification of ``checkpoint.window_state``: windows folded, closed, corrected, merged and
purged as a plain model of the same windows says, whatever the order of event times.

The model knows nothing of timers or panes: it takes every tuple the lateness rule lets in
(``t + lateness > watermark`` at its arrival), puts it in the windows that hold it (sessions:
the connected runs of ``[t, t + gap)``), and folds each window's values in arrival order. The
code's results, read as a reader reads them (latest revision per window, replaced windows
deleted), must equal it once the watermark reaches the end of time.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from smr.checkpoint.window_state import WindowedState, WindowResult
from smr.checkpoint.windows import (
    END_OF_TIME_MS,
    START_OF_TIME_MS,
    Window,
    WindowSpec,
    assign,
    window_of_field,
)

KEYS = ["a", "b", 7]

Event = tuple[Any, ...]  # ("tuple", key, t, value) or ("watermark", ms)


def fold(key: Any, value: Any, state: dict[str, Any]) -> None:
    """Order-revealing: keeps the values in the order folded."""
    state["seq"] = (*state.get("seq", ()), value)
    state["n"] = state.get("n", 0) + 1


specs = st.one_of(
    st.builds(
        WindowSpec,
        kind=st.just("tumbling"),
        size_ms=st.integers(1, 30),
        allowed_lateness_ms=st.integers(0, 25),
    ),
    st.integers(1, 10).flatmap(
        lambda slide: st.builds(
            WindowSpec,
            kind=st.just("hopping"),
            slide_ms=st.just(slide),
            size_ms=st.integers(slide, 40),
            allowed_lateness_ms=st.integers(0, 25),
        )
    ),
    st.builds(
        WindowSpec,
        kind=st.just("session"),
        gap_ms=st.integers(1, 15),
        allowed_lateness_ms=st.integers(0, 25),
    ),
)

events = st.lists(
    st.one_of(
        st.tuples(st.just("tuple"), st.sampled_from(KEYS), st.integers(-20, 120), st.integers()),
        st.tuples(st.just("watermark"), st.integers(-30, 140)),
    ),
    max_size=60,
)


def model_windows(spec: WindowSpec, history: list[Event]) -> tuple[dict[Any, Any], int]:
    """The windows a plain fold of every taken tuple gives, and how many were dropped."""
    watermark = START_OF_TIME_MS
    taken: list[tuple[Any, int, Any]] = []
    dropped = 0
    for event in history:
        if event[0] == "watermark":
            watermark = max(watermark, event[1])
        elif event[2] + spec.allowed_lateness_ms > watermark:
            taken.append(event[1:])
        else:
            dropped += 1
    members: dict[tuple[Any, Window], list[Any]] = {}
    if spec.kind == "session":
        for key in {k for k, _, _ in taken}:
            times = sorted(t for k, t, _ in taken if k == key)
            runs: list[list[int]] = []
            for t in times:
                if runs and t < runs[-1][1]:
                    runs[-1][1] = max(runs[-1][1], t + spec.gap_ms)
                else:
                    runs.append([t, t + spec.gap_ms])
            for start, end in runs:
                members[(key, Window(start, end))] = [
                    v for k, t, v in taken if k == key and start <= t < end
                ]
    else:
        size = spec.size_ms
        slide = spec.slide_ms if spec.kind == "hopping" else size
        for key, t, value in taken:
            for k in range((t - size) // slide - 1, t // slide + 2):
                if k * slide <= t < k * slide + size:
                    members.setdefault((key, Window(k * slide, k * slide + size)), []).append(value)
    windows = {}
    for (key, window), values in members.items():
        state: dict[str, Any] = {}
        for value in values:
            fold(key, value, state)
        windows[(key, window)] = state
    return windows, dropped


def play(state: WindowedState, history: list[Event]) -> list[WindowResult]:
    """Feed ``history``, checking after each watermark that nothing is held past its purge."""
    results = []
    for event in history:
        if event[0] == "watermark":
            results += state.advance(event[1])
            assert_bounded(state)
        else:
            results += state.add(event[1], event[2], event[3])
    return results


def assert_bounded(state: WindowedState) -> None:
    lateness = state.spec.allowed_lateness_ms
    for key, window in state.held():
        assert window.purge_ms(lateness) > state.watermark_ms, (key, window, state.watermark_ms)


def read(results: list[WindowResult]) -> dict[Any, Any]:
    """What a reader of the output keeps: the latest state per window, replaced ones gone."""
    view: dict[Any, Any] = {}
    for result in results:
        for replaced in result.replaces:
            view.pop((result.key, replaced), None)
        view[(result.key, result.window)] = result.state
    return view


@settings(max_examples=400, deadline=None)
@given(specs, events)
def test_windows_read_back_equal_a_plain_fold_of_every_taken_tuple(spec, history):
    state = WindowedState(spec, fold)
    results = play(state, [*history, ("watermark", END_OF_TIME_MS)])
    expected, dropped = model_windows(spec, history)
    assert read(results) == expected
    assert state.late_dropped == dropped
    assert list(state.held()) == [] and state.timers_held() == 0  # closed windows leave


@settings(max_examples=300, deadline=None)
@given(specs, events)
def test_every_window_leaves_one_final_result_then_consecutive_corrections(spec, history):
    results = play(WindowedState(spec, fold), [*history, ("watermark", END_OF_TIME_MS)])
    revisions: dict[Any, list[int]] = {}
    for result in results:
        revisions.setdefault((result.key, result.window), []).append(result.revision)
    for window in read(results):
        assert revisions[window] == list(range(len(revisions[window])))


@settings(max_examples=300, deadline=None)
@given(specs, events, events)
def test_state_exported_to_slot_fields_and_restored_goes_on_as_the_original(spec, before, after):
    original = WindowedState(spec, fold)
    play(original, before)
    restored = WindowedState.restore(spec, fold, original.watermark_ms, original.exported())
    assert sorted(map(repr, restored.held())) == sorted(map(repr, original.held()))
    tail = [*after, ("watermark", END_OF_TIME_MS)]
    dropped_before = original.late_dropped
    assert play(restored, tail) == play(original, tail)
    assert restored.late_dropped == original.late_dropped - dropped_before


def test_a_correction_within_lateness_and_a_drop_beyond_it():
    late: list[tuple[Any, Any, int]] = []
    spec = WindowSpec("tumbling", size_ms=10, allowed_lateness_ms=5)
    state = WindowedState(spec, fold, on_late=lambda *t: late.append(t))
    state.add("k", 3, "x")
    [final] = state.advance(9)
    assert (final.window, final.state["n"], final.revision) == (Window(0, 10), 1, 0)
    assert state.add("k", 4, "w") == []  # 4 + 5 <= 9: dropped, though the window is held
    [correction] = state.add("k", 5, "y")  # 5 + 5 > 9: taken, the window already left
    assert (correction.state["seq"], correction.revision) == (("x", "y"), 1)
    assert state.advance(14) == [] and list(state.held()) == []  # purged at 9 + 5
    assert state.add("k", 9, "z") == [] and state.late_dropped == 2  # 9 + 5 <= 14
    assert late == [("k", "w", 4), ("k", "z", 9)]


def test_a_tuple_bridging_two_closed_sessions_replaces_both():
    state = WindowedState(WindowSpec("session", gap_ms=10, allowed_lateness_ms=100), fold)
    state.add("k", 0, 1)
    state.add("k", 15, 2)
    finals = state.advance(30)
    assert [r.window for r in finals] == [Window(0, 10), Window(15, 25)]
    [merged] = state.add("k", 8, 3)  # [8, 18) overlaps both
    assert merged.window == Window(0, 25) and merged.revision == 0
    assert merged.replaces == (Window(0, 10), Window(15, 25))
    assert merged.state["seq"] == (1, 2, 3)


def test_window_fields_name_their_window():
    state = WindowedState(WindowSpec("hopping", size_ms=10, slide_ms=5), fold)
    state.add("k", 7, "v")
    fields = state.export_key("k")
    assert fields["@5:15/n"] == 1 and fields["@0:10/seq"] == ("v",)
    assert window_of_field("@-5:5/n") == (Window(-5, 5), "n")
    assert window_of_field("count") is None and window_of_field("@x:y/n") is None


@given(specs, st.integers(-1000, 1000))
def test_assignment_holds_the_event_time_and_nothing_else(spec, t):
    windows = assign(spec, t)
    assert windows and all(w.start_ms <= t < w.end_ms for w in windows)
    if spec.kind == "hopping":
        slide, size = spec.slide_ms, spec.size_ms
        holding = [k for k in range(-2000, 2000) if k * slide <= t < k * slide + size]
        assert len(windows) == len(holding)


def test_memory_stays_bounded_over_a_long_stream():
    """A small soak: 5,000 windows' worth of event time for 10 keys, a little out of order;
    what is held never exceeds the windows open or within lateness, however long it runs."""
    spec = WindowSpec("hopping", size_ms=100, slide_ms=20, allowed_lateness_ms=50)
    state = WindowedState(spec, lambda k, v, s: s.update(n=s.get("n", 0) + 1))
    bound = 10 * ((spec.size_ms + spec.allowed_lateness_ms) // spec.slide_ms + 2)
    most_held = 0
    for t in range(0, 100_000, 7):
        state.add(t % 10, t - (t % 13), 1)
        if t % 70 == 0:
            state.advance(t - 30)
            most_held = max(most_held, len(list(state.held())))
            assert state.timers_held() <= 2 * bound
    assert 0 < most_held <= bound
    state.advance(END_OF_TIME_MS)
    assert list(state.held()) == [] and state.timers_held() == 0
