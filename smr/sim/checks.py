"""The end of a run: convergence after healing, and the checks (a) to (e) of
docs/design/simulation.md#run, as functions of a run (:class:`CheckedRun`, which
``Simulation`` offers)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from smr.checkpoint.ids import MapperId
from smr.checkpoint.promote import PrimaryCopy
from smr.checkpoint.replica import PeerReplica
from smr.checkpoint.store import StateStore
from smr.faults.model import FaultSchedule
from smr.faults.tolerance import Tolerance, lost_nodes
from smr.mapper.emitter import Emitter
from smr.node.core import NodeCore, Timer
from smr.node.takeover import promote_range
from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId, Slot
from smr.ring.placement import Ring, Role
from smr.ring.view import Status
from smr.sim.clock import Scheduler
from smr.sim.config import SimConfig
from smr.sim.network import SimClock
from smr.sim.nodes import SimNode, sim_job

log = logging.getLogger("smr.sim")


class CheckedRun(Protocol):
    """What the checks ask of the run (``Simulation`` offers it): its configuration, faults
    and tolerance, the live nodes, the oracle and the emitters, and running it on (a receive
    turn, ``settle``, ``converge``)."""

    @property
    def config(self) -> SimConfig: ...

    @property
    def schedule(self) -> FaultSchedule: ...

    @property
    def tolerance(self) -> Tolerance: ...

    @property
    def node_ids(self) -> Sequence[NodeId]: ...

    @property
    def nodes(self) -> Mapping[NodeId, SimNode]: ...

    @property
    def oracle(self) -> Mapping[str, int]: ...

    @property
    def emitters(self) -> Mapping[str, Emitter]: ...

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def clock(self) -> SimClock: ...

    def live(self) -> list[tuple[SimNode, NodeCore]]: ...

    def live_cores(self) -> dict[NodeId, NodeCore]: ...

    def wake(self, node: SimNode) -> None: ...

    def settle(self) -> None: ...

    def converge(self, deadline_us: int) -> None: ...


def not_converged(sim: CheckedRun) -> str | None:
    """None when converged; otherwise the first reason it is not, in words."""
    live = sim.live()
    if not live:
        return "no live node"
    first = live[0][1].view
    for node, core in live:
        if core.view != first:
            return f"{node.node_id} holds another view: {core.view!r} vs {first!r}"
    joining = [m.node_id for m in first.members.values() if m.status is Status.JOINING]
    if joining:
        return f"{', '.join(joining)} still joining"
    incarnations = {node.node_id: core.incarnation for node, core in live}
    for member in first.owners():
        if incarnations.get(member.node_id) != member.incarnation:
            return f"{member.node_id} owns slots in the view but is dead or fenced"
    for node, core in live:
        if core.restart.settling:
            return f"{node.node_id} is still exchanging the views restored from disk"
        if core.ingest.inbox:
            return f"{node.node_id} has {len(core.ingest.inbox)} batches to apply"
        if core.snapshots.has_work:
            return f"{node.node_id} has snapshot work pending"
        if core.checkpoints.shipping:
            return f"{node.node_id} is shipping a checkpoint"
        if core.moves.giving is not None:
            return f"{node.node_id} is giving a move ({core.moves.giving.step.value})"
        if core.moves.taking.settling is not None:
            return f"{node.node_id} is settling a move it received"
        if awaited := core.handoff.awaited():
            return f"{node.node_id} waits for the state of lost slots from {sorted(awaited)}"
        # With r or fewer owners left, r copies elsewhere cannot exist: then it is enough
        # that every other owner holds a complete replica (checked below).
        under_replicated = core.control.under_replicated_slots()
        if len(core.ring.owners) > sim.config.replication and under_replicated:
            return f"{node.node_id} has {under_replicated} under-replicated slots"
        for predecessor in core.predecessors:
            replica = core.replication.replicas.get(predecessor)
            if replica is None or not replica.is_complete:
                return f"{node.node_id} has no complete replica of {predecessor} yet"
    return None


def check_replicas(sim: CheckedRun) -> None:
    """(d) for every owner, what each of its secondaries would promote if it took over
    now (its replica of the owner's range, then its backed-up batches replayed, as
    ``NodeCore.take_over`` does) equals the owner's state and hwm vectors: the next
    takeover would be exact too. Checked after one more checkpoint cycle (which evicts
    backups) and convergence again."""
    cores = sim.live_cores()
    for node_id, core in cores.items():
        with sim.scheduler.acting_as(node_id):
            core.on_timer(Timer.CHECKPOINT)
        sim.scheduler.at(sim.clock.now_us, sim.wake, sim.nodes[node_id])
    # A gap this checkpoint reveals starts a snapshot: converge again.
    sim.settle()
    sim.converge(sim.clock.now_us + sim.config.heal_limit_ms * 1000)
    sim.settle()
    for owner, core in cores.items():
        owned = core.ring.range_of(owner)
        if owned is None:
            continue
        slots = [Slot(s) for s in sorted(core.store.slots()) if owned.contains(s)]
        for secondary in core.secondaries:
            promoted = promoted_copy(cores[secondary], owner, slots)
            # A retired mapper's hwms are dropped at each store in its own time (intake
            # answers its batches from then on): they are not compared.
            retired = set(core.store.retired) | set(promoted.retired)
            expected = _state_of(core.store, slots, retired)
            actual = _state_of(promoted, slots, retired)
            if actual != expected:
                wrong = sorted(
                    k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k)
                )
                raise AssertionError(
                    f"{secondary} would not take over {owner} exactly: its replica plus "
                    f"backup differ from {owner}'s state in {len(wrong)} entries, e.g. "
                    + ", ".join(f"{k}: {actual.get(k)} != {expected.get(k)}" for k in wrong[:4])
                )


def promoted_copy(holder: NodeCore, owner: NodeId, slots: list[Slot]) -> StateStore:
    """What ``holder`` would promote for ``owner``'s ``slots`` if it took over now (by
    copy: the holder's replica is left as it is): as ``Recovery.take_over`` does, the orphan
    copies of the nodes ``owner`` absorbed first, then its own."""
    store = StateStore()
    replication = holder.replication
    orphans = replication.orphans.absorbed_by(owner)
    copy = PrimaryCopy(
        replication.replicas.get(owner) or PeerReplica(), replication.backups.get(owner)
    )
    reduce = sim_job().tuple_reduce

    def reduce_fn(key: Any, value: Any, state: dict[str, Any]) -> None:
        reduce(key, value, state, lambda key, value: None)

    promote_range(
        store, [*orphans, copy], slots, holder.ring.slot_count, reduce_fn, by_reference=False
    )
    return store


def check_ownership(sim: CheckedRun) -> tuple[Ring, dict[NodeId, NodeCore]]:
    """(a) one live primary per slot, the live owners' ranges partitioning the ring; the
    ring and the live cores by node id."""
    live = sim.live()
    view = live[0][1].view
    ring = Ring(view, sim.config.slot_bits)
    cores = {node.node_id: core for node, core in live}

    problems = []
    covered = 0
    for owner, slot_range in ring.ranges():
        covered += slot_range.length
        core = cores.get(owner)
        member = view.get(owner)
        if core is None:
            problems.append(f"owner {owner} of {slot_range} is not a live node")
        elif member is None or member.incarnation != core.incarnation:
            problems.append(f"owner {owner} of {slot_range} is a stale incarnation")
    if covered != ring.slot_count:
        problems.append(f"owners' ranges cover {covered} of {ring.slot_count} slots")
    for slot in range(ring.slot_count):
        primaries = [n for n, c in cores.items() if c.roles[slot] == Role.PRIMARY]
        if len(primaries) != 1:
            problems.append(f"slot {slot} has primaries {primaries}")
            break
    if problems:
        raise AssertionError("ownership: " + "; ".join(problems[:10]))
    return ring, cores


def check_state(sim: CheckedRun) -> None:
    """(a) one live primary per slot, the live owners' ranges partitioning the ring
    (:func:`check_ownership`); (b) the primaries' state equals the oracle."""
    ring, cores = check_ownership(sim)
    # (b)
    actual: dict[str, int] = {}
    holder: dict[str, NodeId] = {}
    for node_id, core in cores.items():
        roles = core.roles
        slots = sorted(s for s in core.store.slots() if roles[s] == Role.PRIMARY)
        for _, key, state in core.store.items([Slot(s) for s in slots]):
            assert isinstance(key, str)
            if key in actual:
                raise AssertionError(f"key {key!r} held by {holder[key]} and {node_id}")
            actual[key] = state.get("count", 0)
            holder[key] = node_id
    if actual != dict(sim.oracle):
        raise AssertionError("state differs from the oracle: " + _diff(sim, actual, ring))
    # (c) is implied by (b); the emitters' own count must agree too.
    for name, emitter in sim.emitters.items():
        if emitter.tuples_emitted != sim.config.tuples_per_mapper:
            raise AssertionError(
                f"mapper {name} counted {emitter.tuples_emitted} tuples emitted, "
                f"not {sim.config.tuples_per_mapper}"
            )


