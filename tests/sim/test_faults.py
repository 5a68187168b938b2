"""Fault schedules as data: validation, printing, the wire form, and the tolerance rule that
the seeded generator promises to keep."""

from __future__ import annotations

import random

import pytest

from smr.faults.draws import random_schedule
from smr.faults.model import Delay, FaultSchedule, Kill, Partition, Pause
from smr.faults.tolerance import Tolerance, exposed_sides, lost_nodes, within_tolerance
from smr.ring.ids import NodeId

NODES = [NodeId(f"n{i}") for i in range(5)]
SAFE_MS = Tolerance().silence_safe_ms


def n(name: str) -> NodeId:
    return NodeId(name)


def test_a_schedule_is_sorted_by_start_time_whatever_the_order_given() -> None:
    schedule = FaultSchedule((Pause(n("n1"), 300, 10), Kill(n("n2"), 100), Kill(n("n0"), 100)))
    assert [fault.at_ms for fault in schedule] == [100, 100, 300]
    assert schedule == FaultSchedule(
        (Kill(n("n0"), 100), Kill(n("n2"), 100), Pause(n("n1"), 300, 10))
    )


def test_describe_prints_one_line_per_fault() -> None:
    schedule = FaultSchedule(
        (
            Kill(n("n2"), 450),
            Pause(n("n1"), 120, 180),
            Partition((n("n1"), n("n0")), (n("n2"),), 800, 150),
            Delay(n("n3"), 900, 400, 20),
        )
    )
    assert schedule.describe().splitlines() == [
        "fault schedule (4 faults):",
        "      120 ms  pause n1 for 180 ms",
        "      450 ms  kill n2",
        "      800 ms  partition [n0 n1] | [n2] for 150 ms",
        "      900 ms  delay n3 by 20 ms for 400 ms",
    ]
    assert schedule.end_ms == 1300


def test_the_wire_form_round_trips() -> None:
    schedule = FaultSchedule(
        (
            Kill(n("n2"), 450),
            Pause(n("n1"), 120, 180),
            Partition((n("n1"),), (n("n2"), n("n3")), 800, 150),
            Delay(n("n3"), 900, 400, 20),
        )
    )
    assert FaultSchedule.from_wire(schedule.to_wire()) == schedule


