"""One turn of a node's receive loop (:meth:`smr.node.core.NodeCore.receive_turn`): how many
messages it reads, and the order of the work that follows them.

Guarantee: a turn reads at most ``MESSAGES_PER_TURN_MAX`` messages and stops reading when the
inbox is full or a snapshot chunk or checkpoint part was applied, so the applies, acks,
heartbeats and probes never wait behind a sender's stream of messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Protocol

from smr.node.checkpoints import CheckpointCycle
from smr.node.ingest import Ingest
from smr.node.moves import Moves
from smr.node.ports import Clock
from smr.node.recovery import Recovery
from smr.node.replication import Replication
from smr.node.snapshots import Snapshots

# Messages one turn reads at most. A turn also ends when the inbox fills, but messages that
# add nothing to it (bad frames, pings, status requests) would never fill it: a sender of
# those at full speed would hold the turn open, and with it the applies, the acks, the
# heartbeats and the probes, for as long as it kept sending.
MESSAGES_PER_TURN_MAX: Final = 1000

Receive = Callable[[], tuple[bytes, Sequence[bytes]] | None]


class TurnNode(Protocol):
    """What a turn uses of the node (``smr.node.core.NodeCore``): its roles' work, and when
    it last finished reading its messages."""

    read_at: float

    @property
    def clock(self) -> Clock: ...
    @property
    def ingest(self) -> Ingest: ...
    @property
    def moves(self) -> Moves: ...
    @property
    def recovery(self) -> Recovery: ...
    @property
    def replication(self) -> Replication: ...
    @property
    def checkpoints(self) -> CheckpointCycle: ...
    @property
    def snapshots(self) -> Snapshots: ...
    def on_frames(self, identity: bytes, frames: Sequence[bytes]) -> None: ...


def turn_is_full(node: TurnNode) -> bool:
    """True when this turn must stop reading messages: the inbox is full and so is the
    queue of batches read meanwhile (``Ingest.reading_paused``), or a snapshot chunk was
    applied (tens of ms each; chunks that arrive back to back, read in one turn, would
    hold off heartbeats and probes for seconds), or a checkpoint part (a few ms each:
    the batches behind it are applied and acked before the next part)."""
    return (
        node.ingest.reading_paused
        or node.snapshots.applied_this_turn
        or node.replication.applied_this_turn
    )


def receive_turn(node: TurnNode, receive: Receive) -> bool:
    """One turn of the receive loop; ``receive()`` returns the next waiting message as
    ``(sender identity, frames)``, or None when none waits.

    1. Read and handle messages until none waits, the turn is full, or it has read
       ``MESSAGES_PER_TURN_MAX`` of them.
    2. Apply accepted batches (a bounded number of tuples), then take the batches read
       while the inbox was full as it has room; a move being given takes its next step
       if that waited for them (``Moves.advance``).
    3. Send one cumulative ack per channel that advanced.
    4. End the turn: the next may read messages again.
    5. Send one chunk of each snapshot being sent.
    6. Run one step of the checkpoint in flight (``CheckpointCycle.step_shipping``) and one
       of the backup evictions under way (``Replication.step_eviction``).

    Returns True if work is left (batches to apply, snapshot chunks or checkpoint parts
    to send, backups to evict): the caller runs another turn soon (after letting its
    timers run) without waiting for a message.
    """
    # 1.
    node.recovery.note_turn_start(node.clock() - node.read_at)
    on_frames = node.on_frames
    drained = False
    for _ in range(MESSAGES_PER_TURN_MAX):
        if turn_is_full(node):
            break
        received = receive()
        if received is None:
            drained = True
            break
        on_frames(*received)
    node.read_at = node.clock()
    if drained:
        node.recovery.note_drained()
    # 2.
    node.ingest.apply_inbox()
    node.ingest.take_deferred()
    node.moves.advance()
    # 3.
    node.ingest.send_acks()
    # 4.
    node.snapshots.end_turn()
    node.replication.end_turn()
    # 5.
    if node.snapshots.has_work:
        node.snapshots.step()
    # 6.
    if node.checkpoints.shipping:
        node.checkpoints.step_shipping()
    if node.replication.evicting:
        node.replication.step_eviction()
    return has_work(node)


def has_work(node: TurnNode) -> bool:
    """True while batches wait to be applied (and the rate cap, if any, lets them),
    snapshot chunks to be sent, a checkpoint to be shipped, or a backup to be evicted."""
    sending = node.snapshots.can_send_now
    shipping = node.checkpoints.shipping
    return node.ingest.can_apply_now or sending or shipping or node.replication.evicting
