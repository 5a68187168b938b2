"""The simulated network and clock: FIFO links with seeded latencies, bounds, partitions and
delays, in integer microseconds of virtual time (docs/design/simulation.md#network)."""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from smr.faults.model import Delay, Partition

log = logging.getLogger("smr.sim")


ADDR_PREFIX: Final = "sim://"


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
    # ZeroMQ's default high-water mark per pipe (smr.transport.zeromq.SEND_QUEUE_MESSAGES_MAX).
    link_messages_max: int = 1000
    # Probability that a message is silently lost / delivered twice (right after itself).
    # The real transport does neither within a connection; for experiments only.
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0


@dataclass
class Envelope:
    deliver_at_us: int
    seq: int
    identity: bytes
    frames: Sequence[bytes]


class Link:
    """One direction between two endpoints: messages sent and not yet read, in order."""

    __slots__ = ("bound", "dst", "last_deliver_us", "queue", "rng", "sent", "src")

    def __init__(self, src: str, dst: str, bound: int, rng: random.Random) -> None:
        self.src = src
        self.dst = dst
        self.bound = bound
        self.rng = rng
        # Messages put on the link so far: the sequence number of the last one.
        self.sent = 0
        self.queue: deque[Envelope] = deque()
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
        self._links: dict[tuple[str, str], Link] = {}
        self.partitions: list[Partition] = []
        self.delays: list[Delay] = []
        self.stats = NetworkStats()
        # A test's hand-picked losses: called with (src, dst, frames); True loses the message.
        self.lose: Callable[[str, str, Sequence[bytes]], bool] | None = None

    def link(self, src: str, dst: str, bound: int | None = None) -> Link:
        """The link from ``src`` to ``dst``, created on first use with ``bound``."""
        key = (src, dst)
        found = self._links.get(key)
        if found is None:
            found = self._links[key] = Link(
                src,
                dst,
                self.settings.link_messages_max if bound is None else bound,
                random.Random(f"{self._seed}:{src}>{dst}"),
            )
        return found

    def drop_in_flight(self) -> int:
        """Lose every message not read yet (every process stopped); how many."""
        dropped = 0
        for link in self._links.values():
            dropped += len(link.queue)
            link.queue.clear()
        self.stats.dropped += dropped
        return dropped

    def last_delivery_us(self) -> int:
        """When the last message sent so far arrives (0 if none was sent)."""
        return max((link.last_deliver_us for link in self._links.values()), default=0)

    def _latency_us(self, link: Link, src_node: str | None, dst_node: str | None) -> int:
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
        link: Link,
        identity: bytes,
        frames: Sequence[bytes],
        src_node: str | None,
        dst_node: str | None,
    ) -> list[Envelope] | None:
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
            envelope = Envelope(deliver_at, link.sent, identity, frames)
            link.queue.append(envelope)
            link.last_deliver_us = deliver_at
            queued.append(envelope)
        return queued
