"""The checkpoint cycle a primary runs (docs/design/architecture.md#state): its numbered
deltas, sent to its secondaries (and a move's copy holder) a part per turn, merged into
master, and written to its data directory. What a secondary does with them is
:mod:`smr.node.replication`'s.

Guarantee: checkpoints are numbered without a gap, each sent whole before the next begins,
and one begins only once the output its records carry is durable.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Final, Protocol

from smr.checkpoint.delta import Delta, encode_delta
from smr.checkpoint.delta_parts import split_delta
from smr.checkpoint.ids import CheckpointNumber, MapperId, Seq
from smr.checkpoint.store import StateStore
from smr.node.disk import DiskState
from smr.node.ports import NodeBasics, ViewGossip
from smr.node.windows import NodeWindows
from smr.output.files import OutputSink
from smr.ring.ids import NodeId
from smr.wire.peer import Checkpoint, CheckpointRequest, PeerMessages

# A primary takes at most one early checkpoint per this many seconds (several secondaries
# may ask at once; one checkpoint answers them all).
EARLY_CHECKPOINT_GAP_S: Final = 0.01
# Keys merged into master per step of a checkpoint in flight (whole slots: about this many).
MERGE_KEYS_PER_STEP: Final = 500

log = logging.getLogger(__name__)


class CopyTarget(Protocol):
    """What the cycle asks of the moves (``smr.node.moves``, step 3)."""

    def copy_target(self) -> tuple[NodeId, ...]: ...


class FinishNotices(Protocol):
    """What the windows' close asks of the retirement (``smr.node.retirement``)."""

    def last_of(self, mapper: MapperId) -> Seq | None: ...


class WindowsHolder(Protocol):
    """The reducer, holding a windowed job's windows (``smr.node.windows``) or None."""

    @property
    def windows(self) -> NodeWindows | None: ...


class CycleNode(NodeBasics, Protocol):
    """What the checkpoint cycle uses of the node (``smr.node.core.NodeCore``)."""

    @property
    def secondaries(self) -> tuple[NodeId, ...]: ...
    @property
    def store(self) -> StateStore: ...
    @property
    def output(self) -> OutputSink: ...
    @property
    def disk(self) -> DiskState | None: ...
    @property
    def membership(self) -> ViewGossip: ...
    @property
    def moves(self) -> CopyTarget: ...
    @property
    def reducer(self) -> WindowsHolder: ...
    @property
    def retirement(self) -> FinishNotices: ...
    def peer_send(self, peer: NodeId, message: PeerMessages) -> bool: ...


