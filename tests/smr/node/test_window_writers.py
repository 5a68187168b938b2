"""Windowed writers registered before their first tuple (``NodeWindows.register``, asked by
``smr.client.history``): a writer that has sent nothing yet to a slot holds its watermark
back, so two writers that start together lose no tuple to the other's stamps."""

from __future__ import annotations

from smr.checkpoint.ids import MapperId, Slot
from smr.checkpoint.windows import START_OF_TIME_MS
from tests.smr.node.test_windows import Node, count_job, read_back, stamped_rows

LEAD = [("k1", t) for t in range(0, 1000, 10)]
LAG = [("k1", t) for t in range(0, 200, 10)]


def _two_writers(register: bool) -> Node:
    """``m0`` sends a second of event time to slot 1; then a cycle; then ``m1``, which
    started with it, sends its first 200 ms there."""
    job = count_job()
    node = Node(job)
    if register:
        node.windows.register(MapperId("m0"))
        node.windows.register(MapperId("m1"))
    node.apply("m0", stamped_rows(job, LEAD))
    node.cycle()
    node.apply("m1", stamped_rows(job, LAG))
    node.done |= {"m0", "m1"}
    node.cycle()
    return node


def test_an_unregistered_writer_behind_another_loses_its_tuples_as_late() -> None:
    node = _two_writers(register=False)
    # What the registration is for: m1's tuples fell behind m0's stamps and were dropped.
    assert node.windows.counts.late_dropped == len(LAG)
    assert read_back(node.results)[("k1", 0)] == 10


def test_a_registered_writer_holds_the_slot_back_until_its_tuples_arrive() -> None:
    node = _two_writers(register=True)
    assert node.windows.counts.late_dropped == 0
    windows = read_back(node.results)
    assert windows[("k1", 0)] == 20 and windows[("k1", 100)] == 20
    assert sum(windows.values()) == len(LEAD) + len(LAG)


def test_a_registered_writer_holds_a_slot_first_seen_after_it_registered() -> None:
    job = count_job()
    node = Node(job)
    node.windows.register(MapperId("m1"))
    node.apply("m0", stamped_rows(job, LEAD))
    node.cycle()
    # m1 has sent nothing: the slot m0 opened after the registration waits for it.
    assert node.windows.watermark_ms(1) == START_OF_TIME_MS
    assert node.results == []


def test_a_registration_older_than_the_idle_timeout_holds_nothing_back() -> None:
    job = count_job()
    node = Node(job)
    node.windows.register(MapperId("m1"))
    node.now_s += 6.0  # past the idle timeout (5 s): m1 has sent nothing since
    node.apply("m0", stamped_rows(job, LEAD))
    node.cycle()
    assert node.windows.watermark_ms(1) == LEAD[-1][1] - 40 - 1


def test_a_registered_writer_that_never_wrote_here_stops_holding_once_it_finished() -> None:
    # The node forgets a finished mapper that never wrote to it once its lease ran out, so
    # the next cycle's question would answer "still writing": the notice is told at once.
    job = count_job()
    node = Node(job)
    node.windows.register(MapperId("m1"))
    node.apply("m0", stamped_rows(job, LEAD))
    node.done.add("m0")
    node.cycle()
    assert node.results == []  # m1 holds the slot at the start of time
    node.windows.writer_finished(MapperId("m1"))
    node.cycle()  # node.done lacks m1: as after the lease, the cycle is not told
    assert sum(read_back(node.results).values()) == len(LEAD)


def test_every_owned_slot_holds_a_registered_writer_in_the_record_it_checkpoints() -> None:
    # A node that gains a slot later learns of the writer from the slot's record, even a
    # slot no tuple reached yet.
    job = count_job()
    node = Node(job)
    node.windows.register(MapperId("m1"))
    node.now_s += 0.1
    node.windows.close_due(
        node.store, lambda slot: True, lambda m: None, node.emit, owned=[Slot(0), Slot(3)]
    )
    for slot in (Slot(0), Slot(3)):
        record = node.store.watermark(slot)
        assert record is not None and MapperId("m1") in record.mappers
    assert node.store.watermark(Slot(2)) is None
