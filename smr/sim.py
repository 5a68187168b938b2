"""The simulated twin of the transport and the clock (STYLE item 5): many nodes in one
process, in virtual time, under a seeded fault schedule; a failing seed replays exactly.

What is real and what is simulated: every node is a real :class:`~smr.node.NodeCore` and
every mapper a real :class:`~smr.emitter.Emitter`; only the clock (:class:`SimClock`), the
network (:class:`SimNetwork`) and the process shell around each node (its timers, and the
loop that calls the node's two entry points, ``NodeCore.receive_turn`` and
``NodeCore.on_timer``, as :mod:`smr.node.loop` does) are simulated. Nothing sleeps; one seed
drives every random choice, so a run is a pure function of its seed (and its
:class:`SimConfig`).

A run (:meth:`Simulation.run`):

1. Start ``nodes`` nodes with replication ``r`` on a ring of ``2**slot_bits`` slots, each a
   ``NodeCore`` whose ``reply`` and ``send_to_peer`` are wired into the network, with a tick
   timer every 50 ms and a checkpoint timer every checkpoint interval (seeded phases).
2. Start the mappers: each emits a seeded stream of words through ``Emitter.emit``, paced in
   virtual time, then calls ``Emitter.close()``, which must return (every tuple acked).
3. The fault schedule plays meanwhile (:mod:`smr.faults`).
4. Heal: every fault still acting ends (partitions, pauses, delays; random drops and
   duplicates stop), what they held back arrives; run until the cluster converges: every
   live node holds the same view, whose owners are all live current incarnations, no node
   has under-replicated slots (where ``r`` copies can exist), batches or snapshot work
   pending, and every owner's secondaries hold complete replicas of it.
5. Check: (a) the live owners' ranges partition the ring, with exactly one live primary
   per slot; (b) the union of every live primary's state for the slots it is primary of
   equals the oracle (plain Python word counts of everything emitted): exactly-once,
   which implies (c) no acked tuple was lost (and each emitter counted its tuples); and
   (d), after one more checkpoint cycle and convergence, what every secondary of an owner
   would promote if it took over now (its replica of the owner's range plus its backed-up
   batches replayed) equals the owner's state and hwm vectors: the next takeover would be
   exact too.

A failed run raises :class:`SimulationFailure` (an ``AssertionError``) whose message starts
with ``seed=<seed>``, and holds the fault schedule, the command that replays it and the
last notable events (faults, takeovers, fencing) with their virtual times.

The network: one FIFO link per (sender, receiver) pair, as ZeroMQ over TCP keeps order per
connection; each message takes a seeded latency (``latency_us_min`` to ``latency_us_max``),
never overtaking an earlier one on its link. A link holds at most ``link_messages_max``
messages not yet read by the receiver; at the bound ``send`` returns False, as a ZeroMQ
send does at its high-water mark (a mapper keeps the batch and retries; a node counts a
dropped peer message). Faults (see :mod:`smr.faults` for their meaning): a killed node's
state is dropped, what is sent to it is never read (a mapper's send to it fails at once, as
with ``ZMQ_IMMEDIATE``; a peer's queues until the bound), and every node with a connection
to it sees the connection drop at its next tick (``NodeCore.suspect``, as the real shell's
socket monitor does). A paused node runs no timers and reads nothing; on resume what queued
is read, and each timer that came due fires once. A partition holds every message across
it until it ends (TCP delivers late, in order); a delay adds to the latency of messages to
and from its node. Optional seeded drop and duplicate probabilities exist for experiments;
the real transport never drops or duplicates within a connection, so they default to 0.

Determinism: virtual time is integer microseconds; events at the same time run in the order
they were scheduled; mapper threads run one at a time, handing control back and forth with
the scheduler, so thread scheduling never decides anything; the simulator iterates no
``set`` or ``dict`` of str in an order that depends on ``PYTHONHASHSEED`` where the order
could change an outcome. The code under test might (a ``set`` of peers or channels): so each
link draws its latencies and losses from its own generator, and a node reads messages that
arrive at the same instant in sender-name order, which makes the order in which it sent to
different peers within one instant irrelevant.
``time.time()`` is still read by the emitter (tuple timestamps) and ``NodeCore`` (takeover
records), and ``os.getpid``/``psutil`` by ``NodeCore.status``: none of them decides anything.

The sweep, from the command line::

    python -m smr.sim --seeds 2000 [--start 0] [--jobs 2] [--nodes 3-6] [--replication 0-2]
                      [--slot-bits 6-10] [--tuples 1000-3000] [--mappers 1-2]
                      [--faults-max 3] [--drop 0.0] [--duplicate 0.0]
    python -m smr.sim --seed 1234 -v       # replay one seed, printing its events

draws a configuration and a fault schedule within tolerance from each seed
(:meth:`SimConfig.from_seed`, :func:`smr.faults.random_schedule`), prints every failing seed
with its failure and the command that replays it, then a summary; exits 1 if any seed
failed. ``--drop``/``--duplicate`` go beyond the real transport (see above): failures they
cause are worth reading, but are not promises the ring makes today.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import logging
import random
import sys
import threading
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from checkpoint.backup import replay_plan
from checkpoint.ids import MapperId
from checkpoint.store import StateStore
from ring.hashing import even_tokens, slot_count, slot_of
from ring.ids import Incarnation, NodeId, Slot, Token
from ring.placement import Ring, Role
from ring.view import Member, Status, View
from smr.api import Job
from smr.emitter import Emitter
from smr.faults import (
    Delay,
    FaultSchedule,
    Kill,
    Partition,
    Pause,
    Tolerance,
    random_schedule,
    within_tolerance,
)
from smr.node import TICK_MS, NodeCore, NodeSettings, Timer
from smr.output import OutputSink
from smr.protocol import FrameError, decode, decode_batch_body, header_of
from smr.transport import ChannelEnd

log = logging.getLogger("smr.sim")

ADDR_PREFIX: Final = "sim://"
# A node's receive loop handles one background step (a snapshot chunk per pending snapshot)
# per cycle; a cycle costs this much virtual time, so a long snapshot takes time to send.
BACKGROUND_STEP_US: Final = 20
# How often convergence is checked during the healing phase.
CONVERGENCE_CHECK_US: Final = 50_000
# Notable events kept for a failure report (the oldest are dropped past it).
EVENTS_KEPT_MAX: Final = 400
# Reducer outputs kept in memory per node for inspection (they are all counted).
OUTPUT_RECORDS_KEPT_MAX: Final = 1000


class SimulationFailure(AssertionError):
    """A simulated run broke an invariant; the message starts with ``seed=<seed>``."""


class _Cancelled(BaseException):
    """Raised in a mapper thread to unwind it when the run ends early."""


# -- the clock --------------------------------------------------------------------------------


class SimClock:
    """Virtual time in integer microseconds; it moves only when the scheduler moves it.

    Guarantees: never goes backwards; ``seconds`` is the callable handed to nodes and
    emitters in place of ``time.monotonic``.
    """

    def __init__(self) -> None:
        self._now_us = 0

    @property
    def now_us(self) -> int:
        """Microseconds since the start of the run."""
        return self._now_us

    @property
    def now_ms(self) -> float:
        """Milliseconds since the start of the run."""
        return self._now_us / 1000

    def seconds(self) -> float:
        """Seconds since the start of the run (the node's and emitter's clock)."""
        return self._now_us / 1_000_000

    def advance_to(self, time_us: int) -> None:
        """Move to ``time_us``; AssertionError if that is in the past."""
        assert time_us >= self._now_us, f"time would go back from {self._now_us} to {time_us}"
        self._now_us = time_us


# -- the network -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NetworkSettings:
    """The simulated network's behaviour; the defaults are a LAN seen through ZeroMQ."""

    latency_us_min: int = 100
    latency_us_max: int = 2000
    # Messages a link holds that the receiver has not read; at the bound a send fails.
    # ZeroMQ's default high-water mark per pipe (smr.transport.SEND_QUEUE_MESSAGES_MAX).
    link_messages_max: int = 1000
    # Probability that a message is silently lost / delivered twice (right after itself).
    # The real transport does neither within a connection; for experiments only.
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0


