"""Telling the nodes that a mapper has finished, so they can retire its dedup memory.

Protocol (the nodes' side is ``smr.node.retirement``):

1. Drain: every tuple of the mapper is acked by all the nodes of its set.
2. Send ``MapperDone(mapper, last)`` to every live node of the emitter's view, ``last`` being
   the highest seq the mapper gave (its position without combine, the highest per-slot seq
   with it).
3. Wait, up to ``DONE_WAIT_S``, for each node's PONG. A node that does not answer only keeps
   the mapper's hwms longer (until its primary's retirement reaches it, or for ever on its
   own store): more memory, never a wrong count, so this step never fails the feed.

Only a mapper whose id will never carry other tuples may say so: a feed of files or of
standard input, a client with a random id. After it, the nodes ack a resend of the same
tuples as duplicates and refuse a tuple past ``last``.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from smr.wire.codec import encode
from smr.wire.kinds import RequestId
from smr.wire.messages import MapperDone

if TYPE_CHECKING:
    from smr.emitter import Emitter

DONE_WAIT_S: Final = 2.0
"""How long step 3 waits for the nodes' answers at most."""

# Request ids of the notices; the view requests of an emitter count from 1 on their own
# channel, so these start far above them.
_REQUESTS: Final = itertools.count(1 << 40)


def last_seq(emitter: Emitter) -> int:
    """The highest seq ``emitter``'s current mapper gave a tuple (its seq base if none)."""
    if emitter._combine is None:
        return emitter.position
    return max(emitter._seqs, default=emitter._seq_base)


def announce_done(emitter: Emitter, wait_s: float = DONE_WAIT_S) -> int:
    """Steps 2 and 3 (the emitter must be drained): return how many nodes answered.

    A channel opened just now may not take a message until its connection is up: the
    notice is sent again on every turn of the wait until it goes."""
    notice = MapperDone(RequestId(0), emitter.mapper_id, last_seq(emitter))
    unsent = emitter._live_channels()
    asked = len(unsent)
    waiting: set[int] = set()
    clock = emitter._clock  # virtual time in the simulation
    deadline = clock() + wait_s
    while True:
        still_unsent = []
        for channel in unsent:
            req = RequestId(next(_REQUESTS))
            if channel.outbox.send(encode(replace(notice, req=req))):
                waiting.add(req)
            else:
                still_unsent.append(channel)
        unsent = still_unsent
        if not (waiting or unsent) or clock() >= deadline:
            break
        emitter.pump(timeout_ms=20)
        waiting -= emitter.pongs
        emitter.pongs.clear()
    return asked - len(waiting) - len(unsent)