class CheckpointCycle:
    """A primary's checkpoints: their numbers, the one in flight, when the last was taken."""

    def __init__(self, node: CycleNode) -> None:
        self._node = node
        self.checkpoint_number = CheckpointNumber(0)
        # When the last early checkpoint was taken (a secondary's backup neared its bound).
        self._early_checkpoint_at = -1e9
        # When the last checkpoint was taken (None: none yet); status reports its age.
        self.checkpointed_at: float | None = None
        # The checkpoint being sent and merged, a step per turn (start_checkpoint).
        self._shipping: Iterator[None] | None = None

    def reset(self) -> None:
        """Drop the checkpoint in flight (fencing: the store it came from is kept whole as
        the fenced copy, whose reads see its unmerged part, and the next incarnation numbers
        and ships its own)."""
        self._shipping = None

    def last_checkpoint_number(self) -> CheckpointNumber:
        """The number of the last checkpoint this node took as a primary."""
        return self.checkpoint_number

    def checkpoint_age_s(self, now: float) -> float | None:
        """Seconds since this node last took a checkpoint (None: none yet)."""
        return None if self.checkpointed_at is None else now - self.checkpointed_at

    def on_checkpoint_request(self, identity: bytes, message: CheckpointRequest) -> None:
        """A secondary's backup nears its bound: checkpoint now (at most once per
        ``EARLY_CHECKPOINT_GAP_S``), so that its eviction makes room."""
        node = self._node
        sender = node.membership.from_live_peer(message)
        if sender is None or sender not in node.secondaries:
            return
        now = node.clock()
        if now - self._early_checkpoint_at < EARLY_CHECKPOINT_GAP_S:
            return
        self._early_checkpoint_at = now
        node.counters.checkpoints_early += 1
        self.checkpoint()

    @property
    def shipping(self) -> bool:
        """True while a checkpoint begun by ``start_checkpoint`` is still being sent or
        merged (``step_shipping`` runs it on, a step per turn)."""
        return self._shipping is not None

    def checkpoint(self) -> bool:
        """The whole checkpoint cycle before returning (a move's final checkpoint, an early
        one, the last one on the way out): ``start_checkpoint``, then ``finish_shipping``.
        False if it did not run (step 0)."""
        if not self.start_checkpoint():
            return False
        self.finish_shipping()
        return True

    def start_checkpoint(self) -> bool:
        """The checkpoint cycle (docs/design/architecture.md#state); never waits for the network,
        except for the output table's commit. Steps 0 and 1 run now, the rest a step per turn
        (``step_shipping``), so a big checkpoint does not stall the loop: tuples are applied
        between its parts. A cycle still in flight is finished first. False if it did not
        run (step 0).

        Before them, a windowed job's windows close (``_close_windows``).

        0. Make the output durable (``OutputSink.make_durable``): the file written and the
           output table committed, so no record of a state change this checkpoint carries
           exists only in this process. If the table cannot commit, stop here: the node
           applies on (to ``BACKLOG_RECORDS_MAX`` records) and the next cycle tries again.
        1. Swap the active fragment out with the hwm vectors of its slots (atomic: the event
           loop runs one thing at a time, so this falls between two tuples), and number it.
        2. Cut it into parts of whole slots (``split_delta``); encode each and send it to
           every secondary (optimistic: no ack awaited; a secondary that misses a part asks
           for a snapshot), one part a step.
        3. Merge it into master, about ``MERGE_KEYS_PER_STEP`` keys a step (reads see the
           same state throughout).
        4. With a data directory, write its parts there (``smr.node.disk``); a write that
           fails is counted (``disk_errors``) and logged, and the node serves on.
        """
        node = self._node
        self.finish_shipping()
        # A windowed job's windows that the watermark passed close first (smr.node.windows,
        # step 2): their results are made durable and their closing leaves with this delta.
        self._close_windows()
        # 0.
        if not node.output.make_durable():
            node.counters.checkpoints_held += 1
            return False
        # 1.
        delta = node.store.swap()
        self.checkpoint_number = CheckpointNumber(self.checkpoint_number + 1)
        self._shipping = self._ship(delta, self.checkpoint_number)
        return True

    def _close_windows(self) -> None:
        """A windowed job's windows that the watermark passed close in this node's range,
        their results to the output (``smr.node.windows``, step 2); nothing for other jobs."""
        node = self._node
        windows = node.reducer.windows
        if windows is None:
            return
        own = node.ring.range_of(node.node_id)
        owns = (lambda slot: False) if own is None else own.contains
        windows.close_due(
            node.store,
            owns,
            node.retirement.last_of,
            node.output.extend,
            owned=() if own is None else own.slots(),
        )
        counts, counters = windows.counts, node.counters
        counters.windows_closed = counts.windows_closed
        counters.window_corrections = counts.window_corrections
        counters.late_dropped = counts.late_dropped

    def step_shipping(self) -> None:
        """Run one step of the checkpoint in flight (a part sent, or a merge step): a turn
        runs one, so its parts and merge steps interleave with the turns that apply tuples
        and none of those waits behind the whole checkpoint. Counted in steps, not time, so
        that a simulated run replays the same."""
        shipping = self._shipping
        if shipping is None:
            return
        try:
            next(shipping)
        except StopIteration:
            self._shipping = None
        except BaseException:
            self._shipping = None
            raise

    def finish_shipping(self) -> None:
        """Run the checkpoint in flight to its end: before anything that must follow it
        whole (the next cycle, a snapshot, a move's final checkpoint)."""
        shipping, self._shipping = self._shipping, None
        if shipping is not None:
            for _ in shipping:
                pass

    def _ship(self, delta: Delta, number: CheckpointNumber) -> Iterator[None]:
        """Steps 2 to 4 of ``start_checkpoint``, yielding between steps."""
        node = self._node
        # 2. (A move's copy holder gets them too: smr.node.moves, step 3.)
        targets = (*node.secondaries, *node.moves.copy_target())
        # The parts' bodies, for the data directory only (written after the merge).
        bodies: list[bytes] = []
        keep_bodies = node.disk is not None
        if targets or keep_bodies:
            parts = split_delta(delta, node.settings.checkpoint_part_keys)
            for index, (part, last) in enumerate(parts):
                body = encode_delta(part)
                if keep_bodies:
                    bodies.append(body)
                node.counters.checkpoint_bytes_sent += len(body) * len(targets)
                for target in targets:
                    node.peer_send(target, Checkpoint(*node.stamp, number, index, last, body))
                if not last:
                    yield
        # 3.
        while not node.store.merge_inactive(MERGE_KEYS_PER_STEP):
            yield
        node.counters.checkpoints += 1
        self.checkpointed_at = node.clock()
        # 4. On local disk too, with --data-dir (smr.node.disk).
        if node.disk is not None:
            try:
                node.disk.on_checkpoint(
                    node.store, node.view, node.ring.range_of(node.node_id), bodies
                )
            except OSError as error:
                node.counters.disk_errors += 1
                log.error("cannot write the state to %s: %s", node.disk.directory, error)