@dataclass
class _Envelope:
    deliver_at_us: int
    seq: int
    identity: bytes
    frames: Sequence[bytes]


class _Link:
    """One direction between two endpoints: messages sent and not yet read, in order."""

    __slots__ = ("bound", "dst", "last_deliver_us", "queue", "rng", "sent", "src")

    def __init__(self, src: str, dst: str, bound: int, rng: random.Random) -> None:
        self.src = src
        self.dst = dst
        self.bound = bound
        self.rng = rng
        # Messages put on the link so far: the sequence number of the last one.
        self.sent = 0
        self.queue: deque[_Envelope] = deque()
        self.last_deliver_us = 0


@dataclass
class NetworkStats:
    """What the network did, for the trace."""

    sent: int = 0
    delivered: int = 0
    refused_full: int = 0
    refused_unreachable: int = 0
    dropped: int = 0
    duplicated: int = 0
    held_by_partition: int = 0
    delayed: int = 0


class SimNetwork:
    """Links between endpoints (nodes by id, mapper ends by their identity), with latency,
    per-link FIFO order, bounds, and the partitions and delays in force.

    Guarantees: messages on one link are read in the order they were sent (a duplicate right
    after its original); a link never holds more than its bound; every random choice for a
    message comes from its link's own generator, seeded with ``seed`` and the link's name,
    so the order in which a node sends to different peers at one instant changes nothing.
    """

    def __init__(self, clock: SimClock, seed: str, settings: NetworkSettings) -> None:
        self.clock = clock
        self.settings = settings
        self._seed = seed
        self._links: dict[tuple[str, str], _Link] = {}
        self.partitions: list[Partition] = []
        self.delays: list[Delay] = []
        self.stats = NetworkStats()
        # A test's hand-picked losses: called with (src, dst, frames); True loses the message.
        self.lose: Callable[[str, str, Sequence[bytes]], bool] | None = None

    def link(self, src: str, dst: str, bound: int | None = None) -> _Link:
        """The link from ``src`` to ``dst``, created on first use with ``bound``."""
        key = (src, dst)
        found = self._links.get(key)
        if found is None:
            found = self._links[key] = _Link(
                src,
                dst,
                self.settings.link_messages_max if bound is None else bound,
                random.Random(f"{self._seed}:{src}>{dst}"),
            )
        return found

    def last_delivery_us(self) -> int:
        """When the last message sent so far arrives (0 if none was sent)."""
        return max((link.last_deliver_us for link in self._links.values()), default=0)

    def _latency_us(self, link: _Link, src_node: str | None, dst_node: str | None) -> int:
        settings = self.settings
        latency = link.rng.randint(settings.latency_us_min, settings.latency_us_max)
        now_ms = self.clock.now_ms
        for delay in self.delays:
            if delay.at_ms <= now_ms < delay.end_ms and delay.node in (src_node, dst_node):
                latency += delay.extra_ms * 1000
                self.stats.delayed += 1
        return latency

    def cut_until_us(self, src_node: str, dst_node: str) -> int:
        """When the partitions now in force between the two nodes end (0 if none)."""
        now_ms = self.clock.now_ms
        return max(
            (
                partition.end_ms * 1000
                for partition in self.partitions
                if partition.at_ms <= now_ms < partition.end_ms
                and partition.separates(src_node, dst_node)
            ),
            default=0,
        )

    def _held_until_us(self, src_node: str | None, dst_node: str | None) -> int:
        if src_node is None or dst_node is None:
            return 0
        now_ms = self.clock.now_ms
        held = 0
        for partition in self.partitions:
            if partition.at_ms <= now_ms < partition.end_ms and partition.separates(
                src_node, dst_node
            ):
                held = max(held, partition.end_ms * 1000)
        if held:
            self.stats.held_by_partition += 1
        return held

    def send(
        self,
        link: _Link,
        identity: bytes,
        frames: Sequence[bytes],
        src_node: str | None,
        dst_node: str | None,
    ) -> list[_Envelope] | None:
        """Put a message on ``link``: None if the link is at its bound (the send fails,
        nothing is queued); else the envelopes queued: none if the message was dropped
        (the sender cannot tell), two if it was duplicated."""
        self.stats.sent += 1
        if len(link.queue) >= link.bound:
            self.stats.refused_full += 1
            return None
        settings = self.settings
        if settings.drop_probability and link.rng.random() < settings.drop_probability:
            self.stats.dropped += 1
            return []
        if self.lose is not None and self.lose(link.src, link.dst, frames):
            self.stats.dropped += 1
            return []
        copies = 1
        if settings.duplicate_probability and (link.rng.random() < settings.duplicate_probability):
            copies = 2
            self.stats.duplicated += 1
        deliver_at = max(
            self.clock.now_us + self._latency_us(link, src_node, dst_node),
            self._held_until_us(src_node, dst_node) + settings.latency_us_min,
            link.last_deliver_us,
        )
        queued = []
        for _ in range(copies):
            link.sent += 1
            envelope = _Envelope(deliver_at, link.sent, identity, frames)
            link.queue.append(envelope)
            link.last_deliver_us = deliver_at
            queued.append(envelope)
        return queued


