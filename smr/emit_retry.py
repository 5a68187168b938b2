"""Retransmission on an emitter's channels: go-back-N after a NACK or a stall, sends a full
socket kept back, held rows of a move gone quiet, and giving up aloud (``DeliveryError``) when
a node acknowledges nothing for ``give_up_after_s``. Split out of :mod:`smr.emitter`, whose
``pump`` calls :func:`retry` and whose replies call :func:`resend`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from smr.channels import Channel, DeliveryError
from smr.reroute import release_held
from smr.wire.kinds import ChannelNumber

if TYPE_CHECKING:
    from smr.emitter import Emitter


def resend(emitter: Emitter, channel: Channel, from_chan: ChannelNumber) -> None:
    """Go back N on ``channel``: send again every unacked batch from ``from_chan``, at most
    once per stall (a NACK the limit skips is answered when it ends, in ``retry``)."""
    now = emitter._clock()
    # One go-back-N per stall: the NACKs of a pipelined window must not each trigger one.
    # A NACK past where the last one started is news, though: the node took the batches
    # resent and stopped at a later gap (often a hole re-routing left, which only a batch
    # carrying the new base closes), and nothing else will prompt it while the window is
    # full. Any other NACK the limit skips is answered when the limit ends (retry).
    if now - channel.resent_at < emitter.resend_after_s / 4 and from_chan <= channel.resent_from:
        if from_chan:
            channel.nack_waiting = max(channel.nack_waiting or from_chan, from_chan)
        return
    channel.resent_at = now
    channel.resent_from = max(from_chan, next(iter(channel.unacked), from_chan))
    channel.nack_waiting = None
    emitter.resends += 1
    channel.unsent_from = None
    for chan in list(channel.unacked):
        if chan >= from_chan:
            emitter._transmit(channel, chan)


def retry(emitter: Emitter, channels: list[Channel]) -> None:
    """On every pump: release held rows of a move gone quiet, answer NACKs the resend limit
    skipped, send what a full socket kept back, and on a stalled channel ask for the view,
    go back N, or give up (``DeliveryError``) past ``give_up_after_s`` of silence (counted
    from the start of a drain that retries an earlier failure at the earliest)."""
    now = emitter._clock()
    if emitter._holds and emitter._holds.stale(now, emitter.resend_after_s):
        # No word from the moving node in a resend interval: send the held rows again
        # (if the move still goes on, they are refused and held once more).
        release_held(emitter)
    held_since = emitter._holds.since
    # Silence before a retried drain began was reported by an earlier call already.
    counted_from = emitter.stall_counted_from
    if held_since is not None and now - max(held_since, counted_from) >= emitter.give_up_after_s:
        emitter.delivery_failed = True
        raise DeliveryError(
            f"{len(emitter._holds.rows)} tuples of slots being moved were held back for "
            f"{now - held_since:.0f} s: the move never ended"
        )
    for channel in channels:
        if not channel.unacked:
            channel.progress_at = now
            channel.nack_waiting = None
            continue
        waiting = channel.nack_waiting
        if waiting is not None and now - channel.resent_at >= emitter.resend_after_s / 4:
            resend(emitter, channel, from_chan=waiting)
        if channel.unsent_from is not None:
            start = channel.unsent_from
            channel.unsent_from = None
            for chan in list(channel.unacked):
                if chan >= start:
                    emitter._transmit(channel, chan)
        stalled_s = now - channel.progress_at
        if now - max(channel.progress_at, counted_from) >= emitter.give_up_after_s:
            emitter.delivery_failed = True
            raise DeliveryError(
                f"node {channel.node} at {channel.outbox.addr} acknowledged nothing for "
                f"{stalled_s:.0f} s; {sum(len(b.rows) for b in channel.unacked.values())} "
                "tuples are unacknowledged"
            )
        if stalled_s >= emitter.view_check_after_s:
            # A silent node may have been taken over: ask the others (rate-limited).
            emitter._ask_view([c for c in emitter._live_channels() if c is not channel])
        if (
            stalled_s >= emitter.resend_after_s
            and now - channel.resent_at >= emitter.resend_after_s
        ):
            resend(emitter, channel, from_chan=ChannelNumber(0))
