"""The node process: asyncio on uvloop around one :class:`~smr.node.core.NodeCore`, with its
inbox socket, its peer links, its timers and its signals.

Everything the node decides happens in the core's two entry points; this module only waits
for messages and timers and calls them (the simulation does the same in virtual time).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn, TypeVar

from ring.ids import NodeId
from ring.invariants import InvariantViolation
from smr.api import load_job
from smr.node.core import TICK_MS, NodeCore, Timer
from smr.node.settings import NodeSettings
from smr.output import OutputSink
from smr.spec import read_spec

if TYPE_CHECKING:
    from smr.transport.zeromq import Inbox

log = logging.getLogger("smr.node")
T = TypeVar("T")

# How often everything allocated so far moves out of the cyclic collector's reach. State is
# millions of small acyclic dicts, which reference counting frees; left in the collector's
# generations, a full collection walks all of them (0.5-1 s at a million keys), long enough
# for the watchers to declare a healthy node dead. Only cyclic garbage that lives longer
# than this interval escapes collection.
GC_FREEZE_INTERVAL_MS: Final = 1000
# The exit code of a node that stopped on a violated invariant (EX_SOFTWARE).
INVARIANT_VIOLATED_EXIT_CODE: Final = 70


def serve(cluster_dir: Path, node_id: str) -> int:
    """Run node ``node_id`` of the cluster in ``cluster_dir`` until SIGTERM; returns the exit
    code (0 after a clean stop, 2 if it could not start)."""
    import uvloop

    from smr.transport.zeromq import Inbox, Publisher, ZmqNodeLinks

    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {node_id} %(levelname)s %(message)s"
    )
    try:
        spec = read_spec(cluster_dir)
        me = spec.node(node_id)
        job = load_job(spec.job)
        inbox = Inbox(me.bind_addr)
        publisher = Publisher(me.pub_bind_addr)
    except Exception as error:  # every start-up failure is a one-line, actionable error
        log.error("cannot start: %s", error)
        return 2
    output = OutputSink(node_id, cluster_dir / "output" / f"{node_id}.jsonl", publisher.publish)
    links = ZmqNodeLinks(inbox)
    settings = NodeSettings(
        replication=spec.replication, checkpoint_interval_ms=spec.checkpoint_interval_ms
    )
    core = NodeCore(
        NodeId(node_id),
        job,
        spec.initial_view(),
        spec.slot_bits,
        links,
        output,
        settings=settings,
    )
    log.info("serving on %s (output %s), slot_bits=%d", inbox.addr, publisher.addr, spec.slot_bits)
    try:
        uvloop.run(_run(core, inbox))
    finally:
        output.close()
        inbox.close()
        publisher.close()
        links.close()
    log.info("stopped cleanly")
    return 0


async def _run(core: NodeCore, inbox: Inbox) -> None:
    """Receive turns until SIGTERM or SIGINT: drain what waits (up to the turn's bound),
    apply it, ack it; let timers and signals run; sleep until a message or a timer wakes
    the loop unless work is left."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _stop, stopping, wake)
    inbox.watch(loop, wake)
    settings = core.settings
    timers = [
        _every(min(TICK_MS, settings.heartbeat_interval_ms // 2), core.on_timer, Timer.TICK, wake),
        _every(settings.checkpoint_interval_ms, core.on_timer, Timer.CHECKPOINT, wake),
        _every(GC_FREEZE_INTERVAL_MS, _gc_freeze, None, wake),
    ]
    receive = inbox.receive
    try:
        while not stopping.is_set():
            try:
                core.receive_turn(receive)
            except InvariantViolation as violation:
                _crash(violation)
            # Yield once per turn even under constant load, so timers (checkpoints, rates,
            # heartbeats, probes) and signals run; then, unless batches or snapshot chunks
            # are left over (a timer may have added some), sleep until a message or a timer
            # wakes us.
            await asyncio.sleep(0)
            if not core.has_work:
                await inbox.wait_readable(wake)
    finally:
        for timer in timers:
            timer.cancel()
        inbox.unwatch(loop)
        core.tick()


def _crash(violation: InvariantViolation) -> NoReturn:
    """Stop the process at once, as a crash would: its state can no longer be trusted, and
    its peers take over its range from their copies."""
    log.critical("invariant violated, stopping at once: %s", violation, exc_info=violation)
    logging.shutdown()
    os._exit(INVARIANT_VIOLATED_EXIT_CODE)


def _gc_freeze(_: None) -> None:
    gc.freeze()


def _stop(stopping: asyncio.Event, wake: asyncio.Event) -> None:
    stopping.set()
    wake.set()


def _every(
    interval_ms: int, action: Callable[[T], None], argument: T, wake: asyncio.Event
) -> asyncio.Task[None]:
    async def repeat() -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                action(argument)
            except InvariantViolation as violation:
                _crash(violation)
            except Exception:
                log.exception("timer %s(%s) failed", getattr(action, "__name__", action), argument)
            wake.set()

    return asyncio.get_running_loop().create_task(repeat())
