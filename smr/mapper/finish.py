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
from collections.abc import Callable
from dataclasses import replace
from typing import Final

from smr.checkpoint.ids import MapperId
from smr.mapper.channels import Channel
from smr.wire.codec import encode
from smr.wire.kinds import RequestId
from smr.wire.messages import MapperDone

DONE_WAIT_S: Final = 2.0
"""How long step 3 waits for the nodes' answers at most."""

# Request ids of the notices; the view requests of an emitter count from 1 on their own
# channel, so these start far above them.
_REQUESTS: Final = itertools.count(1 << 40)


def announce_done(
    mapper_id: MapperId,
    last_seq: int,
    channels: list[Channel],
    clock: Callable[[], float],
    answers: Callable[[int], set[int]],
    wait_s: float = DONE_WAIT_S,
) -> int:
    """Steps 2 and 3 (the emitter must be drained): tell the nodes of ``channels`` (every
    live node of the view) that ``mapper_id`` finished at ``last_seq``; return how many
    answered. ``answers(timeout_ms)`` reads replies for up to that long and gives the
    request ids of the PONGs that came since it was last called.

    A channel opened just now may not take a message until its connection is up: the
    notice is sent again on every turn of the wait until it goes."""
    notice = MapperDone(RequestId(0), mapper_id, last_seq)
    unsent = channels
    asked = len(unsent)
    waiting: set[int] = set()
    deadline = clock() + wait_s  # virtual time in the simulation
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
        waiting -= answers(20)
    return asked - len(waiting) - len(unsent)
