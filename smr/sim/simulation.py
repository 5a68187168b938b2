"""One seeded run of a cluster in virtual time: :class:`Simulation` (the protocol is in
:mod:`smr.sim`'s docstring)."""

from __future__ import annotations

import heapq
import logging
import random
import traceback
from collections import Counter, deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, replace
from typing import Any, Final

from smr.checkpoint.store import StateStore
from smr.faults.draws import random_schedule
from smr.faults.model import FaultSchedule
from smr.faults.tolerance import Tolerance, within_tolerance
from smr.mapper.emitter import Emitter
from smr.node import TICK_MS, NodeCore, NodeSettings, Timer
from smr.ring.hashing import even_tokens, slot_count
from smr.ring.ids import Incarnation, NodeId, Token
from smr.ring.view import Member, Status, View
from smr.sim import checks, nemesis
from smr.sim.clock import Scheduler
from smr.sim.config import SimConfig, SimResult, SweepOptions, seeded_counters
from smr.sim.disk import SimFiles, disk_of
from smr.sim.feeding import start_mappers
from smr.sim.mappers import MapperProcess
from smr.sim.network import ADDR_PREFIX, Envelope, Link, SimClock, SimNetwork
from smr.sim.nodes import ClientEnd, MemoryOutput, SimNode, SimNodeLinks, sim_job
from smr.sim.readers import FeedLedger, SimReaders
from smr.sim.restart import Restart
from smr.sim.reuse import IdReuse
from smr.sim.subscriber import SimSubscriber
from smr.wire.codec import decode, header_of
from smr.wire.kinds import FrameError

log = logging.getLogger("smr.sim")


# A node's receive loop handles one background step (a snapshot chunk per pending snapshot)
# per cycle; a cycle costs this much virtual time, so a long snapshot takes time to send.
BACKGROUND_STEP_US: Final = 20


# How often convergence is checked during the healing phase.
CONVERGENCE_CHECK_US: Final = 50_000


class SimulationFailure(AssertionError):
    """A simulated run broke an invariant; the message starts with ``seed=<seed>``."""


class _EventLog(logging.Handler):
    """Collects the nodes' warnings and errors with the virtual time and the node."""

    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(logging.WARNING)
        self._scheduler = scheduler

    def emit(self, record: logging.LogRecord) -> None:
        scheduler = self._scheduler
        scheduler.note(f"{scheduler.acting or '-'} {record.levelname}: {record.getMessage()}")