@pytest.mark.parametrize(
    "make",
    [
        lambda: Kill(n("n0"), -1),
        lambda: Pause(n("n0"), 0, 0),
        lambda: Delay(n("n0"), 0, 10, 0),
        lambda: Partition((), (n("n1"),), 0, 10),
        lambda: Partition((n("n1"),), (n("n1"),), 0, 10),
    ],
)
def test_malformed_faults_are_refused(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


def test_a_malformed_wire_item_is_named() -> None:
    with pytest.raises(ValueError, match="fault 0"):
        FaultSchedule.from_wire([{"kind": "explode", "node": "n0", "at_ms": 1}])


def test_two_non_adjacent_kills_are_within_tolerance_for_r1() -> None:
    schedule = FaultSchedule((Kill(n("n1"), 10), Kill(n("n3"), 10)))
    assert within_tolerance(schedule, NODES, 1) is None


def test_two_adjacent_kills_are_beyond_r1_but_within_r2() -> None:
    schedule = FaultSchedule((Kill(n("n1"), 10), Kill(n("n2"), 900)))
    assert "2 ring-adjacent nodes" in (within_tolerance(schedule, NODES, 1) or "")
    assert within_tolerance(schedule, NODES, 2) is None


def test_adjacency_wraps_around_the_ring() -> None:
    schedule = FaultSchedule((Kill(n("n4"), 10), Kill(n("n0"), 10)))
    assert within_tolerance(schedule, NODES, 1) is not None


def test_with_r0_no_node_may_be_lost() -> None:
    assert within_tolerance(FaultSchedule((Kill(n("n1"), 10),)), NODES, 0) is not None
    assert within_tolerance(FaultSchedule((Pause(n("n1"), 10, SAFE_MS),)), NODES, 0) is None


def test_losing_every_node_is_beyond_tolerance() -> None:
    schedule = FaultSchedule(tuple(Kill(node, 10) for node in NODES[:3]))
    assert "every node" in (within_tolerance(schedule, NODES[:3], 2) or "")


def test_a_pause_past_the_safe_silence_counts_as_lost() -> None:
    assert lost_nodes(FaultSchedule((Pause(n("n1"), 10, SAFE_MS),)), NODES) == []
    assert lost_nodes(FaultSchedule((Pause(n("n1"), 10, SAFE_MS + 1),)), NODES) == ["n1"]


def test_short_silences_close_together_count_as_one() -> None:
    # Two safe pauses separated by less than a heartbeat gap: the watcher hears nothing.
    gap_ms = Tolerance().heartbeat_gap_ms - 1
    schedule = FaultSchedule((Pause(n("n1"), 0, SAFE_MS), Pause(n("n1"), SAFE_MS + gap_ms, 10)))
    assert lost_nodes(schedule, NODES) == ["n1"]


def test_a_long_partition_loses_only_the_side_without_a_majority() -> None:
    # n2 alone cannot declare anyone dead; the four others can declare n2 dead.
    long_cut = Partition((n("n2"),), (n("n0"), n("n1"), n("n3"), n("n4")), 500, SAFE_MS + 1)
    assert lost_nodes(FaultSchedule((long_cut,)), NODES) == ["n2"]
    assert within_tolerance(FaultSchedule((long_cut,)), NODES, 1) is None
    short_cut = Partition((n("n2"),), (n("n0"), n("n1"), n("n3"), n("n4")), 500, SAFE_MS)
    assert lost_nodes(FaultSchedule((short_cut,)), NODES) == []
    # Two adjacent nodes cut off together: beyond r=1, within r=2.
    pair = Partition((n("n2"), n("n3")), (n("n0"), n("n1"), n("n4")), 500, SAFE_MS + 1)
    assert lost_nodes(FaultSchedule((pair,)), NODES) == ["n2", "n3"]
    assert within_tolerance(FaultSchedule((pair,)), NODES, 1) is not None
    assert within_tolerance(FaultSchedule((pair,)), NODES, 2) is None


def test_a_partition_into_halves_exposes_neither_side() -> None:
    nodes = NODES[:4]
    halves = Partition((n("n0"), n("n1")), (n("n2"), n("n3")), 500, 5000)
    assert lost_nodes(FaultSchedule((halves,)), nodes) == []


def test_nodes_in_neither_group_count_for_both_sides() -> None:
    # n0 and n4 hear both sides: n1 (with them, 3 of 5) may declare n2 dead, and n2 (with
    # them, 3 of 5) may declare n1 dead: both are exposed.
    cut = Partition((n("n1"),), (n("n2"),), 500, SAFE_MS + 1)
    assert exposed_sides(cut, NODES, len(NODES)) == [(n("n1"),), (n("n2"),)]
    assert lost_nodes(FaultSchedule((cut,)), NODES) == ["n1", "n2"]


def test_a_kill_shrinks_the_majority_a_cut_off_side_needs() -> None:
    # After n0 is killed four owners remain: n3 and n4 against n1 and n2 is two halves, but
    # counted low (n0 may be lost) the owners are 4, and neither half is a majority of them.
    cut = Partition((n("n1"), n("n2")), (n("n3"), n("n4")), 500, SAFE_MS + 1)
    schedule = FaultSchedule((Kill(n("n0"), 10), cut))
    assert lost_nodes(schedule, NODES) == ["n0"]
    # With six nodes and two killed, a lone node against three: the three are a majority.
    nodes = [NodeId(f"n{i}") for i in range(6)]
    cut = Partition((n("n2"),), (n("n3"), n("n4"), n("n5")), 500, SAFE_MS + 1)
    schedule = FaultSchedule((Kill(n("n0"), 10), Kill(n("n1"), 10), cut))
    assert lost_nodes(schedule, nodes) == ["n0", "n1", "n2"]


def test_faults_naming_unknown_nodes_are_refused() -> None:
    assert "not in the ring" in (
        within_tolerance(FaultSchedule((Kill(n("x"), 1),)), NODES, 1) or ""
    )


def test_random_schedules_are_within_tolerance_and_replay_from_their_seed() -> None:
    for seed in range(400):
        nodes = NODES[: 3 + seed % 3]
        replication = seed % 3
        schedule = random_schedule(random.Random(seed), nodes, replication, 2000, faults_max=4)
        assert within_tolerance(schedule, nodes, replication) is None, schedule.describe()
        assert schedule == random_schedule(
            random.Random(seed), nodes, replication, 2000, faults_max=4
        )
        assert all(fault.at_ms <= 1800 for fault in schedule)


def test_random_schedules_draw_every_kind_of_fault() -> None:
    kinds = set()
    for seed in range(200):
        for fault in random_schedule(random.Random(seed), NODES, 2, 2000):
            kinds.add(type(fault).__name__)
    assert kinds == {"Kill", "Pause", "Stall", "Starve", "Forge", "Partition", "Delay", "Move"}


def test_random_schedules_draw_long_partitions_that_cut_off_a_minority() -> None:
    lost_ms = Tolerance().silence_lost_ms
    long_cuts = [
        fault
        for seed in range(300)
        for fault in random_schedule(random.Random(seed), NODES, 1, 2000)
        if isinstance(fault, Partition) and fault.duration_ms > lost_ms
    ]
    assert any(min(len(c.group_a), len(c.group_b)) == 1 for c in long_cuts)
    for cut in long_cuts:
        # Only the smaller side is ever exposed: the majority is never taken over.
        (side,) = exposed_sides(cut, NODES, len(NODES))
        assert len(side) == min(len(cut.group_a), len(cut.group_b))
