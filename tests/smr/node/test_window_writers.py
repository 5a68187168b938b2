"""Windowed writers registered before their first tuple (``NodeWindows.register``, asked by
``smr.client.history``): a writer that has sent nothing yet to a slot holds its watermark
back, so two writers that start together lose no tuple to the other's stamps."""

from __future__ import annotations

from smr.checkpoint.ids import MapperId
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
