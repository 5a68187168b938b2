"""The hand-picked fault scenarios, written once as data (docs/design/faults.md#scenarios).

Each :class:`Scenario` is a ring, a fault schedule within tolerance and the outcome it must
end with (:class:`Expectation`: who takes over whom, who is fenced, who misses a quorum, who
is vouched for); the simulation and the end-to-end tests over real processes both run
:data:`SCENARIOS` and check the same expectation. Nothing here knows how a fault is carried
out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from smr.faults.model import FaultSchedule, Kill, Partition, Pause, Stall, Starve
from smr.ring.ids import NodeId

__all__ = ["SCENARIOS", "Expectation", "Scenario", "Takeover"]


def _ids(*names: str) -> tuple[NodeId, ...]:
    return tuple(NodeId(name) for name in names)


@dataclass(frozen=True)
class Takeover:
    """``absorber`` took over ``dead``'s range."""

    absorber: NodeId
    dead: NodeId


@dataclass(frozen=True)
class Expectation:
    """How a scenario must end, besides what every run must (see the module doc)."""

    takeovers: tuple[Takeover, ...] = ()
    fenced: tuple[NodeId, ...] = ()
    quorum_missed: tuple[NodeId, ...] = ()
    vouched: tuple[NodeId, ...] = ()

    def taken_over_by(self, absorber: str) -> list[NodeId]:
        """The nodes ``absorber`` takes over, in order (empty: it takes over none)."""
        return [t.dead for t in self.takeovers if t.absorber == absorber]