# -- nodes ------------------------------------------------------------------------------------


class MemoryOutput(OutputSink):
    """An in-memory stand-in for a node's output file: counts every record and keeps the
    last ``OUTPUT_RECORDS_KEPT_MAX`` (older ones are dropped from memory, still counted)."""

    def __init__(self, node_id: str) -> None:  # no file: the base class would open one
        self.node_id = node_id
        self.records: deque[tuple[Any, Any]] = deque(maxlen=OUTPUT_RECORDS_KEPT_MAX)
        self.records_written = 0

    def extend(self, records: Sequence[tuple[Any, Any]]) -> None:
        """Keep the records."""
        self.records.extend(records)
        self.records_written += len(records)

    def flush(self) -> None:
        """Nothing to write."""

    def close(self) -> None:
        """Nothing to close."""


@dataclass
class _SimNode:
    """A node and its simulated shell: liveness, the messages waiting for it, its timers."""

    node_id: NodeId
    core: NodeCore | None
    killed: bool = False
    pauses_active: int = 0
    # (deliver_at_us, sender, seq on its link, link) for every message waiting on a link to
    # this node: read in time order, and at one instant by sender name, so that the order in
    # which senders happened to send at one instant does not matter.
    arrivals: list[tuple[int, str, int, _Link]] = field(default_factory=list)
    missed_timers: list[str] = field(default_factory=list)
    # Peers whose connection to this node dropped, not yet reported to the core.
    dropped_peers: list[NodeId] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.core is not None and not self.killed and self.pauses_active == 0


class _SimNodeLinks:
    """The :class:`~smr.transport.NodeLinks` of one simulated node: replies go to mapper
    channel ends, peer messages onto the simulated network, drops come from kills."""

    def __init__(self, sim: Simulation, node: _SimNode) -> None:
        self._sim = sim
        self._node = node
        self._identity = f"peer:{node.node_id}".encode()

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        sim = self._sim
        end = sim._ends.get(identity.decode())
        if end is None or end.closed:
            return False  # ROUTER_MANDATORY: the peer is gone
        queued = sim.network.send(end.inbound, identity, frames, self._node.node_id, None)
        if queued is None:
            return False
        for envelope in queued:
            sim._schedule(envelope.deliver_at_us, sim._mail_to_end, end)
        return True

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        if not addr.startswith(ADDR_PREFIX):
            return False
        link = self._sim.network.link(self._node.node_id, addr.removeprefix(ADDR_PREFIX))
        return self._sim._send_to_node(link, self._identity, frames, self._node.node_id, True)

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        # A drop of a peer not asked about stays to be reported when it is (as a socket
        # monitor keeps its events until read).
        asked = {peer for peer, _ in peers}
        node = self._node
        dropped = [peer for peer in node.dropped_peers if peer in asked]
        node.dropped_peers = [peer for peer in node.dropped_peers if peer not in dropped]
        return dropped


def sim_job(emit_every: int = 50) -> Job:
    """Word count: ``state["count"]`` per word; emits the count at every multiple of
    ``emit_every`` (so the output path runs too)."""

    def count(key: Any, value: Any, state: dict[str, Any], emit: Callable[..., None]) -> None:
        total = state.get("count", 0) + value
        state["count"] = total
        if total % emit_every == 0:
            emit(key, total)

    def add(a: int, b: int) -> int:
        return a + b

    return Job("simcount", map=lambda record, emit: None, reduce=count, combine=add)


# -- mappers ------------------------------------------------------------------------------------


class _MapperProcess:
    """A mapper in its own thread, run one at a time with the scheduler (baton passing):
    the scheduler resumes it and waits until it blocks again or ends."""

    def __init__(self, sim: Simulation, name: str, body: Callable[[], None]) -> None:
        self.sim = sim
        self.name = name
        self._body = body
        self._resume = threading.Semaphore(0)
        self.thread = threading.Thread(target=self._main, name=f"sim-{name}", daemon=True)
        self.started = False
        self.done = False
        self.cancelled = False
        self.error: BaseException | None = None
        # While blocked: the ends it waits on, and a token that tells stale wake-ups apart.
        self.waiting_on: tuple[str, ...] | None = None
        self.wait_token = 0

    def _main(self) -> None:
        self._resume.acquire()
        try:
            if not self.cancelled:
                self._body()
        except _Cancelled:
            pass
        except BaseException as error:  # reported by the scheduler, with the seed
            self.error = error
        finally:
            self.done = True
            self.waiting_on = None
            self.sim._to_scheduler.release()

    def start(self) -> None:
        """Start the thread and run it until it first blocks (scheduler side)."""
        self.started = True
        self.thread.start()
        self.resume()

    def resume(self) -> None:
        """Run the mapper until it blocks or ends (scheduler side)."""
        self.waiting_on = None
        self._resume.release()
        self.sim._to_scheduler.acquire()

    def block(self, ends: tuple[str, ...], until_us: int) -> None:
        """Give control back until mail arrives on one of ``ends`` or ``until_us`` (mapper
        side)."""
        self.wait_token += 1
        self.waiting_on = ends
        self.sim._schedule(until_us, self.sim._mapper_deadline, self, self.wait_token)
        self.sim._to_scheduler.release()
        self._resume.acquire()
        if self.cancelled:
            raise _Cancelled

    def cancel(self) -> None:
        """Unwind a blocked or unstarted mapper and wait for its thread (scheduler side)."""
        if self.done:
            return
        self.cancelled = True
        if not self.started:
            self.started = True
            self.thread.start()
        self._resume.release()
        self.sim._to_scheduler.acquire()
        self.thread.join(timeout=5)


class SimChannelEnd:
    """One mapper's connection to one node (the simulated ``Outbox``)."""

    def __init__(self, transport: SimMapperTransport, addr: str, identity: str, bound: int):
        self.addr = addr
        self.identity = identity
        self._transport = transport
        self._sim = transport.sim
        self._node = addr.removeprefix(ADDR_PREFIX) if addr.startswith(ADDR_PREFIX) else None
        self.closed = False
        self._out = self._sim.network.link(identity, self._node or addr, bound)
        self.inbound = self._sim.network.link(self._node or addr, identity)

    def send(self, frames: Sequence[bytes]) -> bool:
        """Queue a message to the node; False if it is unreachable or the link is full."""
        if self.closed:
            return False
        return self._sim._send_to_node(self._out, self.identity.encode(), frames, None)

    def receive(self) -> list[bytes] | None:
        """One reply that has arrived, or None."""
        queue = self.inbound.queue
        if queue and queue[0].deliver_at_us <= self._sim.clock.now_us:
            self._sim.network.stats.delivered += 1
            return list(queue.popleft().frames)
        return None

    def has_mail(self) -> bool:
        """Whether a reply has arrived."""
        queue = self.inbound.queue
        return bool(queue) and queue[0].deliver_at_us <= self._sim.clock.now_us

    def close(self) -> None:
        """Close: later replies to it are refused."""
        self.closed = True


