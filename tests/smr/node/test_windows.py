"""A windowed job on a node (smr.node.windows) over a real state store: tuples stamped by
the mapper side fold into window fields, windows close when the slot's watermark passes
them, a successor replaying from the last checkpoint closes them under the same names with
the same state, late tuples correct or drop, and a slot gained is read once."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from smr import Job, agg, windows
from smr.checkpoint.store import StateStore
from smr.checkpoint.windows import START_OF_TIME_MS
from smr.node.windows import NodeWindows
from smr.output.records import Emitted
from smr.windows.stamps import StampError, stamped_mapper, unstamped

SIZE_MS = 100
DISORDER_MS = 40
SLOTS = 4


def count_job(lateness_ms: int = 0, side_output: bool = False, slide_ms: int = 0) -> Job:
    """A count per key and window: tumbling windows of ``SIZE_MS``, or hopping ones sliding
    by ``slide_ms``."""
    window = (
        windows.hopping(
            SIZE_MS, slide_ms, allowed_lateness_ms=lateness_ms, out_of_orderness_ms=DISORDER_MS
        )
        if slide_ms
        else windows.tumbling(
            SIZE_MS, allowed_lateness_ms=lateness_ms, out_of_orderness_ms=DISORDER_MS
        )
    )
    return Job(
        "wc",
        map=lambda record, emit: emit(record[0], 1),
        reduce=agg.count(),
        event_time=lambda record: record[1],
        window=window,
        late_side_output=side_output,
    )


def events(seed: int, count: int = 600) -> list[tuple[str, int]]:
    """``(key, event time)`` records in an order at most ``DISORDER_MS - 1`` out of order."""
    rng = random.Random(seed)
    return [(f"k{rng.randrange(12)}", i * 3 + rng.randrange(DISORDER_MS)) for i in range(count)]


def model(records: list[tuple[str, int]], job: Job) -> dict[tuple[str, int], int]:
    """Plain Python: tuples per (key, window start), each window from the spec's rule."""
    spec = job.window
    assert spec is not None
    if spec.kind == "tumbling":
        return dict(Counter((key, t // SIZE_MS * SIZE_MS) for key, t in records))
    counts: Counter[tuple[str, int]] = Counter()
    for key, t in records:
        for start in range(t - t % spec.slide_ms, t - SIZE_MS, -spec.slide_ms):
            counts[(key, start)] += 1
    return dict(counts)


class Node:
    """A NodeWindows over a store, fed stamped rows as a primary applies them; every slot
    is its own, and its clock is set by the test."""

    def __init__(self, job: Job, store: StateStore | None = None) -> None:
        self.now_s = 0.0
        self.emitted: list[Emitted] = []
        self.results: list[Emitted] = []
        self.windows = NodeWindows(job, lambda: self.now_s, self.emitted, idle_timeout_ms=5_000)
        self.store = StateStore() if store is None else store
        self.reduce_fn = self.windows.reduce_fn()
        self.done: set[str] = set()

    def apply(self, mapper: str, rows: list[tuple[int, int, str, Any]]) -> None:
        slots, seqs, keys, values = (list(column) for column in zip(*rows, strict=True))
        outcome = self.store.apply_batch(mapper, slots, seqs, keys, values, self.reduce_fn)
        assert outcome.failed == 0, outcome.failures

    def cycle(self) -> None:
        self.now_s += 0.1
        self.windows.close_due(
            self.store, lambda slot: True, lambda m: 1 if m in self.done else None, self.emit
        )

    def emit(self, records: list[Emitted]) -> None:
        self.results.extend(records)


def stamped_rows(job: Job, records: list[tuple[str, int]]) -> list[tuple[int, int, str, Any]]:
    """The rows a feed of ``records`` sends: slot, seq per slot, key, stamped value."""
    mapper = stamped_mapper(job)
    pairs: list[tuple[str, Any]] = []
    for record in records:
        mapper(record, lambda key, value: pairs.append((key, value)))
    seqs: Counter[int] = Counter()
    rows = []
    for key, value in pairs:
        slot = int(key[1:]) % SLOTS
        seqs[slot] += 1
        rows.append((slot, seqs[slot], key, value))
    return rows


def read_back(results: list[Emitted]) -> dict[tuple[str, int], int]:
    """What a reader keeps: each origin once, the latest revision per window."""
    seen: dict[tuple[Any, ...], Emitted] = {}
    for record in results:
        seen.setdefault(record[2:], record)
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    for key, value, *_origin in seen.values():
        name = (key, value["start_ms"])
        if name not in latest or latest[name][0] < value["revision"]:
            latest[name] = (value["revision"], value["state"]["count"])
    return {name: count for name, (_revision, count) in latest.items()}


def test_stamps_carry_event_time_and_the_mappers_watermark() -> None:
    job = count_job()
    mapper = stamped_mapper(job)
    sent: list[Any] = []
    for record in [("a", 500), ("b", 470), ("a", 900)]:
        mapper(record, lambda key, value: sent.append(value))
    assert sent == [[500, 500 - DISORDER_MS - 1, 1], [470, 459, 1], [900, 900 - DISORDER_MS - 1, 1]]
    assert unstamped((900, 859, 1)) == (900, 859, 1)
    with pytest.raises(StampError, match="no event-time stamps"):
        unstamped(1)


@pytest.mark.parametrize(("seed", "slide_ms"), [(1, 0), (2, 0), (3, 0), (4, 50), (5, 30)])
def test_windows_close_as_the_watermark_passes_each_once_equal_to_a_plain_fold(
    seed: int, slide_ms: int
) -> None:
    job = count_job(slide_ms=slide_ms)
    records = events(seed)
    node = Node(job)
    rows = stamped_rows(job, records)
    for start in range(0, len(rows), 50):
        node.apply("m", rows[start : start + 50])
        node.cycle()
    closed_during_feed = len(node.results)
    node.done.add("m")
    node.cycle()
    assert 0 < closed_during_feed < len(node.results)
    names = [(key, value["start_ms"]) for key, value, *_ in node.results]
    assert len(names) == len(set(names)), "a window left twice"
    assert all(value["revision"] == 0 for _key, value, *_ in node.results)
    assert read_back(node.results) == model(records, job)
    assert not list(node.store.items()), "every window left memory (no lateness)"
    assert node.windows.counts.late_dropped == 0


def test_a_successor_replaying_from_the_last_checkpoint_leaves_the_same_records() -> None:
    """The primary closes windows after its last checkpoint and dies; the successor holds
    that checkpoint, replays the tuples after it, and closes the same windows again under
    the same origins with the same states: a reader keeps each window once, and right."""
    job = count_job()
    records = events(7)
    rows = stamped_rows(job, records)
    primary = Node(job)
    cut = len(rows) // 2
    for start in range(0, cut, 50):
        primary.apply("m", rows[start : start + 50])
        primary.cycle()
    # The last checkpoint that reached the secondary.
    replica = StateStore()
    replica.apply_delta(primary.store.snapshot(range(SLOTS)))
    for start in range(cut, len(rows), 50):
        primary.apply("m", rows[start : start + 50])
        primary.cycle()
    after_checkpoint = {record[2:]: record for record in primary.results[-40:]}
    # The successor: the replica promoted, every tuple replayed (those up to its hwm are
    # repeats), then the mapper finishes.
    successor = Node(job, replica)
    successor.apply("m", rows)
    successor.cycle()
    successor.done.add("m")
    successor.cycle()
    again = {record[2:]: record for record in successor.results}
    repeated = after_checkpoint.keys() & again.keys()
    assert repeated, "the successor closed none of the windows the primary closed late"
    assert all(after_checkpoint[name] == again[name] for name in repeated)
    assert read_back(primary.results + successor.results) == model(records, job)


def test_a_late_tuple_within_lateness_corrects_and_a_later_one_is_dropped_and_kept_aside() -> None:
    job = count_job(lateness_ms=200, side_output=True)
    node = Node(job)
    node.apply("m", [(0, 1, "k0", [50, START_OF_TIME_MS, 1]), (0, 2, "k0", [250, 209, 1])])
    node.cycle()  # the watermark reaches 209: [0, 100) closes; it is purged at 299
    assert [(value["start_ms"], value["revision"]) for _k, value, *_ in node.results] == [(0, 0)]
    node.apply("m", [(0, 3, "k0", [60, 209, 1])])  # 60 + 200 > 209: taken, a correction
    correction = node.emitted.pop()
    assert correction[1]["revision"] == 1 and correction[1]["state"] == {"count": 2}
    assert correction[2:] == ('@0:100/"k0"', 0, 1, 0)
    node.apply("m", [(0, 4, "k0", [5, 209, 1])])  # 5 + 200 <= 209: dropped
    late = node.emitted.pop()
    assert late[1] == {"late": {"event_time_ms": 5, "value": 1}}
    assert late[2:] == ("m", 0, 4, 0)
    assert node.windows.counts.late_dropped == 1
    assert node.windows.counts.window_corrections == 1


def test_a_value_without_stamps_fails_and_changes_nothing() -> None:
    node = Node(count_job())
    outcome = node.store.apply_batch("m", [0], [1], ["k0"], [1], node.reduce_fn)
    assert outcome.failed == 1
    assert isinstance(outcome.failures[0][1], StampError)
    assert not list(node.store.items())


def test_a_gained_slot_is_read_once_its_watermark_from_its_closed_windows() -> None:
    job = count_job(lateness_ms=1_000)
    first = Node(job)
    first.apply("m", [(2, 1, "k2", [50, 10, 1]), (2, 2, "k2", [350, 309, 1])])
    first.cycle()  # [0, 100) closed at 309, kept for its lateness; [300, 400) open
    gained = Node(job, first.store)
    gained.cycle()
    assert gained.windows.watermark_ms(2) == 99  # the last instant of [0, 100)
    assert gained.results == []  # the mapper of its hwm vector holds the rest back
    gained.done.add("m")
    gained.cycle()
    assert [(value["start_ms"], value["revision"]) for _k, value, *_ in gained.results] == [
        (300, 0)
    ]


def test_an_idle_mapper_stops_holding_the_watermark_back() -> None:
    node = Node(count_job())
    node.apply("quiet", [(1, 1, "k1", [10, 0, 1])])
    node.apply("busy", [(1, 1, "k1", [20, 0, 1])])
    node.cycle()
    assert node.windows.watermark_ms(1) == 0
    for step in range(1, 80):
        node.apply("busy", [(1, 1 + step, "k1", [100 * step, 100 * step - 41, 1])])
        node.cycle()
    # Quiet for 7.9 s of the node's clock, past the 5 s idle timeout: only "busy" counts.
    assert node.windows.watermark_ms(1) == 100 * 79 - 41
