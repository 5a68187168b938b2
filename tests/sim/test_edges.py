"""The edges in the simulation: readers checked against the oracle during and after a run
(``smr.sim.readers``), and a stream id reused at position 0 (``smr.sim.reuse``)."""

from __future__ import annotations

from typing import Any

import pytest

from ring.hashing import slot_of
from ring.ids import NodeId, Slot
from smr.faults import FaultSchedule, Kill
from smr.sim import SimConfig, Simulation, SimulationFailure, SweepOptions, run_seed
from smr.sim import reuse as reuse_module
from smr.sim.readers import FeedLedger
from smr.stream_history import MapperHistory

EDGES = SweepOptions(edges=True)
BIG_EDGES = SweepOptions(nodes=(4, 8), replication=(1, 3), faults_max=5, edges=True)


def test_the_ledger_bounds_a_key_by_what_was_acked_and_what_was_emitted() -> None:
    ledger = FeedLedger()
    first = ledger.add_mapper(["a", "b", "a", "a"])
    second = ledger.add_mapper(["a", "c"])
    assert (ledger.floor("a"), ledger.ceiling("a")) == (0, 0)
    first.emitting(3)
    assert (ledger.floor("a"), ledger.ceiling("a")) == (0, 2)
    first.acked(1)
    second.acked(2)
    assert (ledger.floor("a"), ledger.ceiling("a")) == (2, 3)
    # Positions only grow: a late, smaller report changes nothing.
    first.emitting(2)
    assert ledger.ceiling("a") == 3
    assert ledger.floor("c") == ledger.ceiling("c") == 1
    assert ledger.keys() == ["a", "b", "c"]


@pytest.mark.parametrize("seed", range(40))
def test_readers_during_and_after_faults_get_the_exact_state_or_a_refusal(seed: int) -> None:
    result = run_seed(seed, EDGES)
    assert result.edges["served"] > 0
    # The final reads of every key and every slot came back exact (else the run failed).
    assert result.edges["query sent"] > 0 and result.edges["dump sent"] > 0
    assert (
        result.edges["id reuse refused"] + result.edges.get("id reuse refused: history unknown", 0)
        == 1
    )


@pytest.mark.parametrize("seed", range(15))
def test_bigger_rings_with_readers_and_a_reused_id(seed: int) -> None:
    result = run_seed(seed, BIG_EDGES)
    assert result.edges["served"] > 0


def _bump_a_count(simulation: Simulation, key: str, by: int) -> None:
    """Add ``by`` to ``key``'s count at its primary, as a tuple applied twice would."""
    core = next(iter(simulation.live_cores().values()))
    slot = Slot(slot_of(key, simulation.config.slot_bits))
    primary = simulation.live_cores()[core.ring.primary(slot)]
    state = primary.store.read(slot, key)
    assert state, f"{key} has no state yet"
    primary.store.commit(slot, key, state, {**state, "count": state["count"] + by})


def test_a_read_of_a_count_above_what_was_emitted_fails_the_run() -> None:
    # The check can fail: a count made larger at its primary mid-feed is read and named.
    simulation = Simulation(3, config=SimConfig(readers=True), schedule=FaultSchedule(()))
    simulation._schedule(400_000, _bump_a_count, simulation, "w0", 10_000)
    with pytest.raises(SimulationFailure, match=r"reader: n\d served 'w0' .* above the"):
        simulation.run()


def test_a_read_below_what_was_acked_fails_the_run() -> None:
    # And the other way: a count made smaller mid-feed (as if an acked tuple were lost).
    simulation = Simulation(4, config=SimConfig(readers=True), schedule=FaultSchedule(()))
    simulation._schedule(500_000, _bump_a_count, simulation, "w0", -1)
    with pytest.raises(SimulationFailure, match=r"reader: .*'w0'.*below the"):
        simulation.run()


# Two adjacent kills with r=1 after the feed: no copy of n1's range survives.
LOSS_BEYOND_TOLERANCE = FaultSchedule((Kill(NodeId("n1"), 1500), Kill(NodeId("n2"), 1500)))


def test_a_read_of_a_lost_slot_is_counted_never_passed_as_exact() -> None:
    # The run fails loudly (the state differs from the oracle); the reads of the lost slots
    # meanwhile are told apart from exact answers.
    simulation = Simulation(
        5,
        nodes=5,
        replication=1,
        schedule=LOSS_BEYOND_TOLERANCE,
        check_tolerance=False,
        readers=True,
    )
    with pytest.raises(SimulationFailure, match="differs from the oracle"):
        simulation.run()
    assert simulation.readers is not None
    tally = simulation.readers.tally
    assert tally["lost slot served"] + tally["refused with an error"] > 0


@pytest.mark.xfail(
    strict=True,
    reason="reads serve a lost slot as empty until they consult the loss ledger (issue 35, "
    "what to build 1): remove this mark when they refuse it",
)
def test_strict_reads_refuse_a_lost_slot_never_serve_it_empty() -> None:
    simulation = Simulation(
        5,
        nodes=5,
        replication=1,
        schedule=LOSS_BEYOND_TOLERANCE,
        check_tolerance=False,
        readers=True,
        strict_reads=True,
    )
    with pytest.raises(SimulationFailure) as failure:
        simulation.run()
    assert "lost slot served" not in str(failure.value), str(failure.value)[:300]


def test_a_reused_mapper_id_is_refused_by_the_history_check() -> None:
    simulation = Simulation(7, config=SimConfig(reuse_ids=True), schedule=FaultSchedule(()))
    result = simulation.run()
    assert result.edges == {"id reuse refused": 1}
    assert any("already delivered tuples" in event for event in result.events)


def test_a_history_check_that_lets_a_reused_id_through_fails_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The check can fail: a history check that finds nothing lets m0 start again at 0.
    def nothing_found(
        client: Any, view_of: Any, slot_bits: int, mapper: Any, *rest: Any, **kw: Any
    ):
        return MapperHistory(mapper)

    monkeypatch.setattr(reuse_module, "mapper_history", nothing_found)
    simulation = Simulation(7, config=SimConfig(reuse_ids=True), schedule=FaultSchedule(()))
    with pytest.raises(SimulationFailure, match="dropped in silence"):
        simulation.run()
