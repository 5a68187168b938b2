"""The deterministic simulation (``smr.sim``): real NodeCores and Emitters in virtual time
under fault schedules, checked against plain Python word counts after every run.

A failing run raises ``SimulationFailure`` whose message starts with ``seed=<seed>`` and
holds the schedule and the command that replays it. The longer sweep runs outside pytest:
``python -m smr.sim --seeds 2000 --jobs 2``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from smr.faults.model import Fault, FaultSchedule, Kill, Partition, Pause
from smr.faults.scenarios import SCENARIOS, Scenario
from smr.ring.ids import NodeId
from smr.ring.view import Status
from smr.sim.config import SimConfig, SimResult, SweepOptions
from smr.sim.network import NetworkSettings
from smr.sim.report import SimulationFailure
from smr.sim.simulation import Simulation, run_seed
from smr.wire.codec import decode
from smr.wire.kinds import Kind
from smr.wire.peer import SnapshotChunk

REPO = Path(__file__).resolve().parents[2]

# The default run: this many seeds of SimConfig.from_seed (3-6 nodes, r in 0-2, slot_bits
# 6-10, 1000-3000 tuples, up to 3 faults within tolerance). With the bigger rings below,
# the whole file takes about 30 s on this 2-core machine.
SWEEP_SEEDS = 200
# Seeds that fail because of a known bug not fixed yet: seed -> reason (none today).
KNOWN_FAILING: dict[int, str] = {}
# And this many more of bigger rings (4-8 nodes, r in 1-3, up to 5 faults).
BIG_SWEEP_SEEDS = 100
BIG = SweepOptions(nodes=(4, 8), replication=(1, 3), faults_max=5)


def n(name: str) -> NodeId:
    return NodeId(name)


def scenario(*faults: Fault, seed: int = 11, **settings: object) -> tuple[Simulation, SimResult]:
    """Run 5 nodes (r=1, 256 slots, 2000 tuples fed over about 800 ms) under ``faults``;
    ``settings`` replace those or any other field of ``SimConfig``."""
    config = SimConfig(nodes=5, replication=1, slot_bits=8)
    simulation = Simulation(seed, config=config, schedule=FaultSchedule(faults), **settings)  # type: ignore[arg-type]
    return simulation, simulation.run()


def tuples_for(feed_ms: int) -> int:
    """How many tuples one mapper feeds for a feed of at least ``feed_ms`` of virtual time
    (at SimConfig's pace)."""
    pace = SimConfig()
    return -(-feed_ms // pace.feed_pace_ms) * pace.feed_chunk


def total(result: SimResult, counter: str) -> int:
    return sum(counters[counter] for counters in result.counters.values())


def owners(simulation: Simulation) -> list[str]:
    view = next(iter(simulation.live_cores().values())).view
    return [member.node_id for member in view.owners()]


@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(seed, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILING[seed]))
        if seed in KNOWN_FAILING
        else seed
        for seed in range(SWEEP_SEEDS)
    ],
)
def test_random_schedules_within_tolerance_lose_no_acked_tuple(seed: int) -> None:
    run_seed(seed)


@pytest.mark.parametrize("seed", range(10_000, 10_000 + BIG_SWEEP_SEEDS))
def test_bigger_rings_under_more_faults_lose_no_acked_tuple(seed: int) -> None:
    run_seed(seed, BIG)


# Seeds of the bigger-ring sweep that once failed, and what they found (fixed since): they
# stay in the default run, since the schedules the random draws make change with the draws.
SWEEP_FINDINGS = {
    5171: "a node cut off counted messages read late as contacts and declared a neighbour dead",
    6602: "a stalled node's heartbeat due during a CPU-starvation gap was skipped, not late",
    6978: "a later seq in an older copy's backup shadowed earlier acked tuples at a takeover",
    7154: "a backup filed a batch straddling two primaries, never evicted: the feed stalled",
    7965: "a later seq in an older copy's backup shadowed earlier acked tuples at a takeover",
    30356: "a standby marked dead by a forged view never heard of it: views never converged",
    31094: "a standby marked dead by a forged view never heard of it: views never converged",
    21254: "a leave's copy holder killed after the receiver switched, before it confirmed: "
    "the receiver awaited it forever, and nobody else could declare it dead",
    40450: "an orphan's backup was dropped when the absorber's snapshot ended, with a tuple "
    "filed under the dead node that the snapshot did not hold",
}


