"""Retransmission on an emitter's channels: go-back-N after a NACK or a stall, sends a full
socket kept back, held rows of a move gone quiet, and giving up aloud (``DeliveryError``) when
a node acknowledges nothing for ``give_up_after_s``. Functions over :class:`Channels` and
:class:`Router`, with nothing of their own: the emitter's ``pump`` calls :func:`retry`, and
its replies call :func:`resend`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from smr.mapper.channels import Channel, Channels, DeliveryError
from smr.mapper.router import Router
from smr.wire.kinds import ChannelNumber


@dataclass(frozen=True)
class Timing:
    """When a channel is resent, asks for the view, and gives up (seconds)."""

    resend_after_s: float
    view_check_after_s: float
    give_up_after_s: float


def resend(
    channels: Channels,
    router: Router,
    timing: Timing,
    now: float,
    channel: Channel,
    from_chan: ChannelNumber,
) -> None:
    """Go back N on ``channel``: send again every unacked batch from ``from_chan``, at most
    once per stall (a NACK the limit skips is answered when it ends, in ``retry``)."""
    # One go-back-N per stall: the NACKs of a pipelined window must not each trigger one.
    # A NACK past where the last one started is news, though: the node took the batches
    # resent and stopped at a later gap (often a hole re-routing left, which only a batch
    # carrying the new base closes), and nothing else will prompt it while the window is
    # full. Any other NACK the limit skips is answered when the limit ends (retry).
    if now - channel.resent_at < timing.resend_after_s / 4 and from_chan <= channel.resent_from:
        if from_chan:
            channel.nack_waiting = max(channel.nack_waiting or from_chan, from_chan)
        return
    channel.resent_at = now
    channel.resent_from = max(from_chan, next(iter(channel.unacked), from_chan))
    channel.nack_waiting = None
    channels.resend_from(channel, from_chan, router.epoch)


def retry(
    channels: Channels,
    router: Router,
    timing: Timing,
    clock: Callable[[], float],
    read: list[Channel],
) -> None:
    """On every pump: release held rows of a move gone quiet, answer NACKs the resend limit
    skipped, send what a full socket kept back, and on a stalled channel of ``read`` ask for
    the view, go back N, or give up (``DeliveryError``) past ``give_up_after_s`` of silence
    (counted from the start of a drain that retries an earlier failure at the earliest)."""
    now = clock()
    if router.holds_stale(now):
        # No word from the moving node in a resend interval: send the held rows again
        # (if the move still goes on, they are refused and held once more).
        router.release_held()
    held_since = router.held_since
    # Silence before a retried drain began was reported by an earlier call already.
    counted_from = channels.stall_counted_from
    if held_since is not None and now - max(held_since, counted_from) >= timing.give_up_after_s:
        channels.note_delivery_failed()
        raise DeliveryError(
            f"{router.held_rows} tuples of slots being moved were held back for "
            f"{now - held_since:.0f} s: the move never ended"
        )
    for channel in read:
        if not channel.unacked:
            channel.progress_at = now
            channel.nack_waiting = None
            continue
        waiting = channel.nack_waiting
        if waiting is not None and now - channel.resent_at >= timing.resend_after_s / 4:
            resend(channels, router, timing, clock(), channel, from_chan=waiting)
        if channel.unsent_from is not None:
            start = channel.unsent_from
            channel.unsent_from = None
            channels.transmit_from(channel, start, router.epoch)
        _check_stall(channels, router, timing, clock, now, channel, counted_from)


def _check_stall(
    channels: Channels,
    router: Router,
    timing: Timing,
    clock: Callable[[], float],
    now: float,
    channel: Channel,
    counted_from: float,
) -> None:
    """Give up on a channel silent past ``give_up_after_s``; ask the other nodes for their
    view past ``view_check_after_s``; go back N past ``resend_after_s``."""
    stalled_s = now - channel.progress_at
    if now - max(channel.progress_at, counted_from) >= timing.give_up_after_s:
        channels.note_delivery_failed()
        raise DeliveryError(
            f"node {channel.node} at {channel.outbox.addr} acknowledged nothing for "
            f"{stalled_s:.0f} s; {sum(len(b.rows) for b in channel.unacked.values())} "
            "tuples are unacknowledged"
        )
    if stalled_s >= timing.view_check_after_s:
        # A silent node may have been taken over: ask the others (rate-limited).
        router.ask_view_elsewhere(channel)
    if stalled_s >= timing.resend_after_s and now - channel.resent_at >= timing.resend_after_s:
        resend(channels, router, timing, clock(), channel, from_chan=ChannelNumber(0))
