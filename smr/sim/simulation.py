"""One seeded run of a cluster in virtual time: :class:`Simulation`, which builds the run's
parts (the scheduler, the network, the node turns, the delivery, the mappers, the edges) and
takes the run's steps (docs/design/simulation.md#run)."""

from __future__ import annotations

import logging
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, replace
from typing import Any, Final

from smr.checkpoint.store import StateStore
from smr.faults.draws import random_schedule
from smr.faults.model import FaultSchedule
from smr.faults.tolerance import Tolerance, within_tolerance
from smr.mapper.emitter import Emitter
from smr.node.core import NodeCore
from smr.ring.hashing import even_tokens, slot_count
from smr.ring.ids import Incarnation, NodeId, Token
from smr.ring.view import Member, Status, View
from smr.sim import checks, nemesis
from smr.sim.clock import Scheduler
from smr.sim.config import SimConfig, SimResult, SweepOptions, seeded_counters
from smr.sim.delivery import Delivery
from smr.sim.disk import SimFiles
from smr.sim.feeding import start_mappers
from smr.sim.ledger import FeedLedger
from smr.sim.mappers import MapperProcess
from smr.sim.network import ADDR_PREFIX, Link, SimClock, SimNetwork
from smr.sim.nodes import ClientEnd, SimNode
from smr.sim.readers import SimReaders
from smr.sim.report import (
    SimulationFailure,
    edges_tally,
    emitter_figures,
    failure,
    node_events,
)
from smr.sim.restart import Restart
from smr.sim.reuse import IdReuse
from smr.sim.subscriber import SimSubscriber
from smr.sim.turns import NodeTurns, tick_ms_of
from smr.sim.windowed import WindowedFeed, check_windows

log = logging.getLogger("smr.sim")


# How often convergence is checked during the healing phase.
CONVERGENCE_CHECK_US: Final = 50_000