@pytest.mark.parametrize("seed", sorted(SWEEP_FINDINGS), ids=lambda seed: f"seed{seed}")
def test_seeds_that_once_failed_the_bigger_ring_sweep_pass(seed: int) -> None:
    run_seed(seed, BIG)


# Seeds of the default sweep (python -m smr.sim, other seeds than the default run's) that
# once failed, and what they found (fixed since).
DEFAULT_SWEEP_FINDINGS = {
    900584: "a receiver paused through a leave switched on its stale view after its giver and "
    "it were declared dead; the successor that took both over sat on the giver's token, not "
    "on the receiver's, so the receiver refused the view marking it dead: views never converged",
    900386: "a wider rule (the holder of a dead node's token sits on another dead node's) "
    "fenced a node on a forged view in which its successor, the only owner left, held every "
    "slot without having moved",
    904751: "LOSS of 4 acked tuples: with combine, a batch closed from the combined tuples "
    "went out before re-routed rows of the same slots that a re-route deep in nested pumps "
    "had left open (older seqs), and the joiner's hwm dropped those as duplicates",
}


@pytest.mark.parametrize("seed", sorted(DEFAULT_SWEEP_FINDINGS), ids=lambda seed: f"seed{seed}")
def test_seeds_that_once_failed_the_default_sweep_pass(seed: int) -> None:
    run_seed(seed)


# The same, for the bigger rings on a lossy network (1% of messages dropped, 1% duplicated).
LOSSY = SweepOptions(
    nodes=(4, 8),
    replication=(1, 3),
    faults_max=5,
    drop_probability=0.01,
    duplicate_probability=0.01,
)
LOSSY_SWEEP_FINDINGS = {
    80256: "a snapshot whose begin was lost: its chunks were ignored, the replica kept "
    "covering only the primary's old range and never asked again",
    81942: "a snapshot whose begin was lost (the same)",
}


@pytest.mark.parametrize("seed", sorted(LOSSY_SWEEP_FINDINGS), ids=lambda seed: f"seed{seed}")
def test_seeds_that_once_failed_the_lossy_sweep_pass(seed: int) -> None:
    run_seed(seed, LOSSY)


def test_a_failing_run_names_its_seed_and_schedule() -> None:
    # Beyond tolerance on purpose (two adjacent kills with r=1): the run must fail, and say
    # how to replay it.
    schedule = FaultSchedule((Kill(n("n1"), 300), Kill(n("n2"), 300)))
    with pytest.raises(SimulationFailure) as failure:
        Simulation(5, nodes=5, replication=1, schedule=schedule).run()
    message = str(failure.value)
    assert message.startswith("seed=5 ")
    assert "beyond tolerance" in message
    assert schedule.describe() in message


def test_loss_beyond_tolerance_is_refused_loudly_never_folded_into_empty_state() -> None:
    # Two adjacent kills with r=1: no copy of the first victim's range survives. The feed
    # must stop with the loss named, not end with counts short of the oracle.
    schedule = FaultSchedule((Kill(n("n1"), 300), Kill(n("n2"), 300)))
    simulation = Simulation(5, nodes=5, replication=1, schedule=schedule, check_tolerance=False)
    with pytest.raises(SimulationFailure) as failure:
        simulation.run()
    message = str(failure.value)
    assert "DeliveryError" in message and "was lost" in message, message[:400]
    assert "differs from the oracle" not in message
    offline = {
        node: core.ledger.slots
        for node, core in simulation.live_cores().items()
        if core.ledger.slots
    }
    lost = {node: core.counters.slots_lost for node, core in simulation.live_cores().items()}
    assert offline and sum(lost.values()) >= sum(len(slots) for slots in offline.values())


