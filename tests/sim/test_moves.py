"""Moves, leaves and their failures in the deterministic simulation: every run ends with
the state the oracle computes, one owner per slot and complete replicas (``smr.sim``'s
checks), and the counters show the move happened (or was called off, and why)."""

from __future__ import annotations

import pytest

from smr.faults.commands import Join, Move
from smr.faults.model import Delay, Fault, FaultSchedule, Kill, Partition, Pause
from smr.ring.ids import NodeId
from smr.ring.view import Status
from smr.sim.config import SimConfig, SimResult, SweepOptions
from smr.sim.simulation import Simulation, run_seed
from tests.sim.test_simulation import BIG, LOSSY

# Bigger rings fed by up to three mappers (python -m smr.sim --nodes 4-8 --replication 1-3
# --mappers 1-3 --faults-max 5).
BIG_MAPPERS = SweepOptions(nodes=(4, 8), replication=(1, 3), mappers=(1, 3), faults_max=5)


def run(*faults: Fault, nodes: int = 4, replication: int = 1, seed: int = 3) -> Simulation:
    config = SimConfig(nodes=nodes, replication=replication, slot_bits=8)
    simulation = Simulation(seed, config=config, schedule=FaultSchedule(faults))
    simulation.result = simulation.run()  # type: ignore[attr-defined]
    return simulation


def total(simulation: Simulation, counter: str) -> int:
    result: SimResult = simulation.result  # type: ignore[attr-defined]
    return sum(counters[counter] for counters in result.counters.values())


def n(name: str) -> NodeId:
    return NodeId(name)


@pytest.mark.parametrize("replication", [1, 2])
def test_a_move_during_the_feed_switches_the_slots_and_loses_nothing(replication: int) -> None:
    simulation = run(Move(n("n1"), 200), nodes=5, replication=replication)
    assert total(simulation, "moves_given") == total(simulation, "moves_received") == 1
    view = next(iter(simulation.live_cores().values())).view
    assert view.members[n("n2")].token < 2 * 256 // 5  # n2 moved down into n1's range


def test_moves_back_and_forth_lose_nothing() -> None:
    simulation = run(Move(n("n0"), 100), Move(n("n1"), 300), Move(n("n0"), 500), nodes=4)
    assert total(simulation, "moves_given") == 3


def test_a_leave_hands_the_range_over_and_the_leaver_owns_nothing() -> None:
    simulation = run(Move(n("n2"), 250, leave=True), nodes=4)
    view = next(iter(simulation.live_cores().values())).view
    assert view.members[n("n2")].status is Status.STANDBY
    assert total(simulation, "moves_given") == 1


def test_the_receiver_killed_right_after_the_switch_is_taken_over_with_the_copy() -> None:
    # The copy holder (n3) takes n2 over: the moved slots come from its copy of the move.
    simulation = run(Move(n("n1"), 200), Kill(n("n2"), 230), nodes=5)
    assert total(simulation, "moves_given") == 1
    assert total(simulation, "takeovers") == 1


def test_the_giver_killed_mid_move_is_taken_over_by_the_receiver() -> None:
    simulation = run(Move(n("n1"), 200), Kill(n("n1"), 203), nodes=5)
    assert total(simulation, "takeovers") == 1


def test_the_copy_holder_killed_mid_move_calls_it_off() -> None:
    simulation = run(Move(n("n1"), 200), Kill(n("n3"), 201), nodes=5)
    assert total(simulation, "moves_given") == 0
    assert total(simulation, "moves_called_off") == 1


@pytest.mark.parametrize("seed", [3, 5, 11])
def test_a_leave_s_receiver_stops_awaiting_a_crashed_secondary_and_then_takes_it_over(
    seed: int,
) -> None:
    # 4 nodes, r = 2: n2 leaves to n3, n1 holds the copy. n3's messages are late, so n1 is
    # killed after n3 switched, before n3's request to confirm reaches it. n1 is one of the
    # secondaries n3 awaits, and one of n3's predecessors, behind the leaver n2: the leaver
    # judges nobody, and n3 judges n2 (the nearest) only, so nobody would ever declare n1
    # dead and the leave would never end. n3 stops awaiting n1 once its connection dropped
    # and its probe went unanswered; the leave ends, and n3 takes n1 over.
    simulation = run(
        Move(n("n2"), 250, leave=True),
        Delay(n("n3"), 254, 300, 40),
        Kill(n("n1"), 310),
        replication=2,
        seed=seed,
    )
    assert total(simulation, "moves_given") == total(simulation, "moves_received") == 1
    assert total(simulation, "takeovers") == 1
    assert any("not awaiting n1, crashed" in event for event in simulation.events)


def test_a_receiver_paused_through_the_commit_past_its_death_is_fenced() -> None:
    # The receiver reads the commit only after it was declared dead: its switch is undone
    # by the takeover, it fences, and the giver serves the slots again.
    simulation = run(Move(n("n1"), 200), Pause(n("n2"), 203, 1300), nodes=5)
    assert total(simulation, "moves_given") == 0
    assert total(simulation, "fenced") == 1


def test_a_giver_cut_off_from_the_receiver_after_the_commit_waits_for_the_answer() -> None:
    simulation = run(
        Move(n("n1"), 200),
        Partition((n("n1"),), (n("n2"),), 202, 150),
        nodes=5,
    )
    assert total(simulation, "moves_given") + total(simulation, "moves_called_off") == 1


