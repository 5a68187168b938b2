"""A windowed job on a node (smr.node.windows) over a real state store: tuples stamped by
the mapper side fold into window fields, windows close when the slot's watermark passes
them, a successor replaying from the last checkpoint closes them under the same names with
the same state, late tuples correct or drop, and a slot gained is read once. The slot's
watermark travels with its checkpoints: a node that gains the slot (a takeover, a move, a
restart from disk) resumes it, and judges every tuple as the old owner did."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from smr import Job, agg, windows
from smr.checkpoint.delta import Delta, decode_delta, encode_delta
from smr.checkpoint.delta_parts import restrict_delta
from smr.checkpoint.store import StateStore
from smr.checkpoint.windows import START_OF_TIME_MS
from smr.node.disk import DiskState
from smr.node.windows import NodeWindows
from smr.output.records import Emitted
from smr.ring.view import View
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
        self.store = StateStore() if store is None else store
        self.windows = NodeWindows(job, lambda: self.now_s, self.emitted, idle_timeout_ms=5_000)
        self.windows.applying_to(self.store)
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

    def checkpoint(self) -> Delta:
        """The checkpoint cycle: windows closed, the delta swapped out (through the codec,
        as it travels) and merged."""
        self.cycle()
        delta = self.store.swap()
        self.store.merge_inactive()
        return decode_delta(encode_delta(delta))


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


def test_a_gained_slot_resumes_its_checkpointed_watermark() -> None:
    job = count_job(lateness_ms=1_000)
    first = Node(job)
    first.apply("m", [(2, 1, "k2", [50, 10, 1]), (2, 2, "k2", [350, 309, 1])])
    first.cycle()  # [0, 100) closed at 309, kept for its lateness; [300, 400) open
    gained = Node(job, first.store)
    gained.cycle()
    assert gained.windows.watermark_ms(2) == 309
    assert gained.results == []  # "m", active, holds the rest back
    gained.done.add("m")
    gained.cycle()
    assert [(value["start_ms"], value["revision"]) for _k, value, *_ in gained.results] == [
        (300, 0)
    ]


def test_a_gained_slot_without_a_record_is_read_once_its_watermark_from_its_closed_windows() -> (
    None
):
    """A slot whose checkpoints carried no watermark (written as version 2, before they
    did) starts from the last instant of its newest closed window."""
    job = count_job(lateness_ms=1_000)
    first = Node(job)
    first.apply("m", [(2, 1, "k2", [50, 10, 1]), (2, 2, "k2", [350, 309, 1])])
    first.cycle()  # [0, 100) closed at 309, kept for its lateness; [300, 400) open
    gained = Node(job, StateStore())
    gained.store.apply_delta(unmarked(first.store))
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


def unmarked(store: StateStore) -> Delta:
    """A snapshot of ``store`` without its watermarks: what a checkpoint of version 2 (before
    they travelled) holds."""
    snapshot = store.snapshot(range(SLOTS))
    return Delta(snapshot.states, snapshot.hwms, snapshot.retired)


def late_feed() -> tuple[Job, list[tuple[int, int, str, Any]]]:
    """Tumbling windows of 100 ms without lateness; the feed of slot 0: four tuples up to
    250 (the watermark reaches 209 and [0, 100) closes with two), then a tuple at 50, far
    behind."""
    job = count_job()
    rows: list[tuple[int, int, str, Any]] = [
        (0, 1, "k0", [50, 9, 1]),
        (0, 2, "k0", [60, 19, 1]),
        (0, 3, "k0", [120, 79, 1]),
        (0, 4, "k0", [250, 209, 1]),
        (0, 5, "k0", [50, 209, 1]),
    ]
    return job, rows


def test_a_late_tuple_dropped_before_a_takeover_is_dropped_after_it_too() -> None:
    """The primary closes [0, 100) in a checkpoint that reaches its secondary, then drops a
    tuple at 50 as late and dies. The successor promotes the replica and replays that tuple
    against the watermark the checkpoint carried: dropped again, so [0, 100) leaves once,
    with the primary's state. A successor without the record (a checkpoint of version 2,
    before watermarks were checkpointed) takes it and closes [0, 100) a second time under
    the same origin with another count: what a reader could not keep once."""
    job, rows = late_feed()
    primary = Node(job)
    replica = StateStore()
    primary.apply("m", rows[:4])
    replica.apply_delta(primary.checkpoint())
    assert primary.windows.watermark_ms(0) == 209
    primary.apply("m", rows[4:])
    assert primary.windows.counts.late_dropped == 1
    closed = [record for record in primary.results if record[1]["start_ms"] == 0]
    assert [record[1]["state"] for record in closed] == [{"count": 2}]
    for resumes, dropped in ((True, 1), (False, 0)):
        copy = StateStore()
        copy.apply_delta(replica.snapshot(range(SLOTS)) if resumes else unmarked(replica))
        successor = Node(job)
        successor.store.adopt(copy, {0})
        successor.apply("m", rows)  # the backup's tuples past the hwm: the late one
        successor.done.add("m")
        successor.cycle()
        assert successor.windows.counts.late_dropped == dropped
        again = [r for r in successor.emitted + successor.results if r[1].get("start_ms") == 0]
        if resumes:
            assert again == [] and successor.windows.watermark_ms(0) >= 209
            assert read_back(primary.results + successor.results) == {
                ("k0", 0): 2,
                ("k0", 100): 1,
                ("k0", 200): 1,
            }
        else:
            assert [(r[2:], r[1]["state"]) for r in again] == [(closed[0][2:], {"count": 1})]


def test_a_watermark_survives_a_checkpoint_and_a_restart_from_disk(tmp_path: Any) -> None:
    """A node's state files carry each slot's watermark: restored, the node goes on from
    it, and the tuple the node dropped as late before it stopped is dropped again."""
    job, rows = late_feed()
    node = Node(job)
    disk = DiskState(tmp_path)
    node.apply("m", rows[:3])
    node.checkpoint()
    disk.write_snapshot(node.store, View(), None)
    node.apply("m", rows[3:4])
    disk.on_checkpoint(node.store, View(), None, [encode_delta(node.checkpoint())])
    restored = DiskState(tmp_path).restore()
    assert restored is not None and restored.checkpoints == 1
    assert restored.store.watermark(0) == node.store.watermark(0)
    assert restored.store.watermark(0).current_ms == 209
    again = Node(job, restored.store)
    again.apply("m", rows)
    assert again.windows.counts.late_dropped == 1
    again.cycle()
    assert again.windows.watermark_ms(0) == 209
    assert again.results == [] and again.emitted == []


def test_a_moved_slot_keeps_its_watermark_and_the_receiver_judges_as_the_giver() -> None:
    """A move: the copy holder keeps the giver's checkpoints of the moving slot
    (restrict_delta), the giver's final checkpoint closes the copy, and the receiver
    promotes it: the slot's watermark is the giver's, its other slots' stay behind, and a
    tuple later than the giver's watermark is dropped there."""
    job, rows = late_feed()
    giver = Node(job)
    giver.apply("m", [*rows[:4], (1, 1, "k1", [30, 209, 1])])
    copy = StateStore()
    copy.apply_delta(restrict_delta(giver.checkpoint(), {0}))
    copy.apply_delta(restrict_delta(giver.checkpoint(), {0}))  # the final one
    receiver = Node(job)
    receiver.store.adopt(copy, {0})
    assert receiver.store.watermark(0) == giver.store.watermark(0)
    assert receiver.store.watermark(1) is None
    receiver.apply("m", [(0, 5, "k0", [99, 209, 1]), (0, 6, "k0", [260, 220, 1])])  # after the move
    assert receiver.windows.counts.late_dropped == 1  # 99 <= 209
    receiver.done.add("m")
    receiver.cycle()
    assert read_back(giver.results + receiver.results) == {
        ("k0", 0): 2,
        ("k0", 100): 1,
        ("k0", 200): 2,
        ("k1", 0): 1,  # slot 1 stayed with the giver, which closed it
    }