def test_slots_lost_to_a_false_verdict_come_back_with_their_state() -> None:
    # n1 paused past the timeout and n2 killed at once, with r=1: n3 takes over both and
    # holds no copy of n1's range. But n1 was alive: fenced on resume, it keeps the state it
    # served and hands it to n3, so nothing is lost (the feed ended before the faults).
    schedule = FaultSchedule((Pause(n("n1"), 1200, 2000), Kill(n("n2"), 1200)))
    simulation = Simulation(5, nodes=5, replication=1, schedule=schedule, check_tolerance=False)
    result = simulation.run()
    assert result.counters["n3"]["slots_lost"] > 0
    assert result.counters["n3"]["slots_restored"] == result.counters["n3"]["slots_lost"]
    assert result.counters["n1"]["fenced"] == 1
    assert not any(core.ledger.slots for core in simulation.live_cores().values())


def test_the_same_seed_gives_the_same_run_twice() -> None:
    first, second = run_seed(42), run_seed(42)
    assert first.fingerprint() == second.fingerprint()
    assert first.counters == second.counters and first.view == second.view


def test_a_run_does_not_depend_on_the_string_hash_seed() -> None:
    # Two mappers feeding 4-8 nodes: the nodes' sets of channels then hold several entries.
    code = (
        "from smr.sim.config import SweepOptions; from smr.sim.simulation import run_seed; "
        "print(run_seed(42, SweepOptions(nodes=(4, 8), mappers=(2, 2))).fingerprint())"
    )
    prints = set()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        completed = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert completed.returncode == 0, completed.stderr
        prints.add(completed.stdout.strip())
    assert prints == {run_seed(42, SweepOptions(nodes=(4, 8), mappers=(2, 2))).fingerprint()}


# Each hand-picked scenario runs under these seeds (its outcome must not depend on one).
SCENARIO_SEEDS = (7, 11)


