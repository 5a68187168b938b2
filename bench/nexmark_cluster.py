"""Nexmark Q5 and Q7 (``examples/nexmark.py``) on a local cluster of real node processes on
127.0.0.1: the events fed through ``smr.connect(job=...)`` with their event time, each
window's result read from the nodes' output files as it appears.

A run (:func:`run_unpaced`, :func:`run_paced`):

1. Start a fresh cluster of the query's job (``bench.harness.local_cluster``: ``nodes``,
   ``r``, ``2**slot_bits`` slots, the checkpoint interval); a fresh one per run, since a
   second feed of the same event times into closed windows would be corrections.
2. Feed the events through one connection: the job's own ``map`` over each event, each tuple
   sent with ``emit(key, value, event_time=...)``; unpaced, as fast as the client goes;
   paced, each event sent at its event time divided by a speed-up, on the wall clock.
   Closing the connection tells the nodes the feed finished: every window still open closes.
3. Read the results (:class:`OutputWatcher`): each node's file ``DIR/output/ID.jsonl`` from
   the byte it was read to, whole lines only, each origin once (``smr.output.records``), a
   result keyed ``(auction, (start_ms, end_ms))`` as the plain-Python model keys its
   windows. A run is done when it holds as many windows as the model does, or at a timeout
   (then it is short, and compared unequal).

Q5's second stage (the maximum count over a window's auctions) is not chained in the ring,
which runs one job per cluster: it is ``examples.nexmark.hottest`` over the first stage's
windows read from the output, as in-process and for Spark.

Latency (paced): for each window, the wall time from the moment the first tuple at or past
its end plus the out-of-orderness was sent (the tuple whose stamp lets the watermark reach
the window's last instant) to the moment its result was read from the output file (polled
every ``POLL_S``). A slot's watermark rises with the tuples that reach that slot, and
windows close in the nodes' checkpoint cycle, so the figure holds the wait for the key's
slot to hear a later tuple and for the next checkpoint. Windows whose end no event passed
close only when the feed finishes: they are counted, not measured.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import smr
from bench.harness import local_cluster
from examples.nexmark import SLIDE_MS, WINDOW_MS, q5, q7
from smr.api import Job
from smr.output.files import read_lines
from smr.output.records import Repeats, parse_line

__all__ = [
    "ClusterOptions",
    "OutputWatcher",
    "PacedRun",
    "UnpacedRun",
    "run_paced",
    "run_unpaced",
]

REPO: Final = Path(__file__).resolve().parents[1]
JOBS: Final = {"q5": (q5, "count", SLIDE_MS), "q7": (q7, "max", WINDOW_MS)}
"""Per query: its job, the state field of its result, and the step between window ends."""
POLL_S: Final = 0.002
"""How often the output files are read for new results (a few ms: well under the 100 ms
latency target, and cheap: only the bytes added since are read)."""
READ_BYTES: Final = 1 << 20

Windows = dict[tuple[int, tuple[int, int]], int]


@dataclass(frozen=True)
class ClusterOptions:
    """The cluster a run starts and how its client sends. Few slots (16 by default) so that
    every slot hears tuples all along: a slot's watermark rises only with tuples that reach
    it, and one holding only auctions that got no more bids would keep its windows open
    until the feed ends. Windows close in the checkpoint cycle: its interval bounds how
    soon a result leaves, and a short one costs throughput (``bench/nexmark.py`` runs its
    paced runs at 20 ms, its unpaced ones at 200 ms)."""

    nodes: int = 2
    replication: int = 1
    slot_bits: int = 4
    checkpoint_interval_ms: int = 200
    linger_ms: float = 5.0
    results_timeout_s: float = 60.0


def job_ref(name: str) -> str:
    """The job reference the nodes load for query ``name``."""
    return f"{REPO / 'examples' / 'nexmark.py'}:{name}"


@dataclass
class OutputWatcher:
    """The window results in ``output_dir`` (step 3 of the module docstring), each with the
    monotonic time it was first read. ``corrections`` counts results of a window read before
    (revision above 0, or a second final): none when no tuple is late."""

    output_dir: Path
    field_name: str
    windows: Windows = field(default_factory=dict)
    read_at_s: dict[tuple[int, tuple[int, int]], float] = field(default_factory=dict)
    corrections: int = 0
    _offsets: dict[Path, int] = field(default_factory=dict)
    _repeats: Repeats = field(default_factory=Repeats)

    def poll(self) -> int:
        """Read what the files gained since the last poll; the count of new results."""
        found = 0
        for path in sorted(self.output_dir.glob("*.jsonl")):
            offset = self._offsets.get(path, 0)
            while True:
                data, offset, size = read_lines(path, offset, READ_BYTES)
                found += self._take(data, time.monotonic())
                if offset >= size or not data:
                    break
            self._offsets[path] = offset
        return found

    def _take(self, data: bytes, now_s: float) -> int:
        found = 0
        for line in data.splitlines():
            record = parse_line(line)
            if record is None or self._repeats.is_repeat(record.get("origin")):
                continue
            value = record["value"]
            name = (record["key"], (value["start_ms"], value["end_ms"]))
            if name in self.windows or value["revision"] != 0:
                self.corrections += 1
            else:
                self.read_at_s[name] = now_s
                found += 1
            self.windows[name] = value["state"][self.field_name]
        return found

    def wait_for(self, count: int, timeout_s: float) -> bool:
        """Poll until ``count`` windows are read (True) or ``timeout_s`` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            if len(self.windows) >= count:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