GAP_MS = 30


def session_job(lateness_ms: int = 0) -> Job:
    """A count per key and session: tuples less than ``GAP_MS`` apart."""
    return Job(
        "sessions",
        map=lambda record, emit: emit(record[0], 1),
        reduce=agg.count(),
        event_time=lambda record: record[1],
        window=windows.session(
            GAP_MS, allowed_lateness_ms=lateness_ms, out_of_orderness_ms=DISORDER_MS
        ),
    )


def model_sessions(records: list[tuple[str, int]]) -> dict[tuple[str, int, int], int]:
    """Plain Python: per key, the runs of event times less than ``GAP_MS`` apart, as
    ``(key, start, end)`` with their tuple counts."""
    sessions: dict[tuple[str, int, int], int] = {}
    for key in sorted({key for key, _t in records}):
        times = sorted(t for k, t in records if k == key)
        start, end, count = times[0], times[0] + GAP_MS, 0
        for t in times:
            if t >= end:
                sessions[(key, start, end)] = count
                start, count = t, 0
            end, count = max(end, t + GAP_MS), count + 1
        sessions[(key, start, end)] = count
    return sessions


def read_back_sessions(results: list[Emitted]) -> dict[tuple[str, int, int], int]:
    """What a reader keeps: each origin once, in order; per (key, session) the latest
    revision; the sessions a record replaces deleted."""
    seen: set[tuple[Any, ...]] = set()
    view: dict[tuple[str, int, int], int] = {}
    for key, value, *origin in results:
        if tuple(origin) in seen:
            continue
        seen.add(tuple(origin))
        for start, end in value.get("replaces", ()):
            view.pop((key, start, end), None)
        view[(key, value["start_ms"], value["end_ms"])] = value["state"]["count"]
    return view


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sessions_merge_and_close_each_once_equal_to_a_plain_model(seed: int) -> None:
    job = session_job()
    records = events(seed)
    node = Node(job)
    rows = stamped_rows(job, records)
    for start in range(0, len(rows), 50):
        node.apply("m", rows[start : start + 50])
        node.cycle()
    node.done.add("m")
    node.cycle()
    origins = [record[2:] for record in node.results]
    assert len(origins) == len(set(origins)), "a session left twice"
    assert read_back_sessions(node.emitted + node.results) == model_sessions(records)
    assert not list(node.store.items()), "every session left memory (no lateness)"


