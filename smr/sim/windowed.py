"""A windowed job under the simulation's faults (``SimConfig.window_size_ms``): the mappers
stamp each word with an event time, the nodes fold it into its key's windows, and every
window's result read from the output files is checked against a plain model of the same
windows.

1. **The feed.** Mapper ``m``'s ``i``-th word has the event time ``i * event_step_ms`` less a
   seeded jitter of at most ``out_of_orderness_ms``: out of order, but never later than its
   mapper's out-of-orderness promises, so no tuple is late. Each mapper stamps its tuples as
   a real feed does (:class:`smr.windows.stamps.Stamper`); its mapper ids finish when it
   closes (a windowed run always finishes its mappers), so every slot's watermark reaches the
   end of time and every window closes.
2. **The model** (:func:`window_model`): per ``(key, window start, window end)``, how many
   words fall in it, computed from the words and event times with no code of the engine.
3. **The check** (:func:`check_windows`), once the run converged and the nodes ran a few
   checkpoint cycles more: the records of every node's output file, as a reader keeps them
   (once per origin), hold exactly one final result (revision 0) per window of the model,
   with the model's count; no correction (no tuple was late), no window the model has not,
   and every copy of one origin (a window closed again after a takeover) with one state.

Guarantee checked: with tuples that respect ``out_of_orderness_ms``, every window leaves one
final result, a fold of all its tuples, through the run's faults within ``r``. The nodes'
idle timeout is set past the run's length: a mapper held back by a fault must not be taken
for idle, which would (by design) let the watermark pass its delayed tuples.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from smr import agg
from smr.api import Job
from smr.checkpoint.windows import WindowSpec
from smr.output.records import parse_line
from smr.sim.config import SimConfig
from smr.windows import hopping, tumbling

__all__ = ["WindowedFeed", "check_windows", "event_times", "window_model", "windowed_job"]

# A window as the check names it: (key, start_ms, end_ms).
WindowName = tuple[str, int, int]


def window_spec(config: SimConfig) -> WindowSpec:
    """The run's windows: tumbling, or hopping when ``window_slide_ms`` is set."""
    if config.window_slide_ms:
        return hopping(
            config.window_size_ms,
            config.window_slide_ms,
            out_of_orderness_ms=config.out_of_orderness_ms,
        )
    return tumbling(config.window_size_ms, out_of_orderness_ms=config.out_of_orderness_ms)


def windowed_job(config: SimConfig) -> Job:
    """A windowed word count: ``agg.count()`` per word per window. Its ``map`` is never run
    (the simulated mappers emit stamped tuples themselves), nor its ``event_time``."""
    return Job(
        "simwindows",
        map=lambda record, emit: None,
        reduce=agg.count(),
        event_time=lambda record: 0,
        window=window_spec(config),
    )


def event_times(config: SimConfig, words: int, jitter: Sequence[int]) -> list[int]:
    """The event times of a mapper's ``words`` words: the ``i``-th at ``i * event_step_ms``
    less ``jitter[i]`` (each at most ``out_of_orderness_ms``), never before 0."""
    step_ms = config.event_step_ms
    return [max(0, index * step_ms - jitter[index]) for index in range(words)]


def _window_starts(spec: WindowSpec, event_time_ms: int) -> list[int]:
    """The starts of the windows ``event_time_ms`` falls in: every multiple of the slide
    (of the size, tumbling) in ``(event_time_ms - size_ms, event_time_ms]``."""
    slide_ms = spec.slide_ms or spec.size_ms
    newest = event_time_ms - event_time_ms % slide_ms
    oldest_after = event_time_ms - spec.size_ms
    return [start for start in range(newest, oldest_after, -slide_ms)]


def window_model(
    spec: WindowSpec, feeds: Mapping[str, tuple[Sequence[str], Sequence[int]]]
) -> Counter[WindowName]:
    """Per window of each word, how many of the feeds' words fall in it (``feeds``: per
    mapper, its words and their event times)."""
    model: Counter[WindowName] = Counter()
    for words, times in feeds.values():
        for word, event_time_ms in zip(words, times, strict=True):
            for start in _window_starts(spec, event_time_ms):
                model[(word, start, start + spec.size_ms)] += 1
    return model


class WindowedFeed:
    """The words and event times the run's mappers feed, kept for the model."""

    def __init__(self, config: SimConfig) -> None:
        self.spec = window_spec(config)
        self.feeds: dict[str, tuple[list[str], list[int]]] = {}

    def add_mapper(self, name: str, words: list[str], times: list[int]) -> None:
        self.feeds[name] = (words, times)

    def model(self) -> Counter[WindowName]:
        return window_model(self.spec, self.feeds)


class WindowedRun(Protocol):
    """What the check asks of the run: the feed it kept and the nodes' output files."""

    @property
    def windowed(self) -> WindowedFeed | None: ...

    @property
    def output_files(self) -> Mapping[str, bytearray]: ...


def read_results(files: Mapping[str, bytearray]) -> dict[str, list[dict[str, Any]]]:
    """The window results of every output file, by origin (as text), each copy kept."""
    results: dict[str, list[dict[str, Any]]] = {}
    for node_id in sorted(files):
        for line in bytes(files[node_id]).splitlines():
            record = parse_line(line)
            if record is None:
                continue
            origin = record["origin"]
            if not (isinstance(origin[0], str) and origin[0].startswith("@")):
                raise AssertionError(f"{node_id} wrote a record that is no window's: {record}")
            results.setdefault(json.dumps(origin), []).append(record)
    return results


def check_windows(sim: WindowedRun) -> int:
    """Step 3 of the module docstring; returns how many windows were checked."""
    feed = sim.windowed
    assert feed is not None, "a windowed run keeps its feed"
    model = feed.model()
    final: dict[WindowName, int] = {}
    problems: list[str] = []
    for origin, copies in read_results(sim.output_files).items():
        values = {json.dumps(copy["value"], sort_keys=True) for copy in copies}
        if len(values) > 1:
            problems.append(f"origin {origin} left with {len(values)} states: {sorted(values)}")
        value = copies[0]["value"]
        name = (copies[0]["key"], value["start_ms"], value["end_ms"])
        if value["revision"] != 0:
            problems.append(f"window {name} has a correction (revision {value['revision']})")
            continue
        if name in final:
            problems.append(f"window {name} left final twice under two origins")
        final[name] = value["state"].get("count", 0)
    missing = sorted(set(model) - set(final))
    if missing:
        problems.append(f"{len(missing)} of {len(model)} windows never closed, e.g. {missing[:4]}")
    extra = sorted(set(final) - set(model))
    if extra:
        problems.append(f"{len(extra)} windows the model has not, e.g. {extra[:4]}")
    wrong = sorted(name for name in set(model) & set(final) if final[name] != model[name])
    if wrong:
        problems.append(
            f"{len(wrong)} windows with a wrong count, e.g. "
            + ", ".join(f"{name}: {final[name]} != model {model[name]}" for name in wrong[:4])
        )
    if problems:
        raise AssertionError("windows: " + "; ".join(problems[:6]))
    return len(model)