def send_events(connection: smr.Cluster, job: Job, events: Iterable[dict[str, Any]]) -> None:
    """Each event through the job's ``map``, every tuple sent with the event's time."""
    user_map, event_time, emit = job.map, job.event_time, connection.emit
    assert user_map is not None and event_time is not None
    time_ms = 0

    def send(key: Any, value: Any) -> None:
        emit(key, value, event_time=time_ms)

    for event in events:
        time_ms = event_time(event)
        user_map(event, send)


@dataclass
class UnpacedRun:
    """An unpaced run: the windows read, the wall time from the first event sent to the last
    window read (the cluster already up), and whether every window came in time."""

    windows: Windows
    seconds: float
    complete: bool
    corrections: int


def run_unpaced(
    name: str, events: Iterable[dict[str, Any]], expected_windows: int, options: ClusterOptions
) -> UnpacedRun:
    """Query ``name`` over ``events`` fed as fast as the client sends (steps 1-3)."""
    job, field_name, _ = JOBS[name]
    with _cluster(name, options) as cluster_dir:
        watcher = OutputWatcher(cluster_dir / "output", field_name)
        with smr.connect(cluster_dir, job=job_ref(name), linger_ms=options.linger_ms) as conn:
            started = time.perf_counter()
            send_events(conn, job, events)
        complete = watcher.wait_for(expected_windows, options.results_timeout_s)
        seconds = time.perf_counter() - started
    return UnpacedRun(watcher.windows, seconds, complete, watcher.corrections)


@dataclass
class PacedRun:
    """A paced run: the windows read, each measured window's latency (ms), the windows that
    closed only when the feed finished, and how far the feed fell behind its pace (ms)."""

    windows: Windows
    latencies_ms: list[float]
    latencies_by_end_ms: dict[int, list[float]]
    closed_at_finish: int
    complete: bool
    corrections: int
    behind_pace_ms_max: float


def run_paced(
    name: str,
    events: Iterable[dict[str, Any]],
    expected_windows: int,
    speedup: float,
    options: ClusterOptions,
) -> PacedRun:
    """Query ``name`` over ``events`` sent in real time (event time over ``speedup``), the
    output watched by a thread meanwhile; latencies as the module docstring defines them."""
    job, field_name, step_ms = JOBS[name]
    spec = job.window
    assert spec is not None
    with _cluster(name, options) as cluster_dir:
        watcher = OutputWatcher(cluster_dir / "output", field_name)
        stop = threading.Event()
        thread = threading.Thread(target=_watch, args=(watcher, stop), daemon=True)
        thread.start()
        try:
            with smr.connect(cluster_dir, job=job_ref(name), linger_ms=options.linger_ms) as conn:
                pace = _Pace(speedup, step_ms, spec.out_of_orderness_ms)
                send_events(conn, job, pace.paced(events))
        finally:
            stop.set()
            thread.join()
        complete = watcher.wait_for(expected_windows, options.results_timeout_s)
    by_end_ms: dict[int, list[float]] = {}
    at_finish = 0
    for (_auction, (_start_ms, end_ms)), read_at_s in watcher.read_at_s.items():
        fed_at_s = pace.end_sent_at_s.get(end_ms)
        if fed_at_s is None:
            at_finish += 1
        else:
            by_end_ms.setdefault(end_ms, []).append((read_at_s - fed_at_s) * 1000)
    return PacedRun(
        watcher.windows,
        [ms for end_ms in sorted(by_end_ms) for ms in by_end_ms[end_ms]],
        by_end_ms,
        at_finish,
        complete,
        watcher.corrections,
        pace.behind_ms_max,
    )


def _watch(watcher: OutputWatcher, stop: threading.Event) -> None:
    while not stop.is_set():
        watcher.poll()
        time.sleep(POLL_S)


class _Pace:
    """Events let through at their event time over ``speedup`` on the wall clock (from the
    first one's); per window end (a multiple of ``step_ms``), the monotonic time the first
    bid at or past it plus the out-of-orderness was let through (Nexmark's jobs send tuples
    for bids only: that bid's tuple carries the watermark past the end)."""

    def __init__(self, speedup: float, step_ms: int, out_of_orderness_ms: int) -> None:
        self._speedup = speedup
        self._step_ms = step_ms
        self._out_of_orderness_ms = out_of_orderness_ms
        self.end_sent_at_s: dict[int, float] = {}
        self.behind_ms_max = 0.0

    def paced(self, events: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """``events``, each yielded at its time; an end is marked sent when the bid that
        passes it is yielded, just before its tuples are sent (so a latency also holds the
        time to send them)."""
        first_ms: int | None = None
        start_s = time.monotonic()
        next_end_ms = 0
        for event in events:
            time_ms = int(event["date_time"])
            if first_ms is None:
                first_ms = time_ms
                next_end_ms = (time_ms // self._step_ms + 1) * self._step_ms
            due_s = start_s + (time_ms - first_ms) / 1000 / self._speedup
            now_s = time.monotonic()
            if due_s > now_s:
                time.sleep(due_s - now_s)
            else:
                self.behind_ms_max = max(self.behind_ms_max, (now_s - due_s) * 1000)
            sent_s = time.monotonic()
            while time_ms >= next_end_ms + self._out_of_orderness_ms and event["kind"] == "bid":
                self.end_sent_at_s[next_end_ms] = sent_s
                next_end_ms += self._step_ms
            yield event


@contextlib.contextmanager
def _cluster(name: str, options: ClusterOptions) -> Iterator[Path]:
    """Step 1: a fresh cluster of query ``name``'s job; its directory, stopped on the way out."""
    with local_cluster(
        options.nodes,
        options.replication,
        checkpoint_interval_ms=options.checkpoint_interval_ms,
        job=job_ref(name),
        slot_bits=options.slot_bits,
    ) as (cluster_dir, _spec):
        yield cluster_dir