def reported_lost(core: NodeCore) -> set[Slot]:
    """The slots ``core`` reports lost: those it refuses tuples for and ``status`` and
    ``recover`` name (its loss ledger). A loss mark in its store that it does not act on
    (after a restore, say) is not a report."""
    return set(core.ledger.slots)


def check_no_false_death(sim: CheckedRun) -> None:
    """(e) No node was declared dead that the schedule never silenced: a node that is not
    lost by the schedule (``smr.faults.tolerance.lost_nodes``, a superset of what a correct failure
    detector may declare dead: kills, long pauses, exposed partition sides) kept beating,
    slow calls included, so no live node may have taken it over."""
    lost = set(lost_nodes(sim.schedule, sim.node_ids, sim.tolerance))
    for taker, core in sim.live_cores().items():
        for record in core.recovery.takeover_records:
            if record["dead"] not in lost:
                raise AssertionError(
                    f"{taker} declared {record['dead']} dead, but the schedule never "
                    "silenced it (a false death)"
                )


def _diff(sim: CheckedRun, actual: dict[str, int], ring: Ring) -> str:
    lines = []
    slot_bits = sim.config.slot_bits
    keys = sorted(set(actual) | set(sim.oracle))
    wrong = [k for k in keys if actual.get(k, 0) != sim.oracle.get(k, 0)]
    missing = sum(max(0, sim.oracle.get(k, 0) - actual.get(k, 0)) for k in wrong)
    extra = sum(max(0, actual.get(k, 0) - sim.oracle.get(k, 0)) for k in wrong)
    lines.append(f"{len(wrong)} of {len(keys)} keys wrong, {missing} tuples missing, {extra} extra")
    for key in wrong[:12]:
        slot = slot_of(key, slot_bits)
        lines.append(
            f"  {key}: {actual.get(key, 0)} != oracle {sim.oracle.get(key, 0)} "
            f"(slot {slot}, primary {ring.primary(slot)})"
        )
    return "\n".join(lines)


def _state_of(store: StateStore, slots: list[Slot], retired: set[MapperId]) -> dict[str, Any]:
    """``store``'s states (``key -> state``) and hwm vectors (``#slot -> vector``, without
    the ``retired`` mappers) of ``slots``, comparable with ``==``."""
    state: dict[str, Any] = {str(key): value for _, key, value in store.items(slots)}
    for slot in slots:
        vector = {m: seq for m, seq in store.hwm_vector(slot).items() if m not in retired}
        if vector:
            state[f"#{slot}"] = vector
    return state