class SimMapperTransport:
    """The :class:`~smr.emitter.MapperTransport` of one simulated mapper."""

    def __init__(self, sim: Simulation, mapper: str) -> None:
        self.sim = sim
        self.mapper = mapper
        self.process: _MapperProcess | None = None
        self._opened = 0

    def open(self, addr: str, send_queue_messages_max: int) -> ChannelEnd:
        """A new connection to the node at ``addr`` (``sim://ID``)."""
        self._opened += 1
        identity = f"{self.mapper}#{self._opened}>{addr.removeprefix(ADDR_PREFIX)}"
        end = SimChannelEnd(self, addr, identity, send_queue_messages_max)
        self.sim._ends[identity] = end
        return end

    def wait_any(self, ends: Sequence[ChannelEnd], timeout_ms: int) -> list[ChannelEnd]:
        """The ends with a reply; if none, let the world run until one has one or
        ``timeout_ms`` of virtual time passed."""
        sim_ends = [end for end in ends if isinstance(end, SimChannelEnd)]
        ready: list[ChannelEnd] = [end for end in sim_ends if end.has_mail()]
        if ready or timeout_ms <= 0:
            return ready
        assert self.process is not None, "wait_any outside a simulated mapper process"
        self.process.block(
            tuple(end.identity for end in sim_ends), self.sim.clock.now_us + timeout_ms * 1000
        )
        return [end for end in sim_ends if end.has_mail()]

    def sleep(self, duration_ms: float) -> None:
        """Let ``duration_ms`` of virtual time pass (the mapper's own work, or its pacing)."""
        assert self.process is not None
        self.process.block((), self.sim.clock.now_us + int(duration_ms * 1000))


# -- the simulation ---------------------------------------------------------------------------


_NODE_DEFAULTS = NodeSettings()