def test_a_successor_replaying_sessions_leaves_the_same_records() -> None:
    """As for tumbling windows: the successor of a primary that closed sessions after its
    last checkpoint closes them again under the same origins with the same states."""
    job = session_job()
    records = events(11)
    rows = stamped_rows(job, records)
    primary = Node(job)
    replica = StateStore()
    cut = len(rows) // 2
    for start in range(0, cut, 50):
        primary.apply("m", rows[start : start + 50])
        replica.apply_delta(primary.checkpoint())
    for start in range(cut, len(rows), 50):
        primary.apply("m", rows[start : start + 50])
        primary.cycle()  # these checkpoints never reach the successor
    successor = Node(job, replica)
    successor.apply("m", rows)
    successor.cycle()
    successor.done.add("m")
    successor.cycle()
    first = {record[2:]: record for record in primary.results}
    again = {record[2:]: record for record in successor.results}
    repeated = first.keys() & again.keys()
    assert repeated, "the successor closed none of the sessions the primary closed late"
    assert all(first[name] == again[name] for name in repeated)
    assert read_back_sessions(primary.results + successor.results) == model_sessions(records)


def test_a_late_tuple_bridging_two_closed_sessions_leaves_one_that_replaces_both() -> None:
    job = session_job(lateness_ms=500)
    node = Node(job)
    node.apply("m", [(0, 1, "k0", [10, 0, 1]), (0, 2, "k0", [100, 59, 1])])
    node.apply("m", [(0, 3, "k0", [300, 259, 1])])
    node.cycle()  # the watermark reaches 259: [10, 40) and [100, 130) close
    assert [(v["start_ms"], v["end_ms"]) for _k, v, *_ in node.results] == [(10, 40), (100, 130)]
    for seq, t in ((4, 30), (5, 55), (6, 80)):  # within lateness: they bridge the two
        node.apply("m", [(0, seq, "k0", [t, 259, 1])])
    merged = node.emitted[-1]
    assert (merged[1]["start_ms"], merged[1]["end_ms"]) == (10, 130)
    assert merged[1]["state"] == {"count": 5}
    assert merged[1]["replaces"] == [[10, 85], [100, 130]]  # [10, 85) replaced [10, 60), ...
    node.done.add("m")
    node.cycle()
    assert read_back_sessions(node.results[:2] + node.emitted + node.results[2:]) == {
        ("k0", 10, 130): 5,
        ("k0", 300, 330): 1,
    }
