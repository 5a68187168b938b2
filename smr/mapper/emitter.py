"""The emitter: the mapper side of the data path (docs/design/architecture.md#data-path,
steps 2-4), a façade over the parts that own its state.

The life of a tuple in an :class:`Emitter` (one mapper id at a time):

1. ``emit(key, value)`` gives the tuple its slot and seq and puts it in the open batch of
   its slot's primary (:class:`~smr.mapper.batcher.Batcher`; with ``combine``, a key
   already open is folded in). A batch closes at ``batch_size`` tuples, before a tuple that
   would take it past ``batch_bytes``, on ``flush()``, and, without ``combine``, at the
   first emit ``linger_ms`` or more after the first tuple opened since the last flush.
2. A closed batch is encoded once and goes to every node of the primary's replica set, each
   on its own channel with its own batch number (:class:`~smr.mapper.router.Router`,
   :class:`~smr.mapper.channels.Channels`).
3. A channel holds at most ``window_batches`` unacked batches; when it is full, ``emit``
   blocks while it reads replies (backpressure: nothing is dropped).
4. Replies: ``ACK through=k`` releases the channel's batches up to ``k``; ``NACK expect=k``
   resends from ``k`` (:mod:`smr.mapper.resend`); ``NOT_OWNER`` carries the node's view and
   the range it is handing over in a move, if that is why, and the router re-routes or holds
   back what it must; ``ERROR`` stops the emitter with the node's message.
5. A channel that makes no progress for ``resend_after_ms`` resends its unacked batches
   (go-back-N) and asks the other nodes for their view; after ``give_up_after_s`` without
   progress :class:`DeliveryError` names the node.

Guarantee: when :meth:`Emitter.drain` or :meth:`Emitter.close` returns, every emitted tuple
was acked by every node of its replica set; otherwise it raises.

Channels are named by the emitter's own random stream id, so one emitter can send for several
mapper ids in turn (:meth:`Emitter.begin_mapper`: the Spark feeder's one emitter per worker),
and a retried mapper on a fresh emitter keeps its tuples' identities on fresh channels.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from smr.checkpoint.ids import MapperId
from smr.mapper.batcher import Batcher
from smr.mapper.channels import Channel, Channels, DeliveryError, Row
from smr.mapper.finish import announce_done
from smr.mapper.resend import Timing, resend, retry
from smr.mapper.router import Router
from smr.ring.placement import Ring
from smr.ring.view import View
from smr.transport.links import MapperTransport
from smr.transport.zeromq import zeromq_mapper_transport
from smr.wire.codec import decode, unpack_body
from smr.wire.kinds import FrameError, StreamId
from smr.wire.messages import Ack, Error, Nack, NotOwner, Pong, ViewReply

__all__ = [
    "BATCH_BYTES_DEFAULT",
    "BATCH_BYTES_MAX",
    "BATCH_SIZE_DEFAULT",
    "LINGER_MS_DEFAULT",
    "SEQ_MAX",
    "WINDOW_BATCHES_DEFAULT",
    "DeliveryError",
    "Emitter",
]

BATCH_SIZE_DEFAULT: Final = 1000
# Encoded bytes of a batch body: far under the frame cap (smr.wire.kinds.FRAME_BYTES_MAX_DEFAULT,
# 16 MiB), so that even a body split late (twice this) and its header fit in one frame.
BATCH_BYTES_DEFAULT: Final = 1 << 20
BATCH_BYTES_MAX: Final = 4 << 20
WINDOW_BATCHES_DEFAULT: Final = 16
# Open batches go at least this often while emits go on: well above the time a batch takes
# to fill at full rate (1000 tuples at 0.3-1 M/s: 1-3 ms), so it costs no throughput.
LINGER_MS_DEFAULT: Final = 20
# No ack progress for this long on a channel with unacked batches: resend them. Well above
# the time a node needs for a full window (16 x 1000 tuples at ~0.5 M/s is ~30 ms).
RESEND_AFTER_MS_DEFAULT: Final = 1000
GIVE_UP_AFTER_S_DEFAULT: Final = 30.0
# A channel silent this long makes the emitter ask the other nodes for their view: a takeover
# is done about 250-400 ms after a crash, so this finds it soon after.
VIEW_CHECK_AFTER_MS_DEFAULT: Final = 200
# Seqs travel as uint64; staying below 2**63 keeps them exact in every encoding on the way.
SEQ_MAX: Final = 1 << 63


class Emitter:
    """Sends one mapper's tuples to the ring, exactly once per tuple identity.

    ``on_acked``, if given, is called with the rows ``(slot, seq, key, value, emit_time_s)``
    of every batch once all the nodes of its replica set acked it (latency measurement).
    ``linger_ms`` (None: never) goes by those emit times, wall-clock time, not ``clock``.
    """

    def __init__(
        self,
        view: View,
        slot_bits: int,
        mapper_id: MapperId,
        replication: int = 0,
        combine: Callable[[Any, Any], Any] | None = None,
        batch_size: int = BATCH_SIZE_DEFAULT,
        batch_bytes: int = BATCH_BYTES_DEFAULT,
        window_batches: int = WINDOW_BATCHES_DEFAULT,
        resend_after_ms: int = RESEND_AFTER_MS_DEFAULT,
        give_up_after_s: float = GIVE_UP_AFTER_S_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
        transport: MapperTransport | None = None,
        on_acked: Callable[[Sequence[Row]], None] | None = None,
        linger_ms: float | None = LINGER_MS_DEFAULT,
    ) -> None:
        if batch_size < 1 or window_batches < 1:
            raise ValueError("batch_size and window_batches must be at least 1")
        if linger_ms is not None and linger_ms < 0:
            raise ValueError(f"linger_ms must be at least 0 (or None), not {linger_ms}")
        if not 1024 <= batch_bytes <= BATCH_BYTES_MAX:
            raise ValueError(f"batch_bytes must be in [1024, {BATCH_BYTES_MAX}], not {batch_bytes}")
        self.slot_bits = slot_bits
        self.replication = replication
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.window_batches = window_batches
        self._timing = Timing(
            resend_after_s=resend_after_ms / 1000,
            view_check_after_s=VIEW_CHECK_AFTER_MS_DEFAULT / 1000,
            give_up_after_s=give_up_after_s,
        )
        self._clock = clock
        self.pongs: set[int] = set()
        """Request ids of the PONGs nodes sent (answers to ``MapperDone``), until read."""
        self._channels = Channels(
            transport or zeromq_mapper_transport(), mapper_id, window_batches, clock, on_acked
        )
        self._batcher = Batcher(
            slot_bits,
            batch_size,
            batch_bytes,
            combine,
            linger_ms,
            send=lambda dest, rows: self._router.send(dest, rows),
        )
        self._router = Router(
            view,
            replication,
            self._batcher,
            self._channels,
            self.pump,
            clock,
            self._timing.resend_after_s,
        )
        # The batcher's own functions, bound here: no call between a program and them.
        self.emit = self._batcher.emit
        self.emit_sized = self._batcher.emit_sized
        self.emit_many = self._batcher.emit_many
        self.emit_record = self._batcher.emit_record

    # -- what it is and where it stands ---------------------------------------------------------

    @property
    def mapper_id(self) -> MapperId:
        """The mapper the tuples are sent as (see :meth:`begin_mapper`)."""
        return self._channels.mapper_id

    @property
    def stream_id(self) -> StreamId:
        """The emitter's own random stream id, which names its channels."""
        return self._channels.stream_id

    @property
    def view(self) -> View:
        """The view tuples are routed by."""
        return self._router.view

    @property
    def ring(self) -> Ring:
        """The ring of :attr:`view`."""
        return self._router.ring

    @property
    def resend_after_s(self) -> float:
        """No ack progress this long on a channel with unacked batches: resend them."""
        return self._timing.resend_after_s

    @property
    def give_up_after_s(self) -> float:
        """No ack progress this long on a channel: :class:`DeliveryError`."""
        return self._timing.give_up_after_s

    @property
    def tuples_emitted(self) -> int:
        """Tuples passed to ``emit`` so far, over every mapper of this emitter."""
        return self._batcher.tuples_emitted

    @property
    def position(self) -> int:
        """Without combine, the seq of the last tuple emitted: the ``seq_base`` of
        :meth:`begin_mapper` plus the tuples emitted since. A mapper that emits the same
        tuples in the same order from a position sends them with the same identities."""
        return self._batcher.position

    @property
    def combines(self) -> bool:
        """Whether the emitter folds the tuples of a key together (``combine``)."""
        return self._batcher.combines

    @property
    def unacked_batches(self) -> int:
        """Batches sent and not yet acked by every node of their set."""
        return self._channels.unacked_batches()

    @property
    def tuples_sent(self) -> int:
        """Tuples put on the channels (a re-routed tuple counts again)."""
        return self._router.tuples_sent

    @property
    def batches_sent(self) -> int:
        """Batches put on the channels (a re-routed batch counts again)."""
        return self._router.batches_sent

    @property
    def tuples_acked(self) -> int:
        """Tuples of batches acked by every node of their set."""
        return self._channels.tuples_acked

    @property
    def resends(self) -> int:
        """Go-back-N resends, after a NACK or a stall."""
        return self._channels.resends

    @property
    def reroutes(self) -> int:
        """Batches re-routed (a view change, a refusal, a hold)."""
        return self._router.reroutes

    @property
    def view_changes(self) -> int:
        """Newer views adopted."""
        return self._router.view_changes

    @property
    def views_pushed(self) -> int:
        """Views sent to a node that refused a batch by an older view."""
        return self._router.views_pushed

    # -- replies --------------------------------------------------------------------------------

    def flush(self) -> None:
        """Close and send every open batch, until no tuple is left open."""
        self._batcher.close_all()

    def pump(self, timeout_ms: int = 0) -> None:
        """Read replies for up to ``timeout_ms``; retry unsent batches, resend stalled ones."""
        self._channels.pump(timeout_ms, self._on_reply, self._retry)

    def _retry(self, channels: list[Channel]) -> None:
        retry(self._channels, self._router, self._timing, self._clock, channels)

    def _on_reply(self, channel: Channel, frames: list[bytes]) -> None:
        try:
            message = decode(frames)
        except FrameError:
            return  # nodes only send well-formed replies; ignore anything else
        router = self._router
        match message:
            case Ack(through=through, epoch=epoch):
                self._channels.on_ack(channel, through)
                if epoch > router.epoch:
                    router.ask_view([channel])
            case ViewReply(body=body):
                try:
                    view = View.from_wire(unpack_body(body))
                except (FrameError, ValueError):
                    return
                router.on_view(view)
            case Nack(expect=expect, move_ended=move_ended):
                channel.taken_below(expect)
                if move_ended and router.holds_for(channel.node):
                    # A move at this node ended (called off, or settled at its receiver).
                    router.release_held()
                resend(self._channels, router, self._timing, self._clock(), channel, expect)
            case NotOwner(chan=chan, epoch=epoch, body=body):
                try:
                    view = View.from_wire(unpack_body(body))
                    frozen = router.slot_range(message.frozen_start, message.frozen_length)
                except (FrameError, ValueError):
                    return
                router.on_not_owner(channel, chan, view, epoch, frozen)
            case Error(message=text):
                raise DeliveryError(f"node {channel.node} refused a batch: {text}")
            case Pong(req=req):
                self.pongs.add(req)  # a node took a MapperDone notice (smr.mapper.finish)

    # -- mappers, draining, closing -------------------------------------------------------------

    def _open_anywhere(self) -> bool:
        """Whether a tuple is unacked, open, or held back."""
        return bool(
            self._channels.unacked_batches() or self._batcher.has_open() or self._router.held_rows
        )

    def begin_mapper(self, mapper_id: MapperId, seq_base: int = 0) -> None:
        """Send the following tuples as mapper ``mapper_id``, with seqs from
        ``seq_base + 1`` (positions without combine, per slot with it).

        Only between mappers: every earlier tuple must be acked (:meth:`drain`), because a
        batch's mapper id is the emitter's at the time it is sent, resends included. A mapper
        that is retried re-sends identical ids when it emits the same tuples in the same order
        from the same ``seq_base``; the nodes then drop what they already applied.
        """
        if self._open_anywhere():
            raise RuntimeError("begin_mapper needs a drained emitter: call drain() first")
        if not 0 <= seq_base < SEQ_MAX:
            raise ValueError(f"seq_base must be in [0, {SEQ_MAX}), not {seq_base}")
        self._channels.send_as(mapper_id)
        self._batcher.begin(seq_base)

    def drain(self, timeout_s: float | None = None) -> None:
        """Flush, then wait until every tuple is acked; DeliveryError if that cannot happen.

        ``timeout_s`` bounds the wait (default: the give-up time of a stalled channel).
        After a DeliveryError, a drain may be called again (the nodes are back, say): it
        waits its own time, the give-up time counted from its start, and does not fail at
        once on the silence an earlier call already reported."""
        self._channels.retry_failed_delivery()
        try:
            self.flush()
            deadline = self._clock() + (timeout_s if timeout_s is not None else 1e18)
            # Re-routing while waiting may leave tuples open (see flush): send them too.
            while self._open_anywhere():
                if self._clock() > deadline:
                    raise DeliveryError(
                        f"{self.unacked_batches} batches still unacknowledged and "
                        f"{self._router.held_rows} tuples of moving slots held back after "
                        f"{timeout_s} s"
                    )
                self.flush()
                self.pump(timeout_ms=50)
        except DeliveryError:
            self._channels.note_delivery_failed()
            raise

    def _answers(self, timeout_ms: int) -> set[int]:
        """Read replies for up to ``timeout_ms``: the PONGs that came since the last call."""
        self.pump(timeout_ms)
        pongs = set(self.pongs)
        self.pongs.clear()
        return pongs

    def finish_mapper(self, timeout_s: float | None = None) -> None:
        """Drain, then tell the nodes the current mapper finished, so that they retire its
        dedup memory (:mod:`smr.mapper.finish`): only for an id never used for other tuples.
        :meth:`begin_mapper` may follow."""
        self.drain(timeout_s)
        announce_done(
            self.mapper_id,
            self._batcher.last_seq(),
            self._router.live_channels(),
            self._clock,
            self._answers,
        )

    def abort(self) -> None:
        """Close every channel at once and forget every open and unacked tuple.

        For a mapper whose work will be done again under the same identity (a failed Spark
        task is retried): what reached the nodes stays applied and the rest comes with the
        retry. The emitter is unusable afterwards.
        """
        self._channels.close()
        self._batcher.clear()
        self._router.drop_holds()

    def close(self, timeout_s: float | None = None, *, finished: bool = False) -> None:
        """Drain (see :meth:`drain`), then close every channel, also when draining fails.
        ``finished``: the mapper's id will never carry other tuples; after draining, tell
        the nodes, which then retire its dedup memory (:mod:`smr.mapper.finish`)."""
        try:
            if finished:
                self.finish_mapper(timeout_s)
            else:
                self.drain(timeout_s)
        finally:
            self._channels.close()