@dataclass(frozen=True)
class SimConfig:
    """Everything a run depends on besides its seed. :meth:`from_seed` draws one."""

    # The ring: node ids n0, n1, ... in ring order; replication r; 2**slot_bits slots.
    nodes: int = 5
    replication: int = 1
    slot_bits: int = 8
    # The feed: mapper ids m0, m1, ...; each emits this many words (key w<i>, value 1)
    # drawn with a Zipf-like skew from a vocabulary of this many.
    mappers: int = 1
    tuples_per_mapper: int = 2000
    vocabulary: int = 200
    # Emitter settings (see smr.emitter); combine: the job's combine is used.
    batch_size: int = 50
    window_batches: int = 8
    combine: bool = False
    resend_after_ms: int = 1000
    give_up_after_s: float = 20.0
    # The feed emits `feed_chunk` tuples, then lets `feed_pace_ms` of virtual time pass.
    feed_chunk: int = 50
    feed_pace_ms: int = 20
    # Node settings (smr.node.NodeSettings' defaults; the failure detector keeps its own).
    checkpoint_interval_ms: int = _NODE_DEFAULTS.checkpoint_interval_ms
    snapshot_chunk_keys: int = _NODE_DEFAULTS.snapshot_chunk_keys
    backup_bytes_max: int = _NODE_DEFAULTS.backup_bytes_max
    # The real default (5 s) is for processes that start one after the other; simulated
    # nodes all start at virtual time 0 and hear each other within milliseconds.
    first_contact_grace_ms: int = 0
    # Tokens evenly spaced (ring.hashing.even_tokens), or distinct seeded random ones.
    even_tokens: bool = True
    # On resume from a pause, fire the missed timers before reading what queued.
    timers_first_on_resume: bool = False
    network: NetworkSettings = NetworkSettings()
    # None: a random schedule within tolerance of at most `faults_max` faults, drawn from
    # the seed over the feed's expected duration.
    schedule: FaultSchedule | None = None
    faults_max: int = 3
    # Virtual time allowed for the feed to end (every close() returned), and for the
    # cluster to converge after healing; past them the run fails.
    feed_limit_ms: int = 120_000
    heal_limit_ms: int = 30_000

    @property
    def feed_ms(self) -> int:
        """About how long the feed lasts in virtual time, without faults."""
        chunks = -(-self.tuples_per_mapper // self.feed_chunk)
        return max(100, chunks * self.feed_pace_ms)

    @classmethod
    def from_seed(cls, seed: int, options: SweepOptions | None = None) -> SimConfig:
        """A configuration drawn from ``seed`` within ``options`` (default ``SweepOptions()``)."""
        options = options or SweepOptions()
        rng = random.Random(f"smr.sim:{seed}:config")
        node_count = rng.randint(*options.nodes)
        r_low, r_high = options.replication
        r_choices = list(range(max(0, r_low), min(r_high, node_count - 1) + 1)) or [0]
        # r = 0 tolerates no lost node, so its schedules are mild: draw it less often.
        weights = [1 if r == 0 else 4 for r in r_choices]
        total = rng.randint(*options.tuples)
        mappers = rng.randint(*options.mappers)
        return cls(
            nodes=node_count,
            replication=rng.choices(r_choices, weights=weights)[0],
            slot_bits=rng.randint(*options.slot_bits),
            mappers=mappers,
            tuples_per_mapper=total // mappers,
            vocabulary=rng.choice((20, 100, 300)),
            batch_size=rng.choice((10, 25, 50, 100, 200)),
            window_batches=rng.choice((1, 2, 4, 8, 16)),
            combine=rng.random() < 0.3,
            feed_chunk=rng.choice((20, 50, 100)),
            feed_pace_ms=rng.choice((10, 20, 40)),
            checkpoint_interval_ms=rng.choice((50, 100, 250, 500, 1000)),
            snapshot_chunk_keys=rng.choice((5, 20, 5000)),
            backup_bytes_max=rng.choice((512 * 1024 * 1024, 512 * 1024 * 1024, 40_000)),
            first_contact_grace_ms=rng.choice((0, 0, 300)),
            resend_after_ms=rng.choice((250, 1000)),
            even_tokens=rng.random() < 0.5,
            timers_first_on_resume=rng.random() < 0.5,
            network=NetworkSettings(
                drop_probability=options.drop_probability,
                duplicate_probability=options.duplicate_probability,
            ),
            faults_max=options.faults_max,
        )


@dataclass(frozen=True)
class SweepOptions:
    """What a sweep draws its configurations from: inclusive ranges, and fixed settings."""

    nodes: tuple[int, int] = (3, 6)
    replication: tuple[int, int] = (0, 2)
    slot_bits: tuple[int, int] = (6, 10)
    tuples: tuple[int, int] = (1000, 3000)
    mappers: tuple[int, int] = (1, 2)
    faults_max: int = 3
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0

    def flags(self) -> str:
        """The command-line flags that select these options (for the replay command)."""
        ranges = {
            "nodes": self.nodes,
            "replication": self.replication,
            "slot-bits": self.slot_bits,
            "tuples": self.tuples,
            "mappers": self.mappers,
        }
        text = " ".join(f"--{name} {low}-{high}" for name, (low, high) in ranges.items())
        text += f" --faults-max {self.faults_max}"
        if self.drop_probability:
            text += f" --drop {self.drop_probability}"
        if self.duplicate_probability:
            text += f" --duplicate {self.duplicate_probability}"
        return text


@dataclass
class SimResult:
    """What a run ended with; ``fingerprint()`` is equal for two runs of one seed."""

    seed: int
    schedule: FaultSchedule
    end_ms: float
    view: list[list[str | int]]
    counters: dict[str, dict[str, int]]
    emitters: dict[str, dict[str, int]]
    network: dict[str, int]
    events: list[str]
    tuples: int
    keys: int

    def fingerprint(self) -> str:
        """A digest of everything deterministic about the run."""
        data = {key: value for key, value in asdict(self).items() if key != "schedule"}
        data["schedule"] = self.schedule.to_wire()
        text = json.dumps(data, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()


class _EventLog(logging.Handler):
    """Collects the nodes' warnings and errors with the virtual time and the node."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(logging.WARNING)
        self._sim = sim

    def emit(self, record: logging.LogRecord) -> None:
        self._sim._note(f"{self._sim._current or '-'} {record.levelname}: {record.getMessage()}")


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
        self.settings = NodeSettings(
            replication=config.replication,
            checkpoint_interval_ms=config.checkpoint_interval_ms,
            backup_bytes_max=config.backup_bytes_max,
            snapshot_chunk_keys=config.snapshot_chunk_keys,
            first_contact_grace_ms=config.first_contact_grace_ms,
        )
        self.tolerance = Tolerance(
            failure_timeout_ms=self.settings.failure_timeout_ms,
            probe_timeout_ms=self.settings.probe_timeout_ms,
            heartbeat_interval_ms=self.settings.heartbeat_interval_ms,
            tick_ms=self._tick_ms,
        )
        if config.schedule is None:
            self.schedule = random_schedule(
                self._rng("schedule"),
                self.node_ids,
                config.replication,
                config.feed_ms,
                self.tolerance,
                config.faults_max,
            )
        else:
            self.schedule = config.schedule
        self._check_tolerance = check_tolerance
        self.clock = SimClock()
        self.network = SimNetwork(self.clock, f"smr.sim:{seed}:network", config.network)
        self.network.lose = lose
        self.events: deque[str] = deque(maxlen=EVENTS_KEPT_MAX)
        self._events: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self._event_seq = 0
        self._current: str | None = None
        self._to_scheduler = threading.Semaphore(0)
        self._ends: dict[str, SimChannelEnd] = {}
        self.nodes: dict[NodeId, _SimNode] = {}
        self.mappers: list[_MapperProcess] = []
        self.emitters: dict[str, Emitter] = {}
        self.oracle: Counter[str] = Counter()
        self.tuples = 0
        self._ran = False

    @property
    def _tick_ms(self) -> int:
        return min(TICK_MS, self.settings.heartbeat_interval_ms // 2)

    def _rng(self, stream: str) -> random.Random:
        # One independent stream per concern: a change in one (another fault) leaves the
        # others (the words, the latencies) as they were. Seeding with a str hashes it with
        # SHA-512, which does not depend on PYTHONHASHSEED.
        return random.Random(f"smr.sim:{self.seed}:{stream}")

    # -- scheduling ---------------------------------------------------------------------------

    def _schedule(self, time_us: int, action: Callable[..., None], *args: Any) -> None:
        self._event_seq += 1
        heapq.heappush(self._events, (time_us, self._event_seq, action, args))

    def _run_until(self, done: Callable[[], bool], limit_us: int) -> bool:
        """Run events in time order until ``done()`` or virtual time would pass
        ``limit_us``; True if ``done()``."""
        events = self._events
        while not done():
            if not events or events[0][0] > limit_us:
                return False
            time_us, _, action, args = heapq.heappop(events)
            self.clock.advance_to(time_us)
            action(*args)
            self._raise_mapper_errors()
        return True

    def _note(self, text: str) -> None:
        self.events.append(f"{self.clock.now_ms:9.3f} ms  {text}")

    # -- nodes --------------------------------------------------------------------------------

    def _initial_view(self) -> View:
        config = self.config
        if config.even_tokens:
            tokens = even_tokens(config.nodes, config.slot_bits)
        else:
            rng = self._rng("tokens")
            tokens = sorted(
                Token(t) for t in rng.sample(range(slot_count(config.slot_bits)), config.nodes)
            )
        return View(
            Member(node, Incarnation(1), f"{ADDR_PREFIX}{node}", token, "", Status.UP, 1)
            for node, token in zip(self.node_ids, tokens, strict=True)
        )

    def _start_nodes(self, view: View) -> None:
        phases = self._rng("timers")
        for node_id in self.node_ids:
            sim_node = _SimNode(node_id, None)
            self.nodes[node_id] = sim_node
            sim_node.core = NodeCore(
                node_id,
                sim_job(),
                view,
                self.config.slot_bits,
                _SimNodeLinks(self, sim_node),
                MemoryOutput(node_id),
                clock=self.clock.seconds,
                settings=self.settings,
            )
            tick_us = self._tick_ms * 1000
            checkpoint_us = self.config.checkpoint_interval_ms * 1000
            self._schedule(phases.randint(1, tick_us), self._timer, sim_node, "tick")
            self._schedule(phases.randint(1, checkpoint_us), self._timer, sim_node, "checkpoint")

    def _send_to_node(
        self,
        link: _Link,
        identity: bytes,
        frames: Sequence[bytes],
        src_node: str | None,
        peer_link: bool = False,
    ) -> bool:
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
            self._schedule(envelope.deliver_at_us, self._wake, target)
        return True

    def _wake(self, node: _SimNode) -> None:
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

        self._current = node.node_id
        try:
            work_left = core.receive_turn(receive)
            if work_left or (arrivals and arrivals[0][0] <= now):
                self._schedule(now + BACKGROUND_STEP_US, self._wake, node)
        finally:
            self._current = None

    def _trace_message(self, node_id: NodeId, envelope: _Envelope) -> None:
        assert self._trace is not None
        try:
            message = decode(envelope.frames)
            what = f"{message.kind.name} {header_of(message)}"
        except FrameError as error:
            what = f"bad frame: {error}"
        sender = envelope.identity.decode(errors="replace")
        self._trace(f"{self.clock.now_ms:10.3f} ms  {sender} -> {node_id}: {what}")

    def _timer(self, node: _SimNode, which: str) -> None:
        if node.killed or node.core is None:
            return
        if node.pauses_active:
            # asyncio's sleep ends during the pause; the timer fires once on resume.
            if which not in node.missed_timers:
                node.missed_timers.append(which)
            return
        self._fire(node, which)

    def _fire(self, node: _SimNode, which: str) -> None:
        core = node.core
        assert core is not None
        timer = Timer(which)
        self._current = node.node_id
        try:
            core.on_timer(timer)
        finally:
            self._current = None
        if timer is Timer.TICK:
            period_us = self._tick_ms * 1000
        else:
            period_us = self.config.checkpoint_interval_ms * 1000
        self._schedule(self.clock.now_us + period_us, self._timer, node, which)
        self._schedule(self.clock.now_us, self._wake, node)

    # -- faults ---------------------------------------------------------------------------------

    def _schedule_faults(self) -> None:
        for fault in self.schedule:
            self._schedule(fault.at_ms * 1000, self._start_fault, fault)

    def _start_fault(self, fault: Kill | Pause | Partition | Delay) -> None:
        self._note(f"fault: {fault.describe().strip()}")
        if isinstance(fault, Kill):
            node = self.nodes[fault.node]
            if node.killed:
                return
            node.killed = True
            node.core = None
            node.arrivals.clear()
            # Its sockets close: every live node sees the connection drop (a peer that never
            # connected would not, but every node gossips to every other on a view change,
            # so all are connected soon after the start). The close travels like data: it
            # arrives after what the dead node sent on that connection, and a partition
            # holds it too, so a peer never hears from a node after seeing it drop.
            for other in self.node_ids:
                peer = self.nodes[other]
                if other != fault.node and not peer.killed:
                    seen_at_us = max(
                        self.clock.now_us,
                        self.network.link(fault.node, other).last_deliver_us,
                        self.network.cut_until_us(fault.node, other),
                    )
                    self._schedule(seen_at_us, self._drop_seen, peer, fault.node)
        elif isinstance(fault, Pause):
            self.nodes[fault.node].pauses_active += 1
            self._schedule(fault.end_ms * 1000, self._resume, self.nodes[fault.node])
        elif isinstance(fault, Partition):
            self.network.partitions.append(fault)
            self._schedule(fault.end_ms * 1000, self._end_fault, fault)
        else:
            self.network.delays.append(fault)
            self._schedule(fault.end_ms * 1000, self._end_fault, fault)

    def _drop_seen(self, peer: _SimNode, dead: NodeId) -> None:
        if not peer.killed:
            peer.dropped_peers.append(dead)

    def _end_fault(self, fault: Partition | Delay) -> None:
        if isinstance(fault, Partition) and fault in self.network.partitions:
            self.network.partitions.remove(fault)
            self._note(f"healed: {fault.describe().strip()}")
        elif isinstance(fault, Delay) and fault in self.network.delays:
            self.network.delays.remove(fault)

    def _resume(self, node: _SimNode) -> None:
        if node.pauses_active == 0:
            return
        node.pauses_active -= 1
        if node.pauses_active or node.killed:
            return
        self._note(f"resumed {node.node_id}")
        missed, node.missed_timers = node.missed_timers, []
        if self.config.timers_first_on_resume:
            for which in missed:
                self._fire(node, which)
            self._wake(node)
        else:
            self._wake(node)
            for which in missed:
                self._fire(node, which)

    def _heal(self) -> None:
        """End every fault still acting: partitions and delays stop, paused nodes resume,
        and the network stops dropping and duplicating messages."""
        self.network.partitions.clear()
        self.network.delays.clear()
        self.network.settings = replace(
            self.network.settings, drop_probability=0.0, duplicate_probability=0.0
        )
        for node in self.nodes.values():
            while node.pauses_active:
                self._resume(node)

    # -- mappers --------------------------------------------------------------------------------

    def _words(self, mapper: int) -> list[str]:
        rng = self._rng(f"words:{mapper}")
        vocabulary = [f"w{i}" for i in range(self.config.vocabulary)]
        # A Zipf-like skew: a few words are frequent, as in text.
        weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
        return rng.choices(vocabulary, weights=weights, k=self.config.tuples_per_mapper)

    def _start_mappers(self, view: View) -> None:
        config = self.config
        job = sim_job()
        for index in range(config.mappers):
            name = f"m{index}"
            words = self._words(index)
            self.oracle.update(words)
            self.tuples += len(words)
            transport = SimMapperTransport(self, name)
            emitter = Emitter(
                view,
                config.slot_bits,
                MapperId(name),
                replication=config.replication,
                combine=job.combine if config.combine else None,
                batch_size=config.batch_size,
                window_batches=config.window_batches,
                resend_after_ms=config.resend_after_ms,
                give_up_after_s=config.give_up_after_s,
                clock=self.clock.seconds,
                transport=transport,
            )
            self.emitters[name] = emitter
            process = _MapperProcess(self, name, self._feed(emitter, transport, words))
            transport.process = process
            self.mappers.append(process)
            self._schedule(index * 1000, self._start_mapper, process)

    def _feed(
        self, emitter: Emitter, transport: SimMapperTransport, words: list[str]
    ) -> Callable[[], None]:
        chunk = self.config.feed_chunk
        pace_ms = self.config.feed_pace_ms

        def feed() -> None:
            emit = emitter.emit
            for start in range(0, len(words), chunk):
                for word in words[start : start + chunk]:
                    emit(word, 1)
                transport.sleep(pace_ms)
                emitter.pump(0)
            emitter.close()

        return feed

    def _start_mapper(self, process: _MapperProcess) -> None:
        process.start()

    def _mail_to_end(self, end: SimChannelEnd) -> None:
        process = end._transport.process
        if (
            process is not None
            and process.waiting_on is not None
            and end.identity in process.waiting_on
            and end.has_mail()
        ):
            process.resume()

    def _mapper_deadline(self, process: _MapperProcess, token: int) -> None:
        if process.waiting_on is not None and process.wait_token == token:
            process.resume()

    def _raise_mapper_errors(self) -> None:
        for process in self.mappers:
            if process.error is not None:
                error, process.error = process.error, None
                raise _MapperFailed(process.name, error)

    def _cancel_mappers(self) -> None:
        for process in self.mappers:
            process.cancel()

    # -- convergence and checks -------------------------------------------------------------------

    def live_cores(self) -> dict[NodeId, NodeCore]:
        """The live nodes' cores (killed ones are gone), by node id, in id order."""
        return {node.node_id: core for node, core in self._live()}

    def _live(self) -> list[tuple[_SimNode, NodeCore]]:
        return [
            (node, node.core)
            for node_id in self.node_ids
            if (node := self.nodes[node_id]).core is not None and not node.killed
        ]

    def _settle(self) -> None:
        """Run until every message sent so far has arrived (and been read, unless its
        node is paused or dead)."""
        settle_us = max(self.clock.now_us, self.network.last_delivery_us())
        self._run_until(lambda: False, settle_us)
        self.clock.advance_to(settle_us)

    def _converge(self, deadline_us: int) -> None:
        """Run until ``_not_converged()`` says None; AssertionError with its reason if that
        does not happen by ``deadline_us``."""
        started_us = self.clock.now_us
        while (reason := self._not_converged()) is not None:
            next_check_us = self.clock.now_us + CONVERGENCE_CHECK_US
            if next_check_us > deadline_us:
                waited_ms = (self.clock.now_us - started_us) // 1000
                raise AssertionError(f"no convergence within {waited_ms} ms: {reason}")
            self._run_until(lambda: False, next_check_us)
            self.clock.advance_to(next_check_us)

    def _not_converged(self) -> str | None:
        """None when converged; otherwise the first reason it is not, in words."""
        live = self._live()
        if not live:
            return "no live node"
        first = live[0][1].view
        for node, core in live:
            if core.view != first:
                return f"{node.node_id} holds another view: {core.view!r} vs {first!r}"
        incarnations = {node.node_id: core.incarnation for node, core in live}
        for member in first.owners():
            if incarnations.get(member.node_id) != member.incarnation:
                return f"{member.node_id} owns slots in the view but is dead or fenced"
        for node, core in live:
            if core.ingest.inbox:
                return f"{node.node_id} has {len(core.ingest.inbox)} batches to apply"
            if core.snapshots.has_work:
                return f"{node.node_id} has snapshot work pending"
            # With r or fewer owners left, r copies elsewhere cannot exist: then it is enough
            # that every other owner holds a complete replica (checked below).
            if len(core.ring.owners) > self.config.replication and (core.under_replicated_slots()):
                return f"{node.node_id} has {core.under_replicated_slots()} under-replicated slots"
            for predecessor in core.predecessors:
                replica = core.replication.replicas.get(predecessor)
                if replica is None or not replica.is_complete:
                    return f"{node.node_id} has no complete replica of {predecessor} yet"
        return None

    def _check_replicas(self) -> None:
        """(d) for every owner, what each of its secondaries would promote if it took over
        now (its replica of the owner's range, then its backed-up batches replayed, as
        ``NodeCore.take_over`` does) equals the owner's state and hwm vectors: the next
        takeover would be exact too. Checked after one more checkpoint cycle (which evicts
        backups) and convergence again."""
        cores = self.live_cores()
        for node_id, core in cores.items():
            self._current = node_id
            core.on_timer(Timer.CHECKPOINT)
            self._current = None
            self._schedule(self.clock.now_us, self._wake, self.nodes[node_id])
        # A gap this checkpoint reveals starts a snapshot: converge again.
        self._settle()
        self._converge(self.clock.now_us + self.config.heal_limit_ms * 1000)
        self._settle()
        for owner, core in cores.items():
            owned = core.ring.range_of(owner)
            if owned is None:
                continue
            slots = [Slot(s) for s in sorted(core.store.slots()) if owned.contains(s)]
            expected = _state_of(core.store, slots)
            for secondary in core.secondaries:
                promoted = self._promoted_copy(cores[secondary], owner, slots)
                actual = _state_of(promoted, slots)
                if actual != expected:
                    wrong = sorted(
                        k
                        for k in expected.keys() | actual.keys()
                        if expected.get(k) != actual.get(k)
                    )
                    raise AssertionError(
                        f"{secondary} would not take over {owner} exactly: its replica plus "
                        f"backup differ from {owner}'s state in {len(wrong)} entries, e.g. "
                        + ", ".join(f"{k}: {actual.get(k)} != {expected.get(k)}" for k in wrong[:4])
                    )

    def _promoted_copy(self, holder: NodeCore, owner: NodeId, slots: list[Slot]) -> StateStore:
        """What ``holder`` would promote for ``owner``'s ``slots`` if it took over now."""
        store = StateStore()
        replica = holder.replication.replicas.get(owner)
        if replica is not None:
            store.apply_delta(replica.store.snapshot(slots))
        backup = holder.replication.backups.get(owner)
        if backup is not None:
            reduce = sim_job().reduce

            def reduce_fn(key: Any, value: Any, state: dict[str, Any]) -> None:
                reduce(key, value, state, lambda key, value: None)

            slot_count = holder.ring.slot_count
            for held in replay_plan(backup, set(slots)):
                batch = decode_batch_body(held.body, held.tuple_count, slot_count)
                store.apply_batch(
                    held.mapper, batch.slots, batch.seqs, batch.keys, batch.values, reduce_fn
                )
        return store

    def _check(self) -> None:
        """(a) one live primary per slot, the live owners' ranges partitioning the ring;
        (b) the primaries' state equals the oracle."""
        live = self._live()
        view = live[0][1].view
        ring = Ring(view, self.config.slot_bits)
        cores = {node.node_id: core for node, core in live}
        # (a)
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
        if actual != dict(self.oracle):
            raise AssertionError("state differs from the oracle: " + self._diff(actual, ring))
        # (c) is implied by (b); the emitters' own count must agree too.
        for name, emitter in self.emitters.items():
            if emitter.tuples_emitted != self.config.tuples_per_mapper:
                raise AssertionError(
                    f"mapper {name} counted {emitter.tuples_emitted} tuples emitted, "
                    f"not {self.config.tuples_per_mapper}"
                )

    def _diff(self, actual: dict[str, int], ring: Ring) -> str:
        lines = []
        slot_bits = self.config.slot_bits
        keys = sorted(set(actual) | set(self.oracle))
        wrong = [k for k in keys if actual.get(k, 0) != self.oracle.get(k, 0)]
        missing = sum(max(0, self.oracle.get(k, 0) - actual.get(k, 0)) for k in wrong)
        extra = sum(max(0, actual.get(k, 0) - self.oracle.get(k, 0)) for k in wrong)
        lines.append(
            f"{len(wrong)} of {len(keys)} keys wrong, {missing} tuples missing, {extra} extra"
        )
        for key in wrong[:12]:
            slot = slot_of(key, slot_bits)
            lines.append(
                f"  {key}: {actual.get(key, 0)} != oracle {self.oracle.get(key, 0)} "
                f"(slot {slot}, primary {ring.primary(slot)})"
            )
        return "\n".join(lines)

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run the protocol of the module doc; the result, or SimulationFailure."""
        if self._ran:
            raise RuntimeError("a Simulation runs once; build another for another run")
        self._ran = True
        handler = _EventLog(self)
        node_log = logging.getLogger("smr.node")
        saved = node_log.level, node_log.propagate
        # The nodes' warnings become events of the run, reported with a failure; they are
        # not printed (hundreds of runs would flood the output).
        node_log.setLevel(logging.WARNING)
        node_log.propagate = False
        node_log.addHandler(handler)
        try:
            return self._run()
        except _MapperFailed as failure:
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
        view = self._initial_view()
        self._start_nodes(view)
        # 2.
        self._start_mappers(view)
        # 3.
        self._schedule_faults()
        fed = self._run_until(
            lambda: all(process.done for process in self.mappers), config.feed_limit_ms * 1000
        )
        if not fed:
            raise AssertionError(
                f"the feed did not finish within {config.feed_limit_ms} ms of virtual time"
            )
        self._note("feed done: every mapper's close() returned")
        # 4.
        heal_at_us = max(self.clock.now_us, self.schedule.end_ms * 1000)
        self._run_until(lambda: False, heal_at_us)
        self.clock.advance_to(heal_at_us)
        self._heal()
        # What a partition held back or a delay slowed down arrives before convergence counts.
        self._settle()
        heal_at_us = self.clock.now_us
        self._note("healed: every fault ended")
        self._converge(heal_at_us + config.heal_limit_ms * 1000)
        self._note("converged")
        # 5.
        self._check()
        self._check_replicas()
        return self._result()

    def _result(self) -> SimResult:
        live = self._live()
        counters: dict[str, dict[str, int]] = {
            node.node_id: {k: v for k, v in vars(core.counters).items() if isinstance(v, int)}
            for node, core in live
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
        )

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


def _state_of(store: StateStore, slots: list[Slot]) -> dict[str, Any]:
    """``store``'s states (``key -> state``) and hwm vectors (``#slot -> vector``) of
    ``slots``, comparable with ``==``."""
    state: dict[str, Any] = {str(key): value for _, key, value in store.items(slots)}
    for slot in slots:
        vector = store.hwm_vector(slot)
        if vector:
            state[f"#{slot}"] = dict(vector)
    return state


class _MapperFailed(Exception):
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


# -- the sweep --------------------------------------------------------------------------------


def _parse_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def _sweep_one(args: tuple[int, SweepOptions]) -> tuple[int, str | None, float]:
    seed, options = args
    started = time.perf_counter()
    try:
        run_seed(seed, options)
    except SimulationFailure as failure:
        return seed, str(failure), time.perf_counter() - started
    return seed, None, time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    """The sweep: run many seeds, print the failing ones and a summary; 1 if any failed."""
    parser = argparse.ArgumentParser(
        prog="python -m smr.sim", description="Deterministic simulation sweep of smr."
    )
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, help="run only this seed (replay)")
    parser.add_argument("--nodes", default="3-6", help="node count range, e.g. 3-6")
    parser.add_argument("--replication", default="0-2", help="replication range, e.g. 1-2")
    parser.add_argument("--slot-bits", default="6-10", help="slot bits range, e.g. 6-10")
    parser.add_argument("--tuples", default="1000-3000", help="tuples per run range")
    parser.add_argument("--mappers", default="1-2", help="mapper count range, e.g. 1-3")
    parser.add_argument("--faults-max", type=int, default=3, help="faults per schedule, at most")
    parser.add_argument("--drop", type=float, default=0.0, help="message drop probability")
    parser.add_argument("--duplicate", type=float, default=0.0, help="duplicate probability")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each run's events")
    args = parser.parse_args(argv)
    options = SweepOptions(
        nodes=_parse_range(args.nodes),
        replication=_parse_range(args.replication),
        slot_bits=_parse_range(args.slot_bits),
        tuples=_parse_range(args.tuples),
        mappers=_parse_range(args.mappers),
        faults_max=args.faults_max,
        drop_probability=args.drop,
        duplicate_probability=args.duplicate,
    )
    logging.basicConfig(level=logging.CRITICAL)
    seeds = [args.seed] if args.seed is not None else range(args.start, args.start + args.seeds)
    if args.seed is not None:
        simulation = seed_simulation(args.seed, options)
        print(f"seed={args.seed} {simulation.describe_config()}")
        print(simulation.schedule.describe())
        try:
            result = simulation.run()
        except SimulationFailure as failure:
            print(f"FAIL {failure}")
            return 1
        if args.verbose:
            print("\n".join(result.events))
        print(
            f"ok seed={args.seed}: {result.tuples} tuples, {result.keys} keys, "
            f"{result.end_ms:.0f} ms virtual, fingerprint {result.fingerprint()[:16]}"
        )
        return 0
    started = time.perf_counter()
    failed: list[int] = []
    work = [(seed, options) for seed in seeds]
    outcomes: Iterator[tuple[int, str | None, float]]
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(args.jobs)
        outcomes = pool.map(_sweep_one, work, chunksize=4)
    else:
        pool = None
        outcomes = map(_sweep_one, work)
    slowest = (0.0, -1)
    for seed, report, seconds in outcomes:
        slowest = max(slowest, (seconds, seed))
        if report is not None:
            failed.append(seed)
            print(f"FAIL {report}\n", flush=True)
    if pool is not None:
        pool.shutdown()
    elapsed = time.perf_counter() - started
    print(
        f"{len(work) - len(failed)} of {len(work)} seeds passed in {elapsed:.1f} s "
        f"(slowest: seed {slowest[1]}, {slowest[0]:.2f} s)"
    )
    if failed:
        print("failing seeds: " + " ".join(map(str, failed)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