# Seeds of the sweeps with moves, leaves and joins that once failed, and what they found
# (fixed since), with the options of the sweep that found them.
MOVE_SWEEP_FINDINGS: dict[int, tuple[SweepOptions, str]] = {
    600178: (
        SweepOptions(),
        "a backup split by range replayed a whole body after its summary was cut: the "
        "receiver held stray state of the giver's slots and shadowed a later takeover",
    ),
    600354: (
        SweepOptions(),
        "a receiver fenced after switching refused the view that took it over",
    ),
    600593: (
        SweepOptions(),
        "a batch left on its channel after an earlier one was re-routed overtook it",
    ),
    600956: (
        SweepOptions(),
        "a forged view marks a node itself dead: a first version of the fence-over-refusal "
        "rule let it fence with nobody taking it over, and the ring lost its range",
    ),
    601076: (
        SweepOptions(),
        "a receiver paused through the commit switched on its own, stale view",
    ),
    244: (SweepOptions(), "a standby node took a forged view and carried it forever"),
    4001262: (
        SweepOptions(),
        "a forged death of a leave's receiver handed the range back to the leaver, which "
        "had dropped it: no check saw a range regained from a shared token",
    ),
    2000909: (
        SweepOptions(),
        "a leaver took a dead predecessor over while its leave was committed",
    ),
    2001582: (SweepOptions(), "a join beside the only owner looked like growth past its range"),
    2001922: (
        SweepOptions(),
        "a receiver's switch was confirmed by its token, which a takeover had moved since",
    ),
    901832: (BIG, "a takeover then a move of the taker's top looked like clockwise growth"),
    1101427: (
        BIG,
        "a joiner missed tuples acked before the feeders knew of it and applied after its "
        "snapshot was read",
    ),
    2100075: (BIG, "deaths changed the move's copy holder while it was being copied"),
    2402074: (
        BIG_MAPPERS,
        "LOSS of 17 acked tuples: a refusal re-routed a batch off every channel of its replica "
        "set, but a later batch of the same slots stayed on another node's channel behind it; "
        "that node applied the later seqs first and dropped the re-routed ones as duplicates",
    ),
    3103234: (
        BIG_MAPPERS,
        "a leave's receiver awaited the confirmation of a secondary killed after the switch, "
        "which only the receiver could declare dead, behind the leaver: the feed stalled",
    ),
    8100135: (
        BIG_MAPPERS,
        "a node paused during its first snapshot, begun past its first checkpoint, which "
        "its secondary's fresh replica had ignored: the takeover found no copy of its range",
    ),
    8106782: (
        BIG_MAPPERS,
        "LOSS of 7 acked tuples: held rows released after a move went out cut in parts; the "
        "first part, refused again while it waited for window room, was re-routed, and the "
        "second, with later seqs of the same slot, went out ahead of its rows",
    ),
    950235: (LOSSY, "a confirmation request hit the cached answer of an earlier move"),
    1200256: (LOSSY, "a stale move copy shadowed the replica of a node that became a predecessor"),
    425: (
        SweepOptions(),
        "a batch waiting for window room when a hold began sent its rows of the held slots "
        "ahead of the held ones",
    ),
    1503: (SweepOptions(), "as 425, at a move's receiver settling with two secondaries"),
    301492: (
        SweepOptions(),
        "a forged view marking the last owner dead made it fence, leaving the ring to nobody",
    ),
    302539: (
        SweepOptions(),
        "a leaving owner on a node's token counted as the taker of a forged death",
    ),
    400194: (
        SweepOptions(),
        "a view change while re-routed rows waited to be sorted moved them to a destination "
        "already passed: sent unsorted, two tuples fell under the hwm",
    ),
}


@pytest.mark.parametrize("seed", sorted(MOVE_SWEEP_FINDINGS), ids=lambda seed: f"seed{seed}")
def test_seeds_that_once_failed_the_sweeps_with_moves_and_joins_pass(seed: int) -> None:
    run_seed(seed, MOVE_SWEEP_FINDINGS[seed][0])


def run_with_standby(*faults: Fault, standby: int = 1, replication: int = 1) -> Simulation:
    config = SimConfig(nodes=4, replication=replication, slot_bits=8, standby=standby)
    simulation = Simulation(5, config=config, schedule=FaultSchedule(faults))
    simulation.result = simulation.run()  # type: ignore[attr-defined]
    return simulation


@pytest.mark.parametrize("replication", [1, 2])
def test_a_standby_node_joins_during_the_feed_and_serves_the_top_of_a_range(
    replication: int,
) -> None:
    simulation = run_with_standby(Join(n("s0"), n("n1"), 200), replication=replication)
    view = next(iter(simulation.live_cores().values())).view
    assert view.members[n("s0")].status is Status.UP
    assert total(simulation, "moves_given") == total(simulation, "moves_received") == 1
    assert simulation.live_cores()[n("s0")].store.key_count() > 0


def test_two_standby_nodes_join_beside_different_nodes() -> None:
    simulation = run_with_standby(
        Join(n("s0"), n("n1"), 150), Join(n("s1"), n("n3"), 160), standby=2
    )
    view = next(iter(simulation.live_cores().values())).view
    assert [view.members[n(s)].status for s in ("s0", "s1")] == [Status.UP, Status.UP]


def test_the_giver_killed_while_a_node_joins_beside_it_ends_the_join() -> None:
    simulation = run_with_standby(Join(n("s0"), n("n1"), 200), Kill(n("n1"), 202))
    view = next(iter(simulation.live_cores().values())).view
    assert view.members[n("s0")].status in (Status.STANDBY, Status.UP)
    assert total(simulation, "takeovers") == 1


def test_a_join_then_a_kill_of_the_joiner_s_successor_loses_nothing() -> None:
    simulation = run_with_standby(Join(n("s0"), n("n1"), 150), Kill(n("n2"), 400))
    assert total(simulation, "takeovers") == 1
