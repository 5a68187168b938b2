"""Simulated mapper processes: a real :class:`~smr.mapper.emitter.Emitter` in a thread that runs
only when the scheduler hands it control, over a simulated
:class:`~smr.transport.links.MapperTransport`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from smr.sim.clock import Scheduler
from smr.sim.network import ADDR_PREFIX, Link, SimClock, SimNetwork
from smr.sim.nodes import ClientEnd
from smr.transport.links import ChannelEnd

log = logging.getLogger("smr.sim")


class Post(Protocol):
    """What a simulated client's connections ask of the run (``Simulation`` offers it): the
    network and its clock, an end registered so that replies reach it, a message to a node
    (False when it cannot be sent)."""

    @property
    def network(self) -> SimNetwork: ...

    @property
    def clock(self) -> SimClock: ...

    def connect(self, end: ClientEnd) -> None: ...

    def send_to_node(self, link: Link, identity: bytes, frames: Sequence[bytes]) -> bool: ...


class Cancelled(BaseException):
    """Raised in a mapper thread to unwind it when the run ends early."""


# -- mappers ------------------------------------------------------------------------------------


class MapperProcess:
    """A mapper in its own thread, run one at a time with the scheduler (baton passing):
    the scheduler resumes it and waits until it blocks again or ends."""

    def __init__(self, scheduler: Scheduler, name: str, body: Callable[[], None]) -> None:
        self._scheduler = scheduler
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
        except Cancelled:
            pass
        except BaseException as error:  # reported by the scheduler, with the seed
            self.error = error
        finally:
            self.done = True
            self.waiting_on = None
            self._scheduler.process_blocked()

    def start(self) -> None:
        """Start the thread and run it until it first blocks (scheduler side)."""
        self.started = True
        self.thread.start()
        self.resume()

    def resume(self) -> None:
        """Run the mapper until it blocks or ends (scheduler side)."""
        self.waiting_on = None
        self._resume.release()
        self._scheduler.wait_for_process()

    def block(self, ends: tuple[str, ...], until_us: int) -> None:
        """Give control back until mail arrives on one of ``ends`` or ``until_us`` (mapper
        side)."""
        self.wait_token += 1
        self.waiting_on = ends
        self._scheduler.at(until_us, self._deadline, self.wait_token)
        self._scheduler.process_blocked()
        self._resume.acquire()
        if self.cancelled:
            raise Cancelled

    def _deadline(self, token: int) -> None:
        """The wait numbered ``token`` timed out: resume, unless it ended already."""
        if self.waiting_on is not None and self.wait_token == token:
            self.resume()

    def cancel(self) -> None:
        """Unwind a blocked or unstarted mapper and wait for its thread (scheduler side)."""
        if self.done:
            return
        self.cancelled = True
        if not self.started:
            self.started = True
            self.thread.start()
        self._resume.release()
        self._scheduler.wait_for_process()
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
        return self._sim.send_to_node(self._out, self.identity.encode(), frames)

    def receive(self) -> list[bytes] | None:
        """One reply that has arrived, or None."""
        queue = self.inbound.queue
        if queue and queue[0].deliver_at_us <= self._sim.clock.now_us:
            self._sim.network.stats.delivered += 1
            return list(queue.popleft().frames)
        return None

    def mail_arrived(self) -> None:
        """A reply arrived: wake the mapper if it waits on this end."""
        process = self._transport.process
        if (
            process is not None
            and process.waiting_on is not None
            and self.identity in process.waiting_on
            and self.has_mail()
        ):
            process.resume()

    def has_mail(self) -> bool:
        """Whether a reply has arrived."""
        queue = self.inbound.queue
        return bool(queue) and queue[0].deliver_at_us <= self._sim.clock.now_us

    def close(self) -> None:
        """Close: later replies to it are refused."""
        self.closed = True


class SimMapperTransport:
    """The :class:`~smr.mapper.emitter.MapperTransport` of one simulated mapper."""

    def __init__(self, sim: Post, mapper: str) -> None:
        self.sim = sim
        self.mapper = mapper
        self.process: MapperProcess | None = None
        self._opened = 0

    def open(self, addr: str, send_queue_messages_max: int) -> ChannelEnd:
        """A new connection to the node at ``addr`` (``sim://ID``)."""
        self._opened += 1
        identity = f"{self.mapper}#{self._opened}>{addr.removeprefix(ADDR_PREFIX)}"
        end = SimChannelEnd(self, addr, identity, send_queue_messages_max)
        self.sim.connect(end)
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
