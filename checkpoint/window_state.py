"""Per-key, per-window state of a windowed job: fold, close on the watermark, correct, merge
sessions, purge (docs/design/windows.md).

:class:`WindowedState` takes tuples (``add``) and watermarks (``advance``) and hands back the
:class:`WindowResult` records that leave: a window's final result (revision 0) when the
watermark reaches its last instant, a correction (the next revision) when a tuple within the
allowed lateness changes a window that already left. A tuple later than that is dropped and
counted. Sessions keep the values they took, in arrival order, so that a merge folds them
again into one state.

Guarantees, property-tested against a plain model (tests/checkpoint/test_window_state.py):
a reader that keeps the latest revision per ``(key, window)`` and deletes what each record
replaces ends, once the watermark reaches the end of time, with exactly the windows a plain
fold of every taken tuple gives; every window it ends with left exactly one final result;
after every ``advance`` no window is held past its purge time, so memory is bounded by the
windows open or within lateness. :meth:`export_key` and :meth:`restore` turn the state into
fields of its key's slot state and back, and a restored state goes on exactly as the original.
Pure: no I/O, nothing from ``smr``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from smr.checkpoint.ids import Key
from smr.checkpoint.windows import (
    START_OF_TIME_MS,
    Window,
    WindowSpec,
    assign,
    is_taken,
    overlaps,
    span,
    window_field,
    window_of_field,
)

__all__ = ["Fold", "WindowResult", "WindowedState", "latest_windows"]

Fold = Callable[[Key, Any, dict[str, Any]], None]
"""Folds one value of a key into a window's state (a dict it mutates)."""

NOT_CLOSED: Final = -1
# Field names of a window's bookkeeping in its key's state, beside the user's fields.
REVISION_FIELD: Final = "#revision"
VALUES_FIELD: Final = "#values"
REPLACES_FIELD: Final = "#replaces"
_CLOSE, _PURGE = 0, 1


@dataclass(frozen=True)
class WindowResult:
    """A window's result as it leaves: its key, window, whole state, revision (0 the final
    result, each correction one more) and the windows it replaces (sessions merged with
    windows that already left)."""

    key: Key
    window: Window
    state: dict[str, Any]
    revision: int
    replaces: tuple[Window, ...] = ()

    @property
    def is_final(self) -> bool:
        return self.revision == 0


@dataclass
class _Pane:
    """One window of one key: its state, the revision that last left (``NOT_CLOSED``
    before it closed), a session's values with their arrival numbers, and the windows that
    already left which its next result replaces."""

    state: dict[str, Any] = field(default_factory=dict)
    revision: int = NOT_CLOSED
    values: list[tuple[int, Any]] = field(default_factory=list)
    replaces: tuple[Window, ...] = ()