@dataclass(frozen=True)
class Scenario:
    """A named ring and fault schedule, and the outcome it must end with.

    Guarantees (checked on construction): every node named is one of the ring's; the dead
    of the takeovers are exactly the killed and the fenced nodes; no absorber is one of
    them; every fault starts within ``feed_ms_min``.
    """

    name: str
    nodes: int
    replication: int
    schedule: FaultSchedule
    expect: Expectation
    feed_ms_min: int = 800
    node_ids: tuple[NodeId, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_ids", _ids(*(f"n{i}" for i in range(self.nodes))))
        named = {t.absorber for t in self.expect.takeovers} | {
            t.dead for t in self.expect.takeovers
        }
        named |= {*self.expect.fenced, *self.expect.quorum_missed, *self.expect.vouched}
        for fault in self.schedule:
            if isinstance(fault, Partition):
                named |= {*fault.group_a, *fault.group_b}
            else:
                named.add(fault.node)
        if unknown := sorted(named - set(self.node_ids)):
            raise ValueError(f"{self.name}: {unknown} are not nodes of a {self.nodes}-node ring")
        dead = {t.dead for t in self.expect.takeovers}
        if dead != set(self.killed) | set(self.expect.fenced):
            raise ValueError(
                f"{self.name}: the nodes taken over {sorted(dead)} must be exactly the killed "
                f"{list(self.killed)} and the fenced {list(self.expect.fenced)}"
            )
        if absorbers := sorted(dead & {t.absorber for t in self.expect.takeovers}):
            raise ValueError(f"{self.name}: {absorbers} are taken over, so cannot absorb")
        if late := [f for f in self.schedule if f.at_ms >= self.feed_ms_min]:
            raise ValueError(f"{self.name}: {late} start after the feed ({self.feed_ms_min} ms)")

    @property
    def killed(self) -> tuple[NodeId, ...]:
        """The nodes the schedule kills, in ring order."""
        victims = {fault.node for fault in self.schedule if isinstance(fault, Kill)}
        return tuple(node for node in self.node_ids if node in victims)

    @property
    def owners_at_end(self) -> tuple[NodeId, ...]:
        """The nodes that own slots once the run has converged, in ring order."""
        gone = set(self.killed) | set(self.expect.fenced)
        return tuple(node for node in self.node_ids if node not in gone)


n0, n1, n2, n3, n4, n5 = _ids("n0", "n1", "n2", "n3", "n4", "n5")

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "one_node_killed_mid_feed_is_taken_over_by_its_successor",
        nodes=5,
        replication=1,
        schedule=FaultSchedule((Kill(n2, 400),)),
        expect=Expectation(takeovers=(Takeover(n3, n2),)),
    ),
    Scenario(
        "two_non_adjacent_nodes_killed_at_once_with_r1_are_taken_over_in_parallel",
        nodes=5,
        replication=1,
        schedule=FaultSchedule((Kill(n1, 400), Kill(n3, 400))),
        expect=Expectation(takeovers=(Takeover(n2, n1), Takeover(n4, n3))),
    ),
    Scenario(
        # A zone outage: with zones a, b dealt in turn, zone a is every other node, and the
        # nodes of a zone are never neighbours (ring.zones), so half the ring dies at once
        # with r = 1 and every range keeps a copy.
        "a_whole_zone_of_every_other_node_killed_at_once_with_r1_is_taken_over_in_parallel",
        nodes=6,
        replication=1,
        schedule=FaultSchedule((Kill(n0, 400), Kill(n2, 400), Kill(n4, 400))),
        expect=Expectation(takeovers=(Takeover(n1, n0), Takeover(n3, n2), Takeover(n5, n4))),
    ),
    Scenario(
        # n3 backs up both with r=2 and takes them over nearest first.
        "two_adjacent_nodes_killed_at_once_with_r2_are_taken_over_one_after_the_other",
        nodes=5,
        replication=2,
        schedule=FaultSchedule((Kill(n1, 400), Kill(n2, 400))),
        expect=Expectation(takeovers=(Takeover(n3, n2), Takeover(n3, n1))),
    ),
    Scenario(
        "a_node_paused_past_the_timeout_is_fenced_and_rejoins_empty",
        nodes=5,
        replication=1,
        schedule=FaultSchedule((Pause(n2, 300, 1500),)),
        expect=Expectation(takeovers=(Takeover(n3, n2),), fenced=(n2,)),
    ),
    Scenario(
        # 250 ms of silence plus a heartbeat gap stays under the 500 ms failure timeout.
        "a_short_pause_under_the_timeout_causes_no_takeover",
        nodes=5,
        replication=1,
        schedule=FaultSchedule((Pause(n2, 300, 250),)),
        expect=Expectation(),
    ),
    Scenario(
        # A reduce call of 3 s holds n2's loop, far past the failure timeout; its heartbeats
        # go on from their own thread.
        "a_node_stalled_by_a_slow_reduce_call_is_not_declared_dead",
        nodes=5,
        replication=1,
        schedule=FaultSchedule((Stall(n2, 300, 3000),)),
        expect=Expectation(),
    ),
    Scenario(
        # n4 stalls; n0, which watched it, dies meanwhile: n1 takes n0 over and watches n4
        # from then on, though stalled n4 never read that view change.
        "a_stalled_node_whose_watcher_dies_meanwhile_is_not_declared_dead",
        nodes=5,
        replication=1,
        schedule=FaultSchedule((Stall(n4, 300, 2000), Kill(n0, 400))),
        expect=Expectation(takeovers=(Takeover(n1, n0),)),
    ),
    Scenario(
        # n1 and its watcher n2 get the CPU in turns only (gaps of up to 140 ms, then a
        # tick) for two seconds: both slow, neither dead.
        "nodes_starved_of_cpu_are_slow_not_dead",
        nodes=4,
        replication=1,
        schedule=FaultSchedule((Starve(n1, 300, 2000, 140), Starve(n2, 400, 2000, 120))),
        expect=Expectation(),
        feed_ms_min=2400,
    ),
    Scenario(
        "a_short_partition_causes_no_takeover",
        nodes=5,
        replication=1,
        schedule=FaultSchedule((Partition((n1, n2), (n0, n3, n4), 300, 250),)),
        expect=Expectation(),
    ),
    Scenario(
        # n2 hears nobody: with no quorum it must not declare its healthy predecessor n1
        # dead, while the rest of the ring declares n2 dead and n3 takes it over.
        "a_node_cut_off_past_the_timeout_declares_nobody_dead_and_is_fenced",
        nodes=5,
        replication=1,
        schedule=FaultSchedule((Partition((n2,), (n0, n1, n3, n4), 500, 1200),)),
        expect=Expectation(takeovers=(Takeover(n3, n2),), fenced=(n2,), quorum_missed=(n2,)),
        feed_ms_min=1600,
    ),
    Scenario(
        # n2 and n3 (r=2) hear each other, but two of six owners are no majority: neither
        # declares n0 or n1 dead, and n4 takes both over, nearest first. The cut lasts long
        # enough for two takeovers one after the other on a slow, loaded machine too (the
        # second starts only once the first has made n4 n2's watcher).
        "a_minority_cut_off_together_declares_nobody_dead_and_the_majority_takes_it_over",
        nodes=6,
        replication=2,
        schedule=FaultSchedule((Partition((n2, n3), (n0, n1, n4, n5), 500, 3000),)),
        expect=Expectation(
            takeovers=(Takeover(n4, n3), Takeover(n4, n2)), fenced=(n2, n3), quorum_missed=(n2,)
        ),
        feed_ms_min=3600,
    ),
    Scenario(
        # Only the link between n1 and its watcher n2 is cut: n2 suspects n1, the other
        # owners reach n1 for it and vouch, and nobody is declared dead.
        "a_link_cut_between_a_node_and_its_watcher_alone_is_no_death",
        nodes=5,
        replication=2,
        schedule=FaultSchedule((Partition((n1,), (n2,), 500, 1500),)),
        expect=Expectation(vouched=(n2,)),
        feed_ms_min=2400,
    ),
)
"""Every scenario, once; names are unique and read as what the scenario shows."""