class Simulation:
    """One seeded run of a cluster in virtual time (see the module doc for the protocol).

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
        explicit: dict[str, Any] = {
            name: value
            for name, value in (
                ("nodes", nodes),
                ("replication", replication),
                ("slot_bits", slot_bits),
                ("schedule", schedule),
            )
            if value is not None
        }
        self.config = replace(config or SimConfig(), **explicit, **overrides)
        self.replay = replay
        self._trace = trace
        self.seed = seed
        config = self.config
        self.node_ids = [NodeId(f"n{i}") for i in range(config.nodes)]
        # Standby nodes: not in the ring (faults never target them), capacity for joins.
        self.standby_ids = [NodeId(f"s{i}") for i in range(config.standby)]
        self.settings = NodeSettings(
            replication=config.replication,
            checkpoint_interval_ms=config.checkpoint_interval_ms,
            backup_bytes_max=config.backup_bytes_max,
            snapshot_chunk_keys=config.snapshot_chunk_keys,
            checkpoint_part_keys=config.checkpoint_part_keys,
            first_contact_grace_ms=config.first_contact_grace_ms,
            # The schedules' tolerance rules hold a lost node lost for the whole run: a
            # fenced node that joins again somewhere else would change which nodes are
            # adjacent (joins are played as Join commands instead).
            rejoin_after_fence_ms=None,
            mapper_lease_ms=config.mapper_lease_ms,
            apply_rate_cap_per_s=config.apply_rate_cap_per_s,
        )
        self.tolerance = Tolerance(
            failure_timeout_ms=self.settings.failure_timeout_ms,
            probe_timeout_ms=self.settings.probe_timeout_ms,
            suspicion_timeout_ms=self.settings.suspicion_timeout_ms,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            tick_ms=self.tick_ms,
        )
        if config.schedule is None:
            self.schedule = random_schedule(
                self.rng("schedule"),
                self.node_ids,
                config.replication,
                config.feed_ms,
                self.tolerance,
                config.faults_max,
                self.standby_ids,
            )
        else:
            self.schedule = config.schedule
        self._check_tolerance = check_tolerance
        self.clock = SimClock()
        self.network = SimNetwork(self.clock, f"smr.sim:{seed}:network", config.network)
        self.network.lose = lose
        self.scheduler = Scheduler(self.clock, after_event=self._raise_mapper_errors)
        self._ends: dict[str, ClientEnd] = {}
        self.nodes: dict[NodeId, SimNode] = {}
        self.mappers: list[MapperProcess] = []
        self.emitters: dict[str, Emitter] = {}
        self.oracle: Counter[str] = Counter()
        # What the mappers emitted and had acknowledged so far, and the readers checking
        # against it (smr.sim.readers), when the run has readers.
        self.ledger: FeedLedger | None = FeedLedger() if config.readers else None
        self.readers: SimReaders | None = None
        self.reuse: IdReuse | None = None
        # Each node's simulated disk, when the run restarts from them (smr.sim.disk).
        self.disks: dict[NodeId, SimFiles] = {}
        self.restart: Restart | None = None
        # Every node's output file, on the disk they share, when the run has a subscriber;
        # and the simulated processes that are not mappers (the subscriber).
        self.output_files: dict[str, bytearray] = {}
        self.subscriber: SimSubscriber | None = None
        self.background: list[MapperProcess] = []
        self.tuples = 0
        self._ran = False

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
        return min(TICK_MS, self.settings.heartbeat_interval_ms // 2)

    def connect(self, end: ClientEnd) -> None:
        """Register a client's end: replies to its identity go to it."""
        self._ends[end.identity] = end

    def end_of(self, identity: str) -> ClientEnd | None:
        """The client's end registered as ``identity`` (``connect``), if any."""
        return self._ends.get(identity)

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

    def new_core(
        self,
        sim_node: SimNode,
        view: View,
        store: StateStore | None = None,
        restored_from_crash: bool = False,
        left_out: frozenset[NodeId] = frozenset(),
    ) -> NodeCore:
        """A node process starting (again): a new core for ``sim_node``, with ``view`` and
        the ``store`` restored from its disk, if any (``restored_from_crash``: no clean stop
        after it; ``left_out``: the nodes the restart did not start); with its simulated
        disk when the run restarts (``smr.sim.disk``)."""
        node_id = sim_node.node_id
        assert sim_node.links is not None
        settings = self.settings
        if left_out:
            settings = replace(settings, restart_left_out=frozenset(left_out))
        core = NodeCore(
            node_id,
            sim_job(),
            view,
            self.config.slot_bits,
            sim_node.links,
            MemoryOutput(node_id, self.output_files if self.config.subscriber else None),
            clock=self.clock.seconds,
            settings=settings,
            store=store,
            restored_from_crash=restored_from_crash,
        )
        if self.config.restart_fault is not None:
            files = self.disks.setdefault(node_id, SimFiles())
            core.disk = disk_of(node_id, files)
        sim_node.core = core
        return core

    def _start_nodes(self, view: View) -> None:
        phases = self.rng("timers")
        for node_id in (*self.node_ids, *self.standby_ids):
            sim_node = SimNode(node_id, None)
            sim_node.links = SimNodeLinks(self, sim_node)
            self.nodes[node_id] = sim_node
            self.new_core(sim_node, view)
            self.start_timers(sim_node, phases)

    def start_timers(self, sim_node: SimNode, phases: random.Random) -> None:
        """The node's tick and checkpoint timers, from now, at seeded phases."""
        now_us = self.clock.now_us
        tick_us = self.tick_ms * 1000
        checkpoint_us = self.config.checkpoint_interval_ms * 1000
        self.scheduler.at(now_us + phases.randint(1, tick_us), self._timer, sim_node, "tick")
        self.scheduler.at(
            now_us + phases.randint(1, checkpoint_us), self._timer, sim_node, "checkpoint"
        )

    def send_to_node(
        self,
        link: Link,
        identity: bytes,
        frames: Sequence[bytes],
        src_node: str | None = None,
        peer_link: bool = False,
    ) -> bool:
        """A message to the node at the end of ``link`` from a client (``src_node`` None) or
        from the node ``src_node`` (over a peer link when ``peer_link``); False if it cannot
        be sent (the node is down, or the link is full)."""
        target = self.nodes.get(NodeId(link.dst))
        if target is None:
            self.network.stats.refused_unreachable += 1
            return False
        if target.killed and not peer_link:
            # A mapper's outbox queues only on live connections (ZMQ_IMMEDIATE).
            self.network.stats.refused_unreachable += 1
            return False
        queued = self.network.send(link, identity, frames, src_node, link.dst)
        if queued is None:
            return False
        if target.killed:
            return True  # queued on a connection nobody will read
        for envelope in queued:
            heapq.heappush(target.arrivals, (envelope.deliver_at_us, link.src, envelope.seq, link))
            self.scheduler.at(envelope.deliver_at_us, self.wake, target)
        return True

    def wake(self, node: SimNode) -> None:
        """One receive turn of the node (``NodeCore.receive_turn``, as the real loop runs
        it), reading the messages that have arrived by now; another turn is scheduled soon
        if work or arrived messages are left."""
        core = node.core
        if core is None or not node.running:
            return
        now = self.clock.now_us
        arrivals = node.arrivals

        def receive() -> tuple[bytes, Sequence[bytes]] | None:
            if not arrivals or arrivals[0][0] > now:
                return None
            _, _, seq, link = heapq.heappop(arrivals)
            envelope = link.queue.popleft()
            assert envelope.seq == seq, "per-link order broken"
            self.network.stats.delivered += 1
            if self._trace is not None:
                self._trace_message(node.node_id, envelope)
            return envelope.identity, envelope.frames

        with self.scheduler.acting_as(node.node_id):
            work_left = core.receive_turn(receive)
            ready = bool(arrivals) and arrivals[0][0] <= now
            capped_s = core.ingest.capped_wait_s
            if work_left or (ready and (capped_s is None or not core.ingest.inbox_full)):
                self.scheduler.at(now + BACKGROUND_STEP_US, self.wake, node)
            elif capped_s is not None:
                # Batches held back by the apply rate cap (and, with the inbox full, the
                # messages behind them): the real loop sleeps until the cap lets them
                # through (smr.node.loop), then takes another turn.
                wait_us = max(BACKGROUND_STEP_US, round(capped_s * 1e6))
                self.scheduler.at(now + wait_us, self.wake, node)

    def _trace_message(self, node_id: NodeId, envelope: Envelope) -> None:
        assert self._trace is not None
        try:
            message = decode(envelope.frames)
            what = f"{message.kind.name} {header_of(message)}"
        except FrameError as error:
            what = f"bad frame: {error}"
        sender = envelope.identity.decode(errors="replace")
        self._trace(f"{self.clock.now_ms:10.3f} ms  {sender} -> {node_id}: {what}")

    def _timer(self, node: SimNode, which: str) -> None:
        if node.killed or node.core is None:
            return
        if node.pauses_active or node.stalls_active:
            # asyncio's sleep ends during the pause (or the slow call); the timer fires once
            # on resume.
            if which not in node.missed_timers:
                node.missed_timers.append(which)
            return
        self.fire(node, which)

    def fire(self, node: SimNode, which: str) -> None:
        """The node's timer ``which`` (``tick``, ``checkpoint``) fires now; the next one is
        due a period later, and the node takes a receive turn now."""
        core = node.core
        assert core is not None
        timer = Timer(which)
        with self.scheduler.acting_as(node.node_id):
            core.on_timer(timer)
        if timer is Timer.TICK:
            period_us = self.tick_ms * 1000
        else:
            period_us = self.config.checkpoint_interval_ms * 1000
        self.scheduler.at(self.clock.now_us + period_us, self._timer, node, which)
        self.scheduler.at(self.clock.now_us, self.wake, node)

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

    def live_cores(self) -> dict[NodeId, NodeCore]:
        """The live nodes' cores (killed ones are gone), by node id, in id order."""
        return {node.node_id: core for node, core in self.live()}

    def live(self) -> list[tuple[SimNode, NodeCore]]:
        """The live nodes and their cores, in id order."""
        return [
            (node, node.core)
            for node_id in (*self.node_ids, *self.standby_ids)
            if (node := self.nodes[node_id]).core is not None and not node.killed
        ]

    def settle(self) -> None:
        """Run until every message sent so far has arrived (and been read, unless its
        node is paused or dead)."""
        self.scheduler.run_to(max(self.clock.now_us, self.network.last_delivery_us()))

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
        """Run the protocol of the module doc; the result, or SimulationFailure."""
        if self._ran:
            raise RuntimeError("a Simulation runs once; build another for another run")
        self._ran = True
        handler = _EventLog(self.scheduler)
        node_log = logging.getLogger("smr.node")
        saved = node_log.level, node_log.propagate
        # The nodes' warnings become events of the run, reported with a failure; they are
        # not printed (hundreds of runs would flood the output).
        node_log.setLevel(logging.WARNING)
        node_log.propagate = False
        node_log.addHandler(handler)
        try:
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
            node_log.removeHandler(handler)
            node_log.setLevel(saved[0])
            node_log.propagate = saved[1]
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
        self._start_nodes(view)
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
        checks.check_state(self)
        if self.subscriber is not None:
            self.subscriber.finish()
        if self._check_tolerance:
            checks.check_no_false_death(self)
        checks.check_replicas(self)
        if config.restart_fault is not None:
            self.settle()
            self.restart = Restart(self, config.restart_fault)
            self.restart.run()
        return self._result()

    def _result(self) -> SimResult:
        live = self.live()
        counters: dict[str, dict[str, int]] = {
            node.node_id: seeded_counters(core.counters) for node, core in live
        }
        emitters = {
            name: {
                "tuples_emitted": e.tuples_emitted,
                "tuples_acked": e.tuples_acked,
                "batches_sent": e.batches_sent,
                "resends": e.resends,
                "reroutes": e.reroutes,
                "view_changes": e.view_changes,
            }
            for name, e in self.emitters.items()
        }
        return SimResult(
            seed=self.seed,
            schedule=self.schedule,
            end_ms=self.clock.now_ms,
            view=live[0][1].view.to_wire(),
            counters=counters,
            emitters=emitters,
            network=asdict(self.network.stats),
            events=list(self.events),
            tuples=self.tuples,
            keys=len(self.oracle),
            edges=self._edges_tally(),
        )

    def _edges_tally(self) -> dict[str, int]:
        tally: Counter[str] = Counter()
        if self.readers is not None:
            tally.update(self.readers.tally)
        if self.reuse is not None:
            tally.update(self.reuse.tally)
        if self.restart is not None:
            tally.update(self.restart.tally)
        if self.subscriber is not None:
            tally.update(self.subscriber.tally)
        return dict(sorted(tally.items()))

    def describe_config(self) -> str:
        """The configuration, on one line."""
        config = self.config
        fields = {
            name: value
            for name, value in asdict(config).items()
            if name not in ("schedule", "network")
        }
        return " ".join(f"{name}={value}" for name, value in fields.items())

    def _failure(self, what: str, error: BaseException | None = None) -> SimulationFailure:
        where = []
        if error is not None:
            # The innermost frames say where it broke; the sweep prints only the message.
            frames = traceback.format_exception(error)
            where = ["where:", *("  " + line for line in "".join(frames[-6:]).splitlines())]
        lines = [
            f"seed={self.seed} at {self.clock.now_ms:.3f} ms: {what}",
            self.schedule.describe(),
            f"config: {self.describe_config()}",
            f"network: {self.config.network}",
            f"replay: {self.replay or 'the same Simulation(...) call'}",
            *where,
            "last events:",
            *(f"  {event}" for event in list(self.events)[-60:]),
        ]
        return SimulationFailure("\n".join(lines))


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