@pytest.mark.parametrize("seed", SCENARIO_SEEDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_a_fault_scenario_ends_exactly_as_it_expects(scenario: Scenario, seed: int) -> None:
    # The run itself checks that the state equals plain Python's counts and that the live
    # owners' ranges cover the ring once (smr.sim, step 5); here the expected takeovers,
    # fencing and final owners (smr.faults.scenarios).
    simulation = Simulation(
        seed,
        config=SimConfig(
            nodes=scenario.nodes,
            replication=scenario.replication,
            slot_bits=8,
            tuples_per_mapper=tuples_for(scenario.feed_ms_min),
        ),
        schedule=scenario.schedule,
    )
    assert simulation.config.feed_ms >= scenario.feed_ms_min
    result = simulation.run()
    expect = scenario.expect
    cores = simulation.live_cores()
    assert list(cores) == [node for node in scenario.node_ids if node not in scenario.killed]
    for node_id, core in cores.items():
        taken = [record["dead"] for record in core.recovery.takeover_records]
        assert taken == expect.taken_over_by(node_id), f"{node_id} took over {taken}"
        assert result.counters[node_id]["takeovers"] == len(taken)
        assert result.counters[node_id]["fenced"] == (1 if node_id in expect.fenced else 0)
    for node_id in expect.fenced:
        fenced = cores[node_id]
        assert fenced.incarnation == 2
        assert fenced.view.members[node_id].status is Status.STANDBY
        assert fenced.ring.range_of(node_id) is None
        assert fenced.store.key_count() == 0
    for node_id in expect.quorum_missed:
        assert result.counters[node_id]["quorum_missed"] >= 1
    for node_id in expect.vouched:
        assert result.counters[node_id]["suspicions_vouched"] >= 1
    assert owners(simulation) == list(scenario.owners_at_end)
    if any(isinstance(fault, Partition) for fault in scenario.schedule):
        assert result.network["held_by_partition"] > 0


def test_a_node_paused_soon_after_start_is_declared_dead_despite_the_first_contact_grace() -> None:
    # The grace is for nodes never heard from; these all were, within milliseconds.
    _, result = scenario(Pause(n("n2"), 300, 2500), first_contact_grace_ms=5000)
    assert result.counters["n2"]["fenced"] == 1


def test_faults_as_data_drive_a_run_exactly() -> None:
    # The schedule a seed draws is part of its result: replaying it as data gives the same run.
    drawn = run_seed(3)
    config = SimConfig.from_seed(3)
    replayed = Simulation(3, config=config, schedule=drawn.schedule).run()
    assert replayed.fingerprint() == drawn.fingerprint()


def test_a_lost_snapshot_end_is_recovered_and_the_replica_completes() -> None:
    lost = []

    def lose_first_snapshot_end(src: str, dst: str, frames: Sequence[bytes]) -> bool:
        if (src, dst) == ("n1", "n2") and not lost and decode(frames).kind is Kind.SNAPSHOT_END:
            lost.append(frames)
            return True
        return False

    scenario(lose=lose_first_snapshot_end, heal_limit_ms=5000)


def test_a_snapshot_larger_than_the_peer_queue_bound_arrives_whole() -> None:
    scenario(
        Kill(n("n1"), 600),
        seed=3,
        nodes=4,
        slot_bits=10,
        snapshot_chunk_keys=1,
        vocabulary=2000,
        tuples_per_mapper=6000,
        feed_chunk=200,
        network=NetworkSettings(link_messages_max=50),
    )


def test_a_node_that_missed_a_view_change_catches_up() -> None:
    def lose_gossip_to_n2(src: str, dst: str, frames: Sequence[bytes]) -> bool:
        return (src, dst) == ("n1", "n2") and decode(frames).kind is Kind.GOSSIP

    scenario(
        Kill(n("n0"), 300),
        nodes=3,
        lose=lose_gossip_to_n2,
        feed_limit_ms=3_000,
        heal_limit_ms=5_000,
    )


def test_a_lost_snapshot_chunk_is_detected_and_the_snapshot_asked_again() -> None:
    # n3 takes over n2 and re-replicates its grown range to n4 in chunks of a few keys;
    # the second chunk of the first such snapshot is lost on the way. n4 must see the hole,
    # not complete the replica with it, and ask again; the run's final check (d) then holds
    # n4's replica plus backup equal to n3's state.
    lost: list[SnapshotChunk] = []

    def lose_one_chunk(src: str, dst: str, frames: Sequence[bytes]) -> bool:
        message = decode(frames)
        if (
            (src, dst) == ("n3", "n4")
            and not lost
            and isinstance(message, SnapshotChunk)
            and message.index == 1
        ):
            lost.append(message)
            return True
        return False

    simulation, result = scenario(
        Kill(n("n2"), 400), lose=lose_one_chunk, snapshot_chunk_keys=5, heal_limit_ms=5000
    )
    assert len(lost) == 1
    assert result.counters["n4"]["snapshot_chunks_missing"] == 1
    # The aborted snapshot was followed by a complete one.
    assert result.counters["n4"]["snapshots_received"] >= 2
    n4 = simulation.live_cores()[n("n4")]
    assert n4.replication.replicas[n("n3")].is_complete


def test_a_backup_near_its_bound_asks_for_an_early_checkpoint_instead_of_refusing() -> None:
    # A 20 kB backup bound holds a few batches, and checkpoints come only every second: at
    # three quarters of the bound each secondary asks its primary for a checkpoint now,
    # whose eviction makes room, so no batch is refused (without it, five were, and the
    # feed took 2.1 s instead of 1.2 s of virtual time).
    _, result = scenario(
        nodes=3, backup_bytes_max=20_000, checkpoint_interval_ms=1000, tuples_per_mapper=3000
    )
    assert total(result, "checkpoints_requested") >= 3
    assert total(result, "checkpoints_early") >= 3
    assert total(result, "backup_refused_full") == 0