class Simulation:
    """One seeded run of a cluster in virtual time (docs/design/simulation.md#run).

    Guarantees: the run is a pure function of ``seed`` and the configuration; ``run`` raises
    :class:`SimulationFailure` (message starting ``seed=<seed>``) if an invariant breaks, or
    if the fault schedule given is not within tolerance.
    """

    def __init__(
        self,
        seed: int,
        nodes: int | None = None,
        replication: int | None = None,
        slot_bits: int | None = None,
        *,
        config: SimConfig | None = None,
        schedule: FaultSchedule | None = None,
        check_tolerance: bool = True,
        replay: str | None = None,
        trace: Callable[[str], None] | None = None,
        lose: Callable[[str, str, Sequence[bytes]], bool] | None = None,
        **overrides: Any,
    ) -> None:
        """Build the run of ``seed``: ``config`` (default ``SimConfig()``) with ``nodes``,
        ``replication``, ``slot_bits``, ``schedule`` and any other ``SimConfig`` field given
        as a keyword replacing its value. ``check_tolerance=False`` lets a schedule beyond
        tolerance run (to show what it breaks). ``replay`` is the command printed on failure.
        ``trace``, if given, is called with a line per message a node reads (for debugging).
        ``lose``, if given, picks messages to lose: ``lose(src, dst, frames)`` is asked for
        every message sent (endpoints are node ids or mapper connection names).
        """
        self.config = _configured(
            config,
            overrides,
            nodes=nodes,
            replication=replication,
            slot_bits=slot_bits,
            schedule=schedule,
        )
        self.replay = replay
        self.seed = seed
        self.node_ids = [NodeId(f"n{i}") for i in range(self.config.nodes)]
        # Standby nodes: not in the ring (faults never target them), capacity for joins.
        self.standby_ids = [NodeId(f"s{i}") for i in range(self.config.standby)]
        self.settings = self.config.node_settings()
        self.tolerance = self._tolerance()
        self.schedule = self._schedule()
        self._check_tolerance = check_tolerance
        self._start_world(trace, lose)
        self._start_feed_records()
        self._ran = False

    def _tolerance(self) -> Tolerance:
        """The failure detector's bounds the fault schedules keep within."""
        return Tolerance(
            failure_timeout_ms=self.settings.failure_timeout_ms,
            probe_timeout_ms=self.settings.probe_timeout_ms,
            suspicion_timeout_ms=self.settings.suspicion_timeout_ms,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            tick_ms=tick_ms_of(self.settings),
        )

    def _schedule(self) -> FaultSchedule:
        """The configuration's fault schedule, or one drawn from the seed within tolerance."""
        config = self.config
        if config.schedule is not None:
            return config.schedule
        return random_schedule(
            self.rng("schedule"),
            self.node_ids,
            config.replication,
            config.feed_ms,
            self.tolerance,
            config.faults_max,
            self.standby_ids,
        )

    def _start_world(
        self,
        trace: Callable[[str], None] | None,
        lose: Callable[[str, str, Sequence[bytes]], bool] | None,
    ) -> None:
        """The clock, the network, the scheduler, the nodes' turns and the delivery of
        messages to them (no node started yet)."""
        self.clock = SimClock()
        self.network = SimNetwork(self.clock, f"smr.sim:{self.seed}:network", self.config.network)
        self.network.lose = lose
        self.scheduler = Scheduler(self.clock, after_event=self._raise_mapper_errors)
        self.turns = NodeTurns(
            self.config,
            self.settings,
            self.scheduler,
            self.network,
            (*self.node_ids, *self.standby_ids),
            trace,
        )
        self.delivery = Delivery(self.network, self.scheduler, self.turns.nodes, self.turns.wake)

    def _start_feed_records(self) -> None:
        """What the run's processes record: the mappers and emitters, the oracle, the
        ledger, and the edges' processes (none yet)."""
        self.mappers: list[MapperProcess] = []
        self.emitters: dict[str, Emitter] = {}
        self.oracle: Counter[str] = Counter()
        # A windowed run's words and event times, for the model of its windows.
        self.windowed: WindowedFeed | None = (
            WindowedFeed(self.config) if self.config.windowed else None
        )
        # What the mappers emitted and had acknowledged so far, and the readers checking
        # against it (smr.sim.readers), when the run has readers.
        self.ledger: FeedLedger | None = FeedLedger() if self.config.readers else None
        self.readers: SimReaders | None = None
        self.reuse: IdReuse | None = None
        self.restart: Restart | None = None
        # The simulated processes that are not mappers (the subscriber).
        self.subscriber: SimSubscriber | None = None
        self.background: list[MapperProcess] = []
        self.tuples = 0

    # -- what the simulated clients, disks and restarts ask of the run -----------------------

    def rng(self, stream: str) -> random.Random:
        """The run's own random stream named ``stream`` (seeded from the seed and the name)."""
        # One independent stream per concern: a change in one (another fault) leaves the
        # others (the words, the latencies) as they were. Seeding with a str hashes it with
        # SHA-512, which does not depend on PYTHONHASHSEED.
        return random.Random(f"smr.sim:{self.seed}:{stream}")

    def schedule_at(self, time_us: int, action: Callable[..., None], *args: Any) -> None:
        """Run ``action(*args)`` at virtual time ``time_us`` (``Scheduler.at``)."""
        self.scheduler.at(time_us, action, *args)

    def run_until(self, done: Callable[[], bool], limit_us: int) -> bool:
        """Run events until ``done()``, or until ``limit_us``: whether ``done()``."""
        return self.scheduler.run_until(done, limit_us)

    def note(self, text: str) -> None:
        """Keep ``text`` among the run's notable events, at the virtual time now."""
        self.scheduler.note(text)

    @property
    def events(self) -> deque[str]:
        """The run's notable events (``Scheduler.notes``)."""
        return self.scheduler.notes

    def acting_as(self, node_id: NodeId) -> AbstractContextManager[None]:
        """Within the block, what the nodes log is noted as ``node_id``'s."""
        return self.scheduler.acting_as(node_id)

    @property
    def tick_ms(self) -> int:
        """The nodes' tick period."""
        return self.turns.tick_ms

    def connect(self, end: ClientEnd) -> None:
        """Register a client's end: replies to its identity go to it (``Delivery``)."""
        self.delivery.connect(end)

    def end_of(self, identity: str) -> ClientEnd | None:
        """The client's end registered as ``identity`` (``connect``), if any."""
        return self.delivery.end_of(identity)

    def send_to_node(
        self,
        link: Link,
        identity: bytes,
        frames: Sequence[bytes],
        src_node: str | None = None,
        peer_link: bool = False,
    ) -> bool:
        """A message to the node at the end of ``link`` (``Delivery.send_to_node``)."""
        return self.delivery.send_to_node(link, identity, frames, src_node, peer_link)

    def settle(self) -> None:
        """Run until every message sent so far has arrived (``Delivery.settle``)."""
        self.delivery.settle()

    # -- nodes --------------------------------------------------------------------------------

    def initial_view(self) -> View:
        """The view every node starts with."""
        config = self.config
        if config.even_tokens:
            tokens = even_tokens(config.nodes, config.slot_bits)
        else:
            rng = self.rng("tokens")
            tokens = sorted(
                Token(t) for t in rng.sample(range(slot_count(config.slot_bits)), config.nodes)
            )
        standby = (
            Member(node, Incarnation(1), f"{ADDR_PREFIX}{node}", Token(0), "", Status.STANDBY, 1)
            for node in self.standby_ids
        )
        return View(
            [
                *(
                    Member(node, Incarnation(1), f"{ADDR_PREFIX}{node}", token, "", Status.UP, 1)
                    for node, token in zip(self.node_ids, tokens, strict=True)
                ),
                *standby,
            ]
        )

    @property
    def nodes(self) -> Mapping[NodeId, SimNode]:
        """Every node's shell, by id (``NodeTurns.nodes``)."""
        return self.turns.nodes

    @property
    def disks(self) -> Mapping[NodeId, SimFiles]:
        """Each node's simulated disk, when the run restarts from them (``smr.sim.disk``)."""
        return self.turns.disks

    @property
    def output_files(self) -> Mapping[str, bytearray]:
        """Every node's output file, on the disk they share, when the run has a subscriber."""
        return self.turns.output_files

    def new_core(
        self,
        sim_node: SimNode,
        view: View,
        store: StateStore | None = None,
        restored_from_crash: bool = False,
        left_out: frozenset[NodeId] = frozenset(),
    ) -> NodeCore:
        """A node process starting (again) (``NodeTurns.new_core``)."""
        return self.turns.new_core(sim_node, view, store, restored_from_crash, left_out)

    def start_timers(self, sim_node: SimNode, phases: random.Random) -> None:
        """The node's timers, from now, at seeded phases (``NodeTurns.start_timers``)."""
        self.turns.start_timers(sim_node, phases)

    def wake(self, node: SimNode) -> None:
        """One receive turn of the node (``NodeTurns.wake``)."""
        self.turns.wake(node)

    def fire(self, node: SimNode, which: str) -> None:
        """The node's timer ``which`` fires now (``NodeTurns.fire``)."""
        self.turns.fire(node, which)

    def live(self) -> list[tuple[SimNode, NodeCore]]:
        """The live nodes and their cores, in id order."""
        return self.turns.live()

    def live_cores(self) -> dict[NodeId, NodeCore]:
        """The live nodes' cores (killed ones are gone), by node id, in id order."""
        return self.turns.live_cores()

    # -- mappers --------------------------------------------------------------------------------

    def _raise_mapper_errors(self) -> None:
        for process in (*self.mappers, *self.background):
            if process.error is not None:
                error, process.error = process.error, None
                raise MapperFailed(process.name, error)

    def _cancel_mappers(self) -> None:
        for process in (*self.mappers, *self.background):
            process.cancel()

    # -- convergence and checks -------------------------------------------------------------------

    def converge(self, deadline_us: int) -> None:
        """Run until ``checks.not_converged`` says None; AssertionError with its reason if
        that does not happen by ``deadline_us``."""
        started_us = self.clock.now_us
        while (reason := checks.not_converged(self)) is not None:
            next_check_us = self.clock.now_us + CONVERGENCE_CHECK_US
            if next_check_us > deadline_us:
                waited_ms = (self.clock.now_us - started_us) // 1000
                raise AssertionError(f"no convergence within {waited_ms} ms: {reason}")
            self.scheduler.run_to(next_check_us)

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run steps 1 to 5 of docs/design/simulation.md#run; the result, or SimulationFailure."""
        if self._ran:
            raise RuntimeError("a Simulation runs once; build another for another run")
        self._ran = True
        try:
            with node_events(self.scheduler):
                return self._run()
        except MapperFailed as failure:
            raise self._failure(
                f"mapper {failure.mapper} failed: {type(failure.error).__name__}: {failure.error}",
                failure.error,
            ) from failure.error
        except SimulationFailure:
            raise
        except AssertionError as error:
            raise self._failure(str(error)) from error
        except Exception as error:
            raise self._failure(f"{type(error).__name__}: {error}", error) from error
        finally:
            self._cancel_mappers()

    def _run(self) -> SimResult:
        config = self.config
        if self._check_tolerance:
            reason = within_tolerance(
                self.schedule, self.node_ids, config.replication, self.tolerance
            )
            if reason is not None:
                raise AssertionError(f"the fault schedule is beyond tolerance: {reason}")
        # 1.
        view = self.initial_view()
        self.turns.start_nodes(view, self, self.rng("timers"))
        # 2.
        self.tuples += start_mappers(self, view)
        if self.ledger is not None:
            self.readers = SimReaders(self, self.ledger)
            self.readers.start()
        if config.reuse_ids:
            self.reuse = IdReuse(self, self.mappers[0])
            self.reuse.start()
        if config.subscriber:
            self.subscriber = SimSubscriber(self)
            self.subscriber.start()
        # 3.
        nemesis.schedule_faults(self)
        fed = self.scheduler.run_until(
            lambda: all(process.done for process in self.mappers), config.feed_limit_ms * 1000
        )
        if not fed:
            raise AssertionError(
                f"the feed did not finish within {config.feed_limit_ms} ms of virtual time"
            )
        self.note("feed done: every mapper's close() returned")
        # 4.
        self.scheduler.run_to(max(self.clock.now_us, self.schedule.end_ms * 1000))
        nemesis.heal(self)
        # What a partition held back or a delay slowed down arrives before convergence counts.
        self.settle()
        heal_at_us = self.clock.now_us
        self.note("healed: every fault ended")
        self.converge(heal_at_us + config.heal_limit_ms * 1000)
        self.note("converged")
        # 5.
        if self.readers is not None:
            self.readers.read_all_converged()
        if self.windowed is not None:
            self._check_windows()
        else:
            checks.check_state(self)
        if self.subscriber is not None:
            self.subscriber.finish()
        if self._check_tolerance:
            checks.check_no_false_death(self)
        if self.windowed is None:
            checks.check_replicas(self)
        if config.restart_fault is not None:
            self.settle()
            self.restart = Restart(self, config.restart_fault)
            self.restart.run()
        return self._result()

    def _check_windows(self) -> None:
        """A windowed run's checks (``smr.sim.windowed``): ownership as any run's; then, once
        the nodes ran a few checkpoint cycles more (every mapper finished, so every window is
        due) and wrote what they hold, each window's result against the model. A replica's
        state is not compared with its primary's: windows the primary closed since its last
        checkpoint are closed again by a taker, with the same result."""
        checks.check_ownership(self)
        cycles_us = 4 * self.config.checkpoint_interval_ms * 1000 + self.tick_ms * 2000
        self.scheduler.run_to(self.clock.now_us + cycles_us)
        self.settle()
        windows = check_windows(self)
        self.note(f"windows checked: {windows} windows, each left once with the model's count")

    def _result(self) -> SimResult:
        live = self.live()
        counters: dict[str, dict[str, int]] = {
            node.node_id: seeded_counters(core.counters) for node, core in live
        }
        edges = (self.readers, self.reuse, self.restart, self.subscriber)
        return SimResult(
            seed=self.seed,
            schedule=self.schedule,
            end_ms=self.clock.now_ms,
            view=live[0][1].view.to_wire(),
            counters=counters,
            emitters=emitter_figures(self.emitters),
            network=asdict(self.network.stats),
            events=list(self.events),
            tuples=self.tuples,
            keys=len(self.oracle),
            edges=edges_tally(edge.tally for edge in edges if edge is not None),
        )

    def describe_config(self) -> str:
        """The configuration, on one line."""
        return self.config.describe()

    def _failure(self, what: str, error: BaseException | None = None) -> SimulationFailure:
        return failure(
            self.seed,
            self.clock.now_ms,
            what,
            self.schedule,
            self.config,
            self.replay,
            self.events,
            error,
        )


def _configured(
    config: SimConfig | None, overrides: Mapping[str, Any], **explicit: Any
) -> SimConfig:
    """``config`` (default ``SimConfig()``) with the ``explicit`` fields that are not None
    and every field of ``overrides`` replaced."""
    given = {name: value for name, value in explicit.items() if value is not None}
    return replace(config or SimConfig(), **given, **overrides)


class MapperFailed(Exception):
    def __init__(self, mapper: str, error: BaseException) -> None:
        super().__init__(mapper, error)
        self.mapper = mapper
        self.error = error


def seed_simulation(seed: int, options: SweepOptions | None = None) -> Simulation:
    """The run of the configuration and random schedule that ``seed`` draws within
    ``options``: the sweep's unit."""
    options = options or SweepOptions()
    return Simulation(
        seed,
        config=SimConfig.from_seed(seed, options),
        replay=f"python -m smr.sim --seed {seed} {options.flags()} -v",
    )


def run_seed(seed: int, options: SweepOptions | None = None) -> SimResult:
    """Run ``seed_simulation(seed, options)``."""
    return seed_simulation(seed, options).run()
