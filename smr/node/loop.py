"""The node process: asyncio (on uvloop where it is installed) around one
:class:`~smr.node.core.NodeCore`, with its inbox socket, its peer links, its timers and its
signals.

Everything the node decides happens in the core's two entry points; this module only waits
for messages and timers and calls them (the simulation does the same in virtual time).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn, TypeVar

from smr.node.core import TICK_MS, NodeCore, Timer
from smr.node.disk import DiskState
from smr.node.start import Opened, build_core, open_node
from smr.ring.invariants import InvariantViolation
from smr.spec.model import NodeSpec
from smr.spec.parse import spec_to_json, split_host_port
from smr.transport.netfilter import FilteredLinks, parse_rule
from smr.wire.codec import decode, encode
from smr.wire.kinds import FrameError, Kind
from smr.wire.messages import Error, Message, NetRuleReply, NetRuleRequest

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
# How often held messages (emulated network faults) are looked at while a rule is set; with
# no rule and nothing held, the task sleeps until a rule comes.
RELEASE_CHECK_S: Final = 0.005
# The exit code of a node that stopped on a violated invariant (EX_SOFTWARE).
INVARIANT_VIOLATED_EXIT_CODE: Final = 70
# Tries of the last checkpoint on the way out, a second apart (the output table may refuse).
LAST_CHECKPOINT_ATTEMPTS: Final = 5


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where uvloop is installed (Linux and macOS: the package depends on
    it there), else asyncio's own: the same node, a little slower."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def serve(
    cluster_dir: Path,
    node_id: str,
    newcomer: NodeSpec | None = None,
    join_after_start_ms: int | None = None,
) -> int:
    """Run node ``node_id`` of the cluster in ``cluster_dir`` until SIGTERM; returns the exit
    code (0 after a clean stop, 1 if the output table refused the last records, 2 if it could
    not start).

    A node the spec does not name starts as ``newcomer``: on standby, known to the ring
    once its gossip reaches the spec's nodes (its seeds); with ``join_after_start_ms`` it
    then asks to join by itself (``NodeSettings.join_after_start_ms``).

    1. Read the spec and the job, open the output and the sockets
       (``smr.node.start.open_node``).
    2. Restore the state from the data directory, if any, and build the core
       (``smr.node.start.build_core``).
    3. Serve the metrics, if asked, and say what the node serves.
    4. Run until SIGTERM, then take a last checkpoint and close everything (``_run_to_end``).
    """
    from smr.transport.zeromq import handshakes_refused

    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {node_id} %(levelname)s %(message)s"
    )
    # 1.
    opened = open_node(cluster_dir, node_id, newcomer)
    if opened is None:
        return 2
    # 2.
    built = build_core(opened, node_id, join_after_start_ms)
    if built is None:
        opened.close_sockets()
        return 2
    core, links, disk = built
    # 3.
    loop = new_event_loop()
    spec, me = opened.spec, opened.me
    metrics_addr = ""
    if me.metrics_addr:
        try:
            metrics_addr = _serve_metrics(me.metrics_addr, core, loop)
        except OSError as error:
            log.error("cannot start: metrics on %s: %s", me.metrics_addr, error)
            loop.close()
            opened.close_sockets()
            return 2
    core.transport_counters = lambda: {"handshakes_refused": handshakes_refused()}
    core.cluster_info = {
        "cluster": spec_to_json(spec),
        "pub_addr": me.pub_addr,
        "metrics_addr": metrics_addr,
    }
    keys = opened.keys
    log.info(
        "serving on %s (output %s), slot_bits=%d, %s",
        opened.inbox.addr,
        opened.publisher.addr,
        spec.slot_bits,
        f"keys of {keys.directory}" if keys else "without keys",
    )
    # 4.
    return _run_to_end(core, loop, links, disk, opened)


def _run_to_end(
    core: NodeCore,
    loop: asyncio.AbstractEventLoop,
    links: FilteredLinks,
    disk: DiskState | None,
    opened: Opened,
) -> int:
    """Step 4 of ``serve``: run until SIGTERM; then everything applied (and so acked) goes
    to disk, once the output is durable, and everything closes. The exit code."""
    beats = StalledLoopBeats(core, links)
    beats.start()
    saved = True
    try:
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            runner.run(_run(core, opened.inbox, links))
        if disk is not None:
            # Everything applied (and so acked) goes to disk before the node exits, once
            # its output is durable (a table that refuses gets a few more tries).
            for attempt in range(LAST_CHECKPOINT_ATTEMPTS):
                saved = core.checkpoints.checkpoint()
                if saved or attempt == LAST_CHECKPOINT_ATTEMPTS - 1:
                    break
                time.sleep(1.0)
            if saved:
                # A clean stop: nothing was served past this checkpoint (smr.node.restart).
                disk.mark_stopped()
    finally:
        if disk is not None:
            disk.close()
        beats.stop()
        saved = opened.output.close() and saved
        opened.close_sockets()
    if not saved:
        # The output table refused the last records (logged): the state changes they came
        # from were not written to disk either. Say so in the exit code too.
        log.error("stopped with output records the table did not take (see above)")
        return 1
    log.info("stopped cleanly")
    return 0


def _serve_metrics(addr: str, core: NodeCore, loop: asyncio.AbstractEventLoop) -> str:
    """Start the node's Prometheus endpoint on ``addr`` (``host:port``); returns where it
    listens (port 0 becomes the port bound). OSError if it cannot bind."""
    from smr.node.metrics import serve_metrics

    host, port = split_host_port(addr, "metrics_addr")
    bound = serve_metrics(host, port, core.status, lambda: core.read_at, loop)
    log.info("metrics on http://%s:%d/metrics", host, bound)
    return f"{host}:{bound}"


async def _run(core: NodeCore, inbox: Inbox, links: FilteredLinks) -> None:
    """Receive turns until SIGTERM or SIGINT: drain what waits (up to the turn's bound),
    apply it, ack it; let timers and signals run; sleep until a message or a timer wakes
    the loop unless work is left. Emulated network faults (``links``) are set by the
    requests the receive path answers itself, and their held messages sent by a task."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _stop, stopping, wake)
    inbox.watch(loop, wake)
    settings = core.settings
    timers = [
        _every(min(TICK_MS, settings.heartbeat_interval_ms // 2), core.on_timer, Timer.TICK, wake),
        # Each node's cycle starts at a random point of the interval: nodes started together
        # would otherwise checkpoint together, each shipping its own checkpoint while it
        # applies its predecessor's, two pauses stacked into one.
        _every(
            settings.checkpoint_interval_ms,
            core.on_timer,
            Timer.CHECKPOINT,
            wake,
            first_ms=random.uniform(0, settings.checkpoint_interval_ms),
        ),
        _every(GC_FREEZE_INTERVAL_MS, _gc_freeze, None, wake),
    ]
    rule_set = asyncio.Event()
    timers.append(loop.create_task(_release_held(links, rule_set)))
    receive = _receiver(inbox, links, rule_set)
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
                # Batches held back by the apply rate cap: sleep until it lets them through.
                capped_s = core.ingest.capped_wait_s
                if capped_s is None:
                    await inbox.wait_readable(wake)
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(inbox.wait_readable(wake), capped_s)
    finally:
        for timer in timers:
            timer.cancel()
        inbox.unwatch(loop)
        core.tick()


def _receiver(
    inbox: Inbox, links: FilteredLinks, rule_set: asyncio.Event
) -> Callable[[], tuple[bytes, list[bytes]] | None]:
    """The inbox's receive, less the fault rules (``NET_RULE_REQUEST``), which it applies
    to ``links`` and answers itself, setting ``rule_set``."""
    rule_kind = bytes((Kind.NET_RULE_REQUEST,))

    def receive() -> tuple[bytes, list[bytes]] | None:
        while True:
            received = inbox.receive()
            if received is None:
                return None
            identity, frames = received
            if not frames or frames[0][:1] != rule_kind:
                return received
            inbox.send(identity, encode(_answer_rule(frames, links)))
            rule_set.set()

    return receive


def _answer_rule(frames: list[bytes], links: FilteredLinks) -> Message:
    """Apply the fault rule in ``frames`` to ``links``; the reply, or an error saying why not."""
    try:
        request = decode(frames)
    except FrameError as error:
        return Error(None, f"bad fault rule: {error}")
    if not isinstance(request, NetRuleRequest):
        return Error(None, f"expected a fault rule, got {request.kind.name}")
    try:
        text = links.apply(parse_rule(request.body, time.monotonic()))
    except ValueError as error:
        return Error(request.req, f"bad fault rule: {error}")
    log.warning("fault injection (emulated in this node): %s", text)
    return NetRuleReply(request.req, text)


async def _release_held(links: FilteredLinks, rule_set: asyncio.Event) -> None:
    """Send the messages the fault rules held back, each when its time comes (within
    :data:`RELEASE_CHECK_S` of it while a rule is set); with no rule and nothing held, wait
    for ``rule_set``."""
    while True:
        next_s = links.release_due()
        if next_s is None and not links.rules:
            rule_set.clear()
            await rule_set.wait()
            continue
        await asyncio.sleep(RELEASE_CHECK_S if next_s is None else min(next_s, RELEASE_CHECK_S))


class StalledLoopBeats:
    """Heartbeats from a thread of their own while the node's loop is stalled.

    A reduce call that takes seconds (a slow lookup, a GC pause) holds the event loop, and
    with it the node's heartbeats: without this, its watchers would declare a live node dead
    and race it for its range. Every heartbeat interval the thread looks at when the loop
    last read its messages (``NodeCore.read_at``); if that is more than two intervals ago,
    it sends the node's heartbeats itself (``Membership.stalled_beats``), on sockets of its
    own (ZeroMQ sockets are not shared between threads). A loop that has read nothing for
    ``stuck_after_ms`` is reported stuck, loudly, once per stall. Pure-Python user code
    yields the interpreter every few milliseconds, so the thread keeps its rhythm; a native
    call that never releases the interpreter would stop it too.
    """

    def __init__(self, core: NodeCore, links: FilteredLinks | None = None) -> None:
        self._core = core
        self._links = links
        self._interval_s = core.settings.heartbeat_interval_ms / 1000
        self._stuck_after_s = core.settings.stuck_after_ms / 1000
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="smr-beats", daemon=True)

    def start(self) -> None:
        """Start watching the loop."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close its sockets."""
        self._stopping.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        from smr.transport.zeromq import Outbox

        outboxes: dict[str, Outbox] = {}
        stuck_reported = False
        try:
            while not self._stopping.wait(self._interval_s):
                stalled_s = time.monotonic() - self._core.read_at
                if stalled_s < 2 * self._interval_s:
                    stuck_reported = False
                    continue
                stuck = stalled_s >= self._stuck_after_s
                beats = self._core.membership.stalled_beats(round(stalled_s * 1000), stuck)
                for peer, addr, frames in beats:
                    if self._links is not None and self._links.cut_off(peer):
                        continue  # an emulated cut holds every message to it: a beat is late
                    outbox = outboxes.get(addr)
                    if outbox is None:
                        outbox = outboxes[addr] = Outbox(addr, immediate=False)
                    outbox.send(frames)
                if stuck and not stuck_reported:
                    stuck_reported = True
                    log.error(
                        "stuck: the loop has read no message for %.0f s (a reduce call that "
                        "does not return?); heartbeats go on from their own thread",
                        stalled_s,
                    )
        except Exception:  # the loop must not lose its beats silently
            log.exception("the heartbeat thread failed")
        finally:
            for outbox in outboxes.values():
                outbox.close()


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
    interval_ms: int,
    action: Callable[[T], None],
    argument: T,
    wake: asyncio.Event,
    first_ms: float | None = None,
) -> asyncio.Task[None]:
    """A task that runs ``action(argument)`` every ``interval_ms`` (the first time after
    ``first_ms``, if given), then wakes the loop."""

    async def repeat() -> None:
        if first_ms is not None:
            await asyncio.sleep(first_ms / 1000)
            _run_timer(action, argument, wake)
        while True:
            await asyncio.sleep(interval_ms / 1000)
            _run_timer(action, argument, wake)

    return asyncio.get_running_loop().create_task(repeat())


def _run_timer(action: Callable[[T], None], argument: T, wake: asyncio.Event) -> None:
    """One firing of a timer: a failure is logged (an invariant violation crashes the
    node), and the loop is woken to run the work the action left."""
    try:
        action(argument)
    except InvariantViolation as violation:
        _crash(violation)
    except Exception:
        log.exception("timer %s(%s) failed", getattr(action, "__name__", action), argument)
    wake.set()