class WindowedState:
    """The windows of a set of keys (one slot's, in the ring) under one :class:`WindowSpec`.

    ``fold(key, value, state)`` folds one value into a window's state. ``late_dropped``
    counts the tuples the lateness rule dropped; ``on_late(key, value, event_time_ms)`` when
    given hears of each (a side output)."""

    def __init__(
        self,
        spec: WindowSpec,
        fold: Fold,
        on_late: Callable[[Key, Any, int], None] | None = None,
        *,
        watermark_ms: int = START_OF_TIME_MS,
        fields_by_key: Mapping[Key, Mapping[str, Any]] | None = None,
    ) -> None:
        """Empty windows, or with ``fields_by_key`` the windows those fields hold (see
        :meth:`restore`)."""
        self.spec = spec
        self._fold = fold
        self._on_late = on_late
        self._panes: dict[Key, dict[Window, _Pane]] = {}
        # (due_ms, close or purge, window, key is an int, key): one order for every node
        # that holds the same windows, however they arrived or were restored.
        self._timers: list[tuple[int, int, Window, bool, Key]] = []
        self._arrivals = 0
        self._watermark_ms = watermark_ms
        self.late_dropped = 0
        if fields_by_key:
            self._restore(fields_by_key)

    @property
    def watermark_ms(self) -> int:
        return self._watermark_ms

    def add(self, key: Key, event_time_ms: int, value: Any) -> list[WindowResult]:
        """Fold one tuple into its windows and return the corrections it causes (windows that
        already left); a tuple the lateness rule drops changes nothing and is counted. If
        ``fold`` raises, no state changes and the error goes to the caller."""
        if not is_taken(event_time_ms, self._watermark_ms, self.spec.allowed_lateness_ms):
            self.late_dropped += 1
            if self._on_late is not None:
                self._on_late(key, value, event_time_ms)
            return []
        self._arrivals += 1
        if self.spec.merging:
            result = self._add_to_session(key, event_time_ms, value)
            return [] if result is None else [result]
        panes = self._panes.get(key)
        if panes is None:
            panes = self._panes[key] = {}
        folded = []
        for window in assign(self.spec, event_time_ms):  # every window folded, then kept
            pane = panes.get(window)
            state = {} if pane is None else dict(pane.state)
            self._fold(key, value, state)
            folded.append((window, pane, state))
        corrections = []
        for window, pane, state in folded:
            if pane is None:
                pane = panes[window] = _Pane()
                self._push(window.close_ms, _CLOSE, key, window)
            pane.state = state
            if pane.revision != NOT_CLOSED:
                pane.revision += 1
                corrections.append(WindowResult(key, window, dict(state), pane.revision))
        return corrections

    def _add_to_session(self, key: Key, event_time_ms: int, value: Any) -> WindowResult | None:
        """A session tuple: its window ``[t, t + gap)`` merged with every session of the key it
        overlaps, the values of all of them folded again in arrival order."""
        panes = self._panes.setdefault(key, {})
        own = assign(self.spec, event_time_ms)[0]
        merged_with = [w for w in panes if overlaps(w, own)]
        window = span([own, *merged_with])
        values = sorted(
            [(self._arrivals, value)] + [v for w in merged_with for v in panes[w].values]
        )
        state: dict[str, Any] = {}
        for _arrival, each in values:
            self._fold(key, each, state)
        same = panes.get(window)
        replaces = {r for w in merged_with for r in panes[w].replaces}
        replaces.update(w for w in merged_with if w != window and panes[w].revision != NOT_CLOSED)
        for w in merged_with:
            del panes[w]
        pane = _Pane(state, NOT_CLOSED if same is None else same.revision, values)
        pane.replaces = tuple(sorted(replaces))
        panes[window] = pane
        if same is None:
            self._push(window.close_ms, _CLOSE, key, window)
        if window.close_ms > self._watermark_ms:
            return None  # still open: its final result, when it closes, replaces them
        return self._leave(key, window, pane)

    def _leave(self, key: Key, window: Window, pane: _Pane) -> WindowResult:
        """The window's next revision leaves (its final result if it had not closed)."""
        if pane.revision == NOT_CLOSED:
            self._push(window.purge_ms(self.spec.allowed_lateness_ms), _PURGE, key, window)
        pane.revision += 1
        result = WindowResult(key, window, dict(pane.state), pane.revision, pane.replaces)
        pane.replaces = ()
        return result

    def advance(self, watermark_ms: int) -> list[WindowResult]:
        """Raise the watermark to ``watermark_ms`` (a lower one changes nothing), close every
        window whose last instant it reached and purge every closed window whose lateness it
        passed. The final results come in one order, by closing time, window, then key,
        whatever order the windows arrived in (a restored state gives the same list)."""
        self._watermark_ms = max(self._watermark_ms, watermark_ms)
        finals = []
        while self._timers and self._timers[0][0] <= self._watermark_ms:
            _due, what, window, _is_int, key = heapq.heappop(self._timers)
            pane = self._panes.get(key, {}).get(window)
            if pane is None:
                continue  # merged into another session, or purged: the timer is stale
            if what == _CLOSE and pane.revision == NOT_CLOSED:
                finals.append(self._leave(key, window, pane))
            elif what == _PURGE and pane.revision != NOT_CLOSED:
                self._purge(key, window)
        return finals

    def _purge(self, key: Key, window: Window) -> None:
        panes = self._panes[key]
        del panes[window]
        if not panes:
            del self._panes[key]

    def _push(self, due_ms: int, what: int, key: Key, window: Window) -> None:
        heapq.heappush(self._timers, (due_ms, what, window, isinstance(key, int), key))

    def held(self) -> Iterator[tuple[Key, Window]]:
        """Every ``(key, window)`` whose state is in memory."""
        for key, panes in self._panes.items():
            for window in panes:
                yield key, window

    def next_due_ms(self) -> int | None:
        """The watermark at which :meth:`advance` next has something to do (a close or a
        purge; a stale timer may make it early, never late), or None when nothing is held:
        what a node's index of due keys keeps per key."""
        return self._timers[0][0] if self._timers else None

    def timers_held(self) -> int:
        """Timers in memory (stale ones included until they come due)."""
        return len(self._timers)

    def export_key(self, key: Key) -> dict[str, Any]:
        """``key``'s windows as fields of its slot state (``@<start>:<end>/<field>``), with
        each window's revision, and a session's values and what it replaces
        (docs/design/windows.md#window-state-is-slot-state)."""
        fields: dict[str, Any] = {}
        for window, pane in self._panes.get(key, {}).items():
            for name, value in pane.state.items():
                fields[window_field(window, name)] = value
            fields[window_field(window, REVISION_FIELD)] = pane.revision
            if self.spec.merging:
                fields[window_field(window, VALUES_FIELD)] = [list(v) for v in pane.values]
                fields[window_field(window, REPLACES_FIELD)] = [
                    [w.start_ms, w.end_ms] for w in pane.replaces
                ]
        return fields

    def exported(self) -> dict[Key, dict[str, Any]]:
        """Every key's fields (:meth:`export_key`)."""
        return {key: self.export_key(key) for key in self._panes}

    @classmethod
    def restore(
        cls,
        spec: WindowSpec,
        fold: Fold,
        watermark_ms: int,
        fields_by_key: Mapping[Key, Mapping[str, Any]],
        on_late: Callable[[Key, Any, int], None] | None = None,
    ) -> WindowedState:
        """A state rebuilt from slot state (a promoted replica, a moved slot, a restart): the
        windows from their fields and the timers derived from their bounds."""
        return cls(spec, fold, on_late, watermark_ms=watermark_ms, fields_by_key=fields_by_key)

    def _restore(self, fields_by_key: Mapping[Key, Mapping[str, Any]]) -> None:
        for key, fields in fields_by_key.items():
            for name, value in fields.items():
                parsed = window_of_field(name)
                if parsed is None:
                    continue
                window, field_name = parsed
                pane = self._panes.setdefault(key, {}).setdefault(window, _Pane())
                self._restore_field(pane, field_name, value)
        lateness_ms = self.spec.allowed_lateness_ms
        for key, panes in self._panes.items():
            for window, pane in panes.items():
                if pane.revision == NOT_CLOSED:
                    self._push(window.close_ms, _CLOSE, key, window)
                else:
                    self._push(window.purge_ms(lateness_ms), _PURGE, key, window)

    def _restore_field(self, pane: _Pane, field_name: str, value: Any) -> None:
        if field_name == REVISION_FIELD:
            pane.revision = value
        elif field_name == VALUES_FIELD:
            pane.values = [(arrival, each) for arrival, each in value]
            self._arrivals = max([self._arrivals, *(arrival for arrival, _ in pane.values)])
        elif field_name == REPLACES_FIELD:
            pane.replaces = tuple(Window(start, end) for start, end in value)
        else:
            pane.state[field_name] = value


def latest_windows(results: list[WindowResult]) -> dict[tuple[Key, Window], dict[str, Any]]:
    """What a reader of the results keeps, in order: the latest state per ``(key, window)``,
    the windows a result replaces deleted."""
    view: dict[tuple[Key, Window], dict[str, Any]] = {}
    for result in results:
        for replaced in result.replaces:
            view.pop((result.key, replaced), None)
        view[(result.key, result.window)] = result.state
    return view
