"""The reducer node: one process that owns a range of slots and keeps their state.

:class:`NodeCore` is the node's logic with no I/O of its own: it is handed decoded-or-not
messages and a clock, and talks through a ``reply`` and a ``publish`` callable, so the same
logic runs over ZeroMQ (:func:`serve`) and, in tests, over a simulated transport.
:func:`serve` is the thin shell: asyncio on uvloop, one inbox socket, timers.

Receiving a tuple batch on the channel from mapper ``M`` (DESIGN section 4):

1. Re-base: if the header's ``base`` (the oldest batch the mapper still holds for this
   channel) is past the number the node expects, expect ``base``: everything below was
   acked or re-routed by the mapper.
2. A batch numbered below the expected one is a resend: ack cumulatively again, apply nothing.
3. A batch numbered above it means a gap: answer ``NACK expect=k`` (resend from ``k``).
4. The expected batch is decoded and validated; a malformed body is answered with ``ERROR``
   and not accepted (the mapper stops with that message instead of resending forever).
5. If any of its slots is not this node's as primary, the whole batch is refused with
   ``NOT_OWNER`` and the node's view, and the channel does not advance: the mapper re-routes.
6. Otherwise the batch joins the bounded inbox and the channel advances. When the inbox is
   full the node stops reading its socket, so the socket queue and then TCP push back on the
   mappers: backpressure, never a drop.
7. Applying a batch runs ``reduce`` per tuple, skipping tuples with ``seq <= hwm`` (already
   applied); only then is the batch acked (a slow node acks slowly).

Every checkpoint interval the state store swaps its active fragment and merges it into
master (DESIGN section 5); with peer backup the delta is shipped to the secondaries between
those two steps.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

import psutil

from checkpoint.ids import MapperId
from checkpoint.store import StateStore
from ring.hashing import slot_of
from ring.ids import NodeId, Slot
from ring.placement import Ring, Role
from ring.view import View
from smr.api import Job, load_job
from smr.cluster import ClusterSpec, read_spec
from smr.output import OutputSink
from smr.protocol import (
    FRAME_BYTES_MAX_DEFAULT,
    Batch,
    FrameError,
    Kind,
    Message,
    decode,
    decode_batch_body,
    encode,
    pack_body,
    unpack_body,
)

log = logging.getLogger("smr.node")

# Decoded batches waiting to be applied. At 1000 tuples a batch this is at most 256k tuples
# (a few tens of MB); past it the node stops reading and the mappers block.
INBOX_BATCHES_MAX: Final = 256
# How often timers run: rates, output flush, checkpoint due-checks.
TICK_MS: Final = 100
# A dump page holds at most this many keys, so one reply stays well under the frame cap.
DUMP_KEYS_PER_PAGE_MAX: Final = 20_000
# Reducer errors are logged individually up to this many per second, then summarised.
ERROR_LOGS_PER_SECOND: Final = 5

Reply = Callable[[bytes, Sequence[bytes]], bool]
Publish = Callable[[Sequence[bytes]], None]


@dataclass
class NodeCounters:
    """What a node has done since it started; reported by ``status``."""

    batches: int = 0
    tuples_applied: int = 0
    tuples_duplicate: int = 0
    tuples_failed: int = 0
    batches_resent_to_us: int = 0
    gaps: int = 0
    not_owner: int = 0
    bad_frames: int = 0
    replies_dropped: int = 0
    checkpoints: int = 0


@dataclass(frozen=True)
class _Pending:
    """A batch accepted into the inbox, waiting to be applied and acked."""

    identity: bytes
    mapper: MapperId
    chan: int
    batch: Batch


class NodeCore:
    """The reducer node's logic: channels, ownership, the inbox, state and output.

    Guarantees: a batch is acked only after all its tuples were applied (or found to be
    duplicates, or failed in the reducer and were logged); a tuple is applied at most once
    per slot state (hwm); a malformed message never changes state or stops the node.
    """

    def __init__(
        self,
        node_id: NodeId,
        job: Job,
        view: View,
        slot_bits: int,
        reply: Reply,
        output: OutputSink,
        clock: Callable[[], float] = time.monotonic,
        frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT,
    ) -> None:
        self.node_id = node_id
        self.job = job
        self.slot_bits = slot_bits
        self.store = StateStore()
        self.counters = NodeCounters()
        self.inbox: deque[_Pending] = deque()
        self.inbox_peak = 0
        self._reply = reply
        self._output = output
        self._clock = clock
        self._frame_bytes_max = frame_bytes_max
        self._expected: dict[MapperId, int] = {}
        self._acks: dict[tuple[bytes, MapperId], int] = {}
        self._bad_frame_logged_at: dict[bytes, float] = {}
        self._error_log_window_start = 0.0
        self._error_logs_in_window = 0
        self._errors_unlogged = 0
        self._rate_mark = (clock(), 0)
        self.tuples_per_s = 0.0
        self._set_view(view)
        self._reduce_fn = self._make_reduce_fn()

    # -- view -------------------------------------------------------------------------------

    def _set_view(self, view: View) -> None:
        self.view = view
        self.ring = Ring(view, self.slot_bits)
        self.roles = self.ring.roles_of(self.node_id, 0)

    # -- messages ---------------------------------------------------------------------------

    @property
    def inbox_full(self) -> bool:
        """True when the node must stop reading its socket (backpressure)."""
        return len(self.inbox) >= INBOX_BATCHES_MAX

    def on_frames(self, identity: bytes, frames: Sequence[bytes]) -> None:
        """Handle one received message. Never raises on bad input: it is counted and logged."""
        try:
            message = decode(frames, self._frame_bytes_max)
        except FrameError as error:
            self._bad_frame(identity, str(error))
            return
        handler = self._handlers.get(message.kind)
        if handler is None:
            self._bad_frame(identity, f"{message.kind.name} is not a request a node serves")
            return
        try:
            handler(self, identity, message)
        except FrameError as error:
            self._bad_frame(identity, str(error))

    def _bad_frame(self, identity: bytes, reason: str) -> None:
        self.counters.bad_frames += 1
        now = self._clock()
        # One log line per peer per second at most: a broken peer must not flood the log.
        if now - self._bad_frame_logged_at.get(identity, -1e9) >= 1.0:
            self._bad_frame_logged_at[identity] = now
            log.warning("bad frame from peer %s: %s", identity.hex(), reason)
            if len(self._bad_frame_logged_at) > 10_000:
                self._bad_frame_logged_at.clear()

    def _send(self, identity: bytes, frames: Sequence[bytes]) -> None:
        if not self._reply(identity, frames):
            # Only replies are sent from here; a lost ack or answer is recovered by the
            # sender's resend or retry, so counting it is all there is to do.
            self.counters.replies_dropped += 1

    def _on_batch(self, identity: bytes, message: Message) -> None:
        header = message.header
        mapper = MapperId(header["mapper"])
        chan: int = header["chan"]
        # 1. Re-base.
        expected = max(self._expected.get(mapper, 0), header["base"])
        self._expected[mapper] = expected
        # 2. A resend of something already accepted.
        if chan < expected:
            self.counters.batches_resent_to_us += 1
            self._acks[(identity, mapper)] = expected - 1
            return
        # 3. A gap.
        if chan > expected:
            self.counters.gaps += 1
            self._send(identity, encode(Kind.NACK, {"mapper": mapper, "expect": expected}))
            return
        # 4. Decode and validate.
        try:
            batch = decode_batch_body(message.body, header["n"], self.ring.slot_count)
        except FrameError as error:
            self._bad_frame(identity, f"batch {chan} from {mapper}: {error}")
            self._send(identity, encode(Kind.ERROR, {"req": None, "message": str(error)}))
            return
        # 5. Ownership.
        roles = self.roles
        primary = Role.PRIMARY
        if any(roles[slot] != primary for slot in set(batch.slots)):
            self.counters.not_owner += 1
            header_out = {"mapper": mapper, "chan": chan, "epoch": self.view.epoch}
            self._send(identity, encode(Kind.NOT_OWNER, header_out, pack_body(self.view.to_wire())))
            return
        # 6. Accept.
        self.inbox.append(_Pending(identity, mapper, chan, batch))
        self.inbox_peak = max(self.inbox_peak, len(self.inbox))
        self._expected[mapper] = chan + 1

    def apply_inbox(self) -> None:
        """7. Apply every accepted batch, then queue its cumulative ack."""
        store = self.store
        counters = self.counters
        while self.inbox:
            pending = self.inbox.popleft()
            batch = pending.batch
            outcome = store.apply_batch(
                pending.mapper, batch.slots, batch.seqs, batch.keys, batch.values, self._reduce_fn
            )
            counters.batches += 1
            counters.tuples_applied += outcome.applied
            counters.tuples_duplicate += outcome.duplicates
            if outcome.failed:
                counters.tuples_failed += outcome.failed
                self._log_reducer_failures(outcome.failed, outcome.failures)
            self._acks[(pending.identity, pending.mapper)] = pending.chan
        self._flush_pending_emits()

    def send_acks(self) -> None:
        """Send one cumulative ack per channel that advanced since the last call."""
        if not self._acks:
            return
        epoch = self.view.epoch
        for (identity, mapper), through in self._acks.items():
            self._send(
                identity, encode(Kind.ACK, {"mapper": mapper, "through": through, "epoch": epoch})
            )
        self._acks.clear()

    # -- reducing ---------------------------------------------------------------------------

    def _make_reduce_fn(self) -> Callable[[Any, Any, dict[str, Any]], None]:
        """Wrap the user's reduce so its emits take effect only if it returns normally."""
        user_reduce = self.job.reduce
        tuple_emits: list[tuple[Any, Any]] = []
        self._emitted: list[tuple[Any, Any]] = []
        emitted = self._emitted
        emit = tuple_emits.append

        def emit_pair(key: Any, value: Any) -> None:
            emit((key, value))

        def reduce_fn(key: Any, value: Any, state: dict[str, Any]) -> None:
            try:
                user_reduce(key, value, state, emit_pair)
            except BaseException:
                tuple_emits.clear()
                raise
            if tuple_emits:
                emitted.extend(tuple_emits)
                tuple_emits.clear()

        return reduce_fn

    def _flush_pending_emits(self) -> None:
        if self._emitted:
            self._output.extend(self._emitted)
            self._emitted.clear()

    def _log_reducer_failures(
        self, count: int, examples: Sequence[tuple[Any, BaseException]]
    ) -> None:
        now = self._clock()
        if now - self._error_log_window_start >= 1.0:
            if self._errors_unlogged:
                log.error("%d more reducer errors not logged individually", self._errors_unlogged)
            self._error_log_window_start = now
            self._error_logs_in_window = 0
            self._errors_unlogged = 0
        for key, error in examples:
            if self._error_logs_in_window < ERROR_LOGS_PER_SECOND:
                self._error_logs_in_window += 1
                log.error("reduce failed for key %r: %s: %s", key, type(error).__name__, error)
            else:
                self._errors_unlogged += 1
        self._errors_unlogged += count - len(examples)

    # -- control requests -------------------------------------------------------------------

    def _on_ping(self, identity: bytes, message: Message) -> None:
        self._send(
            identity, encode(Kind.PONG, {"req": message.header["req"], "node": self.node_id})
        )

    def _on_view_request(self, identity: bytes, message: Message) -> None:
        header = {"req": message.header["req"], "epoch": self.view.epoch}
        self._send(identity, encode(Kind.VIEW, header, pack_body(self.view.to_wire())))

    def _on_status_request(self, identity: bytes, message: Message) -> None:
        self._send(
            identity,
            encode(Kind.STATUS, {"req": message.header["req"]}, pack_body(self.status())),
        )

    def _on_dump_request(self, identity: bytes, message: Message) -> None:
        start: int = message.header["start"]
        max_keys = min(max(message.header["max_keys"], 1), DUMP_KEYS_PER_PAGE_MAX)
        roles = self.roles
        owned = sorted(s for s in self.store.slots() if s >= start and roles[s] == Role.PRIMARY)
        entries: list[tuple[int, Any, dict[str, Any]]] = []
        next_slot: int | None = None
        for index, slot in enumerate(owned):
            # A page ends between slots, never inside one, so a slot is never split.
            if len(entries) >= max_keys:
                next_slot = owned[index]
                break
            entries.extend(self.store.items([Slot(slot)]))
        header = {"req": message.header["req"], "next": next_slot}
        self._send(identity, encode(Kind.DUMP, header, pack_body(entries)))

    def _on_query_request(self, identity: bytes, message: Message) -> None:
        key = unpack_body(message.body)
        if type(key) not in (str, int):
            raise FrameError(f"query key must be str or int, got {type(key).__name__}")
        slot = slot_of(key, self.slot_bits)
        owner = self.roles[slot] == Role.PRIMARY
        state = self.store.get(slot, key) if owner else None
        body = pack_body({"owner": owner, "slot": slot, "state": state})
        self._send(identity, encode(Kind.QUERY, {"req": message.header["req"]}, body))

    _handlers: ClassVar[dict[Kind, Callable[[NodeCore, bytes, Message], None]]] = {
        Kind.BATCH: _on_batch,
        Kind.PING: _on_ping,
        Kind.VIEW_REQUEST: _on_view_request,
        Kind.STATUS_REQUEST: _on_status_request,
        Kind.DUMP_REQUEST: _on_dump_request,
        Kind.QUERY_REQUEST: _on_query_request,
    }

    # -- timers -----------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """The checkpoint cycle: 1. swap the active fragment out (atomic between tuples);
        2. (with peer backup: ship the delta to the secondaries); 3. merge it into master."""
        # 1.
        self.store.swap()
        # 3.
        self.store.merge_inactive()
        self.counters.checkpoints += 1

    def tick(self) -> None:
        """Periodic housekeeping: the applied-tuples rate and the output flush."""
        now = self._clock()
        mark_time, mark_count = self._rate_mark
        if now - mark_time >= 1.0:
            self.tuples_per_s = (self.counters.tuples_applied - mark_count) / (now - mark_time)
            self._rate_mark = (now, self.counters.tuples_applied)
        self._output.flush()

    def status(self) -> dict[str, Any]:
        """A snapshot of the node for ``smr status``: ring position, load and counters."""
        own_range = self.ring.range_of(self.node_id)
        member = self.view.get(self.node_id)
        return {
            "node": self.node_id,
            "pid": os.getpid(),
            "token": member.token if member else None,
            "range_share": own_range.share if own_range else 0.0,
            "keys": self.store.key_count(),
            "tuples_per_s": round(self.tuples_per_s, 1),
            "epoch": self.view.epoch,
            "inbox_peak": self.inbox_peak,
            "rss_bytes": psutil.Process().memory_info().rss,
            **vars(self.counters),
        }


# -- the process shell -----------------------------------------------------------------------


def serve(cluster_dir: Path, node_id: str) -> int:
    """Run node ``node_id`` of the cluster in ``cluster_dir`` until SIGTERM; returns the exit
    code (0 after a clean stop, 2 if it could not start)."""
    import uvloop

    from smr.transport import Inbox, Publisher

    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {node_id} %(levelname)s %(message)s"
    )
    try:
        spec = read_spec(cluster_dir)
        me = spec.node(node_id)
        job = load_job(spec.job)
        inbox = Inbox(me.addr)
        publisher = Publisher(me.pub_addr)
    except Exception as error:  # every start-up failure is a one-line, actionable error
        log.error("cannot start: %s", error)
        return 2
    output = OutputSink(node_id, cluster_dir / "output" / f"{node_id}.jsonl", publisher.publish)
    core = NodeCore(NodeId(node_id), job, spec.initial_view(), spec.slot_bits, inbox.send, output)
    log.info("serving on %s (output %s), slot_bits=%d", inbox.addr, publisher.addr, spec.slot_bits)
    try:
        uvloop.run(_run(core, inbox, spec))
    finally:
        output.close()
        inbox.close()
        publisher.close()
    log.info("stopped cleanly")
    return 0


async def _run(core: NodeCore, inbox: Any, spec: ClusterSpec) -> None:
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _stop, stopping, wake)
    inbox.watch(loop, wake)
    timers = [
        _every(TICK_MS, core.tick, wake),
        _every(spec.checkpoint_interval_ms, core.checkpoint, wake),
    ]
    receive = inbox.receive
    on_frames = core.on_frames
    try:
        while not stopping.is_set():
            # Drain what is waiting (up to the inbox bound), apply it, ack it; then wait.
            while not core.inbox_full:
                received = receive()
                if received is None:
                    break
                on_frames(*received)
            core.apply_inbox()
            core.send_acks()
            # Yield once per cycle even under constant load, so timers (checkpoints, rates,
            # output flush) and signals run; then sleep until a message or a timer wakes us.
            await asyncio.sleep(0)
            await inbox.wait_readable(wake)
    finally:
        for timer in timers:
            timer.cancel()
        inbox.unwatch(loop)
        core.tick()


def _stop(stopping: asyncio.Event, wake: asyncio.Event) -> None:
    stopping.set()
    wake.set()


def _every(interval_ms: int, action: Callable[[], None], wake: asyncio.Event) -> asyncio.Task[None]:
    async def repeat() -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                action()
            except Exception:
                log.exception("timer %s failed", getattr(action, "__name__", action))
            wake.set()

    return asyncio.get_running_loop().create_task(repeat())
