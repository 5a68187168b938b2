"""Node-to-node protocols driven in-process: several real NodeCores wired by a hand-run
message queue and a hand-moved clock, so a test can lose exactly the message it names."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from smr.api import Job
from smr.checkpoint.ids import MapperId
from smr.mapper.emitter import Emitter
from smr.node.core import NodeCore
from smr.node.replication import EVICT_SCANS_PER_STEP
from smr.node.settings import NodeSettings
from smr.ring.hashing import even_tokens, slot_of
from smr.ring.ids import NodeId
from smr.ring.placement import Ring, Role
from smr.ring.view import Member, Status, View, hand_over_all, successor_takes_over, with_status
from smr.sim.nodes import MemoryOutput
from smr.wire.batch_body import encode_batch_body
from smr.wire.codec import decode, encode, pack_body, unpack_body
from smr.wire.kinds import ChannelNumber, Kind, RequestId, StreamId
from smr.wire.messages import Batch, Message, NotOwner, ViewReply
from smr.wire.peer import (
    Checkpoint,
    Probe,
    SnapshotBegin,
    SnapshotChunk,
    SnapshotEnd,
    SnapshotRequest,
)
from tests.smr.links import CallbackLinks, RecordingTransport

SLOT_BITS = 8


def _count(key: Any, value: Any, state: dict[str, Any], emit: Any) -> None:
    state["count"] = state.get("count", 0) + value


JOB = Job("count", map=lambda record, emit: None, reduce=_count)

Lose = Callable[[str, str, Message], bool]


class Cluster:
    """NodeCores n0, n1, ... on even tokens; peer messages wait in one FIFO queue until
    ``deliver()``; ``lose(src, dst, message)`` picks messages that never arrive."""

    def __init__(self, nodes: int, replication: int, **settings: Any) -> None:
        self.now = 0.0
        tokens = even_tokens(nodes, SLOT_BITS)
        self.view = View(
            Member(NodeId(f"n{i}"), 1, f"sim://n{i}", token, "", Status.UP, 1)
            for i, token in enumerate(tokens)
        )
        self.queue: deque[tuple[str, str, Sequence[bytes]]] = deque()
        self.lose: Lose = lambda src, dst, message: False
        self.lost: list[tuple[str, str, Message]] = []
        self.delivered: list[tuple[str, str, Message]] = []
        self.replies: list[tuple[str, Message]] = []
        self.settings = NodeSettings(replication=replication, **settings)
        self.cores = {
            NodeId(f"n{i}"): NodeCore(
                NodeId(f"n{i}"),
                JOB,
                self.view,
                SLOT_BITS,
                CallbackLinks(self._replier(f"n{i}"), self._sender(f"n{i}")),
                MemoryOutput(f"n{i}"),
                clock=lambda: self.now,
                settings=self.settings,
            )
            for i in range(nodes)
        }
        self.seqs: dict[int, int] = {}
        self.chans: dict[str, int] = {}

    def _sender(self, src: str) -> Callable[[NodeId, Sequence[bytes]], bool]:
        def send(dst: NodeId, frames: Sequence[bytes]) -> bool:
            self.queue.append((src, dst, frames))
            return True

        return send

    def _replier(self, node: str) -> Callable[[bytes, Sequence[bytes]], bool]:
        def reply(identity: bytes, frames: Sequence[bytes]) -> bool:
            self.replies.append((node, decode(frames)))
            return True

        return reply

    def core(self, name: str) -> NodeCore:
        return self.cores[NodeId(name)]

    def deliver(self) -> None:
        """Deliver every queued peer message (and what they cause), running snapshot steps
        until none is left."""
        while True:
            while self.queue:
                src, dst, frames = self.queue.popleft()
                message = decode(frames)
                if self.lose(src, dst, message):
                    self.lost.append((src, dst, message))
                    continue
                self.delivered.append((src, dst, message))
                core = self.cores[NodeId(dst)]
                core.on_frames(f"peer:{src}".encode(), frames)
                core.ingest.apply_inbox()
                core.ingest.send_acks()
            busy = [core for core in self.cores.values() if core.snapshots.has_work]
            if not busy:
                return
            for core in busy:
                core.snapshots.step()

    def tick(self, seconds: float) -> None:
        """Move the clock on and run every node's tick, then deliver."""
        self.now += seconds
        for core in self.cores.values():
            core.tick()
        self.deliver()

    def checkpoint_all(self) -> None:
        for core in self.cores.values():
            core.checkpoints.checkpoint()
        self.deliver()

    def feed(self, words: list[str], mapper: str = "m") -> None:
        """Send one batch per primary of ``words`` (value 1 each) to its replica set, as an
        emitter does, and deliver."""
        ring = self.core("n0").ring
        by_primary: dict[NodeId, list[str]] = {}
        for word in words:
            by_primary.setdefault(ring.primary(slot_of(word, SLOT_BITS)), []).append(word)
        for primary, batch_words in by_primary.items():
            slots = [slot_of(w, SLOT_BITS) for w in batch_words]
            seqs = []
            for slot in slots:
                self.seqs[slot] = self.seqs.get(slot, 0) + 1
                seqs.append(self.seqs[slot])
            body = encode_batch_body(slots, seqs, batch_words, [1] * len(slots), [0.0] * len(slots))
            replicas = ring.replica_set_of(primary, self.settings.replication)
            for node in replicas:
                chan = self.chans.get(node, 0) + 1
                self.chans[node] = chan
                batch = Batch(
                    StreamId("s"),
                    MapperId(mapper),
                    ChannelNumber(chan),
                    ChannelNumber(1),
                    ring.view.epoch,
                    ",".join(replicas),
                    len(slots),
                    body,
                )
                core = self.cores[node]
                core.on_frames(b"mapper", encode(batch))
                core.ingest.apply_inbox()
                core.ingest.send_acks()
        self.deliver()


def words_of(core: NodeCore, candidates: int) -> list[str]:
    """The words among ``w0`` .. ``w{candidates - 1}`` whose primary is ``core``."""
    ring = core.ring
    return [
        w
        for w in (f"w{i}" for i in range(candidates))
        if ring.primary(slot_of(w, SLOT_BITS)) == core.node_id
    ]


def owned_state(core: NodeCore) -> dict[Any, Any]:
    roles = core.roles
    slots = [s for s in core.store.slots() if roles[s] == Role.PRIMARY]
    return {key: state for _, key, state in core.store.items(slots)}


def replica_state(holder: NodeCore, owner: NodeCore) -> dict[Any, Any]:
    replica = holder.replication.replicas[owner.node_id]
    roles = owner.roles
    slots = [s for s in replica.store.slots() if roles[s] == Role.PRIMARY]
    return {key: state for _, key, state in replica.store.items(slots)}


# -- view repair ------------------------------------------------------------------------------


def test_a_secondary_that_missed_the_gossip_of_a_takeover_catches_up_from_the_next_heartbeat() -> (
    None
):
    cluster = Cluster(3, replication=1)

    def lose(src: str, dst: str, message: Message) -> bool:
        # n0 is dead (nothing reaches it or comes from it); n1's gossip to n2 is lost.
        return "n0" in (src, dst) or ((src, dst) == ("n1", "n2") and message.kind is Kind.GOSSIP)

    cluster.lose = lose
    n1, n2 = cluster.core("n1"), cluster.core("n2")
    n1.recovery.take_over(NodeId("n0"))
    cluster.deliver()
    assert any(m.kind is Kind.GOSSIP for _, _, m in cluster.lost)
    assert n2.view.epoch < n1.view.epoch
    cluster.tick(n1.settings.heartbeat_interval_ms / 1000)
    assert n2.view == n1.view
    # Its roles follow the view: n1's grown range is backed up on n2.
    grown = n1.ring.range_of(NodeId("n1"))
    assert grown is not None and grown.contains(0)
    assert n2.roles[0] == Role.SECONDARY


def test_a_peer_message_from_a_node_with_an_older_view_is_answered_with_the_newer_view() -> None:
    cluster = Cluster(3, replication=1)
    n0, n1 = cluster.core("n0"), cluster.core("n1")
    newer = successor_takes_over(n1.view, NodeId("n2"))
    n1.membership.merge_view(newer)
    cluster.queue.clear()  # n1's own gossip of the change is lost
    assert n0.view.epoch < n1.view.epoch
    # Any message n0 sends n1 (here a probe) shows n1 that n0's view is older.
    n0.peer_send(NodeId("n1"), Probe(*n0.stamp, RequestId(1)))
    cluster.deliver()
    assert n0.view == n1.view


def test_a_pushed_view_giving_a_live_neighbours_range_away_without_a_takeover_is_refused() -> None:
    cluster = Cluster(3, replication=1)
    n0 = cluster.core("n0")
    before = n0.view
    forged = before.mark_dead(NodeId("n1"))  # n1's range would fall to n0, which holds none of it
    push = ViewReply(RequestId(0), forged.epoch, pack_body(forged.to_wire()))
    n0.on_frames(b"mapper", encode(push))
    assert n0.view == before
    assert n0.counters.views_refused == 1


def _unwired_core(node: str, view: View) -> NodeCore:
    """A NodeCore whose messages go nowhere, at time 0: for what one node does with a view."""
    return NodeCore(
        NodeId(node),
        JOB,
        view,
        SLOT_BITS,
        CallbackLinks(lambda identity, frames: True, lambda peer, frames: True),
        MemoryOutput(node),
        clock=lambda: 0.0,
        settings=NodeSettings(replication=1),
    )


def test_a_standby_node_started_from_a_stale_spec_accepts_the_view_moves_made() -> None:
    # Seen in the live autoscale benchmark: after joins and leaves, both original nodes sat
    # on other tokens than the cluster spec's (n1 had taken n2's range over on its leave);
    # a node added then started from the spec's tokens, so the true view looked as if n1
    # had grown into n0's range, and the new node refused every view: it never joined.
    stale = View(
        [
            Member(NodeId("n0"), 1, "sim://n0", 0, "", Status.UP, 1),
            Member(NodeId("n1"), 1, "sim://n1", 128, "", Status.UP, 1),
            Member(NodeId("n9"), 1, "sim://n9", 0, "", Status.STANDBY, 1),
        ]
    )
    true = View(
        [
            Member(NodeId("n0"), 1, "sim://n0", 165, "", Status.UP, 3),
            Member(NodeId("n1"), 1, "sim://n1", 213, "", Status.UP, 3),
            Member(NodeId("n9"), 1, "sim://n9", 0, "", Status.STANDBY, 1),
        ]
    )
    newcomer = _unwired_core("n9", stale)
    assert newcomer.membership.merge_view(true)
    assert newcomer.counters.views_refused == 0
    assert newcomer.ring.range_of(NodeId("n1")) == Ring(true, SLOT_BITS).range_of(NodeId("n1"))
    # The same view is refused by a serving node that holds the stale one: it owns a range,
    # so the defence stands.
    owner = _unwired_core("n0", stale)
    grown = View([*true.members.values()][1:2]).merge(stale)
    assert owner.membership.merge_view(grown) is False
    assert owner.counters.views_refused == 1


def test_a_view_marking_the_last_owner_dead_is_refused() -> None:
    cluster = Cluster(3, replication=2)
    n1 = cluster.core("n1")
    # n0 and n2 died and n1 took both over: it is the only owner left.
    alone = successor_takes_over(successor_takes_over(n1.view, NodeId("n0")), NodeId("n2"))
    assert n1.membership.merge_view(alone)
    assert Ring(n1.view, SLOT_BITS).owners == (NodeId("n1"),)
    forged = n1.view.mark_dead(NodeId("n1"))  # would leave the ring to nobody
    assert n1.membership.merge_view(forged) is False
    assert n1.counters.fenced == 0 and n1.counters.views_refused == 1


def test_a_leaving_owner_on_this_nodes_token_has_not_taken_it_over() -> None:
    cluster = Cluster(3, replication=1)
    n1 = cluster.core("n1")
    # n0 leaves: n1 moves onto n0's token, where n0 stays, leaving, until it is done.
    leaving = hand_over_all(with_status(n1.view, NodeId("n0"), Status.LEAVING), NodeId("n0"))
    assert leaving.members[NodeId("n1")].token == leaving.members[NodeId("n0")].token
    assert n1.membership.merge_view(leaving)
    forged = n1.view.mark_dead(NodeId("n1"))
    assert n1.membership.merge_view(forged) is False
    assert n1.counters.fenced == 0
    # Taken over for real (its successor on its token), it fences.
    n1.membership.merge_view(successor_takes_over(n1.view, NodeId("n1")))
    assert n1.counters.fenced == 1


def test_a_view_pushed_by_a_client_is_merged() -> None:
    cluster = Cluster(3, replication=1)
    n0 = cluster.core("n0")
    newer = successor_takes_over(n0.view, NodeId("n2"))
    push = ViewReply(RequestId(0), newer.epoch, pack_body(newer.to_wire()))
    n0.on_frames(b"mapper", encode(push))
    assert n0.view == newer
    assert n0.counters.bad_frames == 0


def test_a_not_owner_by_an_older_view_makes_the_emitter_send_its_view_and_is_no_progress() -> None:
    cluster = Cluster(3, replication=0)
    old_view = cluster.view
    new_view = successor_takes_over(old_view, NodeId("n2"))  # n2's range passes to n0
    now = [0.0]
    transport = RecordingTransport()
    emitter = Emitter(new_view, SLOT_BITS, MapperId("m"), clock=lambda: now[0], transport=transport)
    word = next(w for w in (f"w{i}" for i in range(1000)) if slot_of(w, SLOT_BITS) >= 200)
    emitter.emit(word, 1)
    emitter.flush()
    end = transport.ends["sim://n0"]
    (batch,) = [m for m in end.sent if isinstance(m, Batch)]
    channel = emitter._channels.get(NodeId("n0"))
    now[0] = 5.0
    # n0 still routes by the old view: it refuses the batch of n2's former range.
    not_owner = encode(
        NotOwner(emitter.stream_id, batch.chan, old_view.epoch, 0, 0, pack_body(old_view.to_wire()))
    )
    emitter._on_reply(channel, not_owner)
    pushed = [m for m in end.sent if isinstance(m, ViewReply)]
    assert len(pushed) == 1 and pushed[0].epoch == new_view.epoch
    assert View.from_wire(unpack_body(pushed[0].body)) == new_view
    assert channel.progress_at == 0.0  # the give-up timer keeps running
    assert emitter.views_pushed == 1
    # The view goes out before the batch is sent again, on the same channel.
    kinds = [m.kind for m in end.sent]
    assert kinds[-2:] == [Kind.VIEW, Kind.BATCH]
    # A node that merges it accepts the batch sent again.
    n0 = cluster.core("n0")
    n0.on_frames(b"m", encode(pushed[0]))
    assert n0.view == new_view
    assert n0.roles[slot_of(word, SLOT_BITS)] == Role.PRIMARY


# -- snapshots ----------------------------------------------------------------------------------


def test_a_snapshot_missing_a_chunk_is_not_completed_but_asked_again_and_ends_equal() -> None:
    cluster = Cluster(2, replication=1, snapshot_chunk_keys=5)
    n0, n1 = cluster.core("n0"), cluster.core("n1")
    words = words_of(n0, 400)
    assert len(words) > 40

    def lose_chunk_1_of_the_first_snapshot(src: str, dst: str, message: Message) -> bool:
        return (
            isinstance(message, SnapshotChunk)
            and message.index == 1
            and not any(isinstance(m, SnapshotChunk) for _, _, m in cluster.lost)
        )

    cluster.lose = lose_chunk_1_of_the_first_snapshot
    # n1 backs up the batch, creates its replica of n0 and asks for a snapshot: the first
    # one holds every key, in chunks of about 5 keys, and loses its chunk 1.
    cluster.feed(words)
    assert [m.index for _, _, m in cluster.lost if isinstance(m, SnapshotChunk)] == [1]
    assert len(cluster.lost) == 1
    replica = n1.replication.replicas[NodeId("n0")]
    assert replica.is_complete
    assert len(owned_state(n0)) == len(words)
    assert replica_state(n1, n0) == owned_state(n0)
    # It took two snapshots: the one with the hole (aborted), then the one asked again.
    assert n1.counters.snapshot_chunks_missing == 1
    assert n1.counters.snapshots_received == 1
    begun = [m for src, _, m in cluster.delivered if src == "n0" and isinstance(m, SnapshotBegin)]
    assert len(begun) == 2
    # Both ends timed the chunks they handled; status reports the longest.
    assert n0.snapshots.stall_ms_max > 0 and n1.snapshots.stall_ms_max > 0
    assert n1.status()["snapshot_stall_ms_max"] == round(n1.snapshots.stall_ms_max, 3)


def test_a_checkpoint_ships_a_part_per_turn_and_a_lost_part_is_repaired_by_a_snapshot() -> None:
    """The timer's checkpoint goes out a part per turn, tuples applied between its parts;
    the secondary applies each part and ends equal to the primary; a part lost on the way
    shows as a gap, and the snapshot asked for makes the replica equal again."""
    cluster = Cluster(2, replication=1, checkpoint_part_keys=10)
    n0, n1 = cluster.core("n0"), cluster.core("n1")
    words = words_of(n0, 400)
    assert len(words) > 100
    cluster.feed(words)
    assert n1.replication.replicas[NodeId("n0")].is_complete
    cluster.feed(words)
    # The timer's cycle: swapped now, shipped a step per turn.
    assert n0.checkpoints.start_checkpoint()
    steps = 0
    between: list[str] = []
    while n0.checkpoints.shipping:
        assert n0.has_work
        n0.checkpoints.step_shipping()
        steps += 1
        between.append(words[steps % len(words)])
        cluster.feed(between[-1:])
    parts = [m for src, _, m in cluster.delivered if src == "n0" and isinstance(m, Checkpoint)]
    assert len(parts) >= 5
    assert {m.number for m in parts} == {n0.checkpoints.checkpoint_number}
    assert [m.part for m in parts] == list(range(len(parts)))
    assert [m.last for m in parts] == [False] * (len(parts) - 1) + [True]
    assert steps >= len(parts)
    assert n0.store.inactive == {}
    assert n1.counters.checkpoints_applied == 1
    n0.checkpoints.checkpoint()
    cluster.deliver()
    assert replica_state(n1, n0) == owned_state(n0)

    # Part 1 of the next checkpoint is lost: the replica asks for a snapshot.
    cluster.lose = lambda src, dst, message: (
        isinstance(message, Checkpoint) and (message.part == 1 and not cluster.lost)
    )
    cluster.feed(words)
    n0.checkpoints.checkpoint()
    cluster.deliver()
    assert [(type(m), m.part) for _, _, m in cluster.lost] == [(Checkpoint, 1)]  # type: ignore[attr-defined]
    begun = [m for src, _, m in cluster.delivered if src == "n0" and isinstance(m, SnapshotBegin)]
    assert len(begun) == 2
    assert n1.replication.replicas[NodeId("n0")].is_complete
    assert replica_state(n1, n0) == owned_state(n0)
    assert owned_state(n0) == {w: {"count": 3 + between.count(w)} for w in words}


def test_a_secondary_evicts_what_a_checkpoint_covers_a_step_per_turn() -> None:
    """After a checkpoint's last part the secondary still holds the batches it covers, and
    has work: each eviction step scans a bounded number of them, until none is left."""
    cluster = Cluster(2, replication=1)
    n0, n1 = cluster.core("n0"), cluster.core("n1")
    words = words_of(n0, 400)
    for index in range(3 * EVICT_SCANS_PER_STEP + 2):
        cluster.feed(words[index % len(words) :][:5])
    backup = n1.replication.backups[NodeId("n0")]
    batches = backup.batch_count
    assert batches > 3 * EVICT_SCANS_PER_STEP
    n0.checkpoints.checkpoint()
    cluster.deliver()
    assert n1.counters.checkpoints_applied == 1
    assert backup.batch_count == batches and n1.replication.evicting and n1.has_work
    steps = 0
    while n1.replication.evicting:
        before = backup.batch_count
        n1.replication.step_eviction()
        assert before - backup.batch_count <= EVICT_SCANS_PER_STEP
        steps += 1
    assert steps == -(-batches // EVICT_SCANS_PER_STEP)
    assert backup.batch_count == 0 and not n1.has_work
    assert replica_state(n1, n0) == owned_state(n0)


def test_a_node_fenced_mid_checkpoint_stops_shipping_and_its_fenced_copy_keeps_every_key() -> None:
    cluster = Cluster(3, replication=1, checkpoint_part_keys=5)
    n1 = cluster.core("n1")
    words = words_of(n1, 600)
    cluster.feed(words)
    expected = owned_state(n1)
    assert len(expected) == len(words)
    assert n1.checkpoints.start_checkpoint()
    n1.checkpoints.step_shipping()
    assert n1.checkpoints.shipping and n1.store.inactive
    fenced = n1.store
    n1.membership.merge_view(successor_takes_over(n1.view, NodeId("n1")))
    assert n1.counters.fenced == 1
    # The next incarnation ships nothing of the old one's store; the fenced copy, with its
    # checkpoint half merged, still reads every key.
    assert not n1.checkpoints.shipping and not n1.has_work
    assert n1.handoff.holds_copy
    assert {key: state for _, key, state in fenced.items()} == expected


def test_a_node_started_a_moment_ago_is_known_to_the_node_it_asks_to_join_beside() -> None:
    # Seen in the live autoscale benchmark: a node asked to join right after it started was
    # not in the giver's view yet, so the giver dropped the ask as from an unknown node and
    # the join waited for the joiner's retry (the controller had given up on it by then).
    cluster = Cluster(2, replication=1)
    standby = Member(NodeId("n9"), 1, "sim://n9", 0, "", Status.STANDBY, 1)
    newcomer = NodeCore(
        NodeId("n9"),
        JOB,
        View([*cluster.view.members.values(), standby]),
        SLOT_BITS,
        CallbackLinks(cluster._replier("n9"), cluster._sender("n9")),
        MemoryOutput("n9"),
        clock=lambda: cluster.now,
        settings=cluster.settings,
    )
    cluster.cores[NodeId("n9")] = newcomer
    assert cluster.core("n0").view.get(NodeId("n9")) is None
    newcomer.moves.joins.request(NodeId("n0"))
    cluster.deliver()
    # The first ask got an offer, and the join ran to its end: n9 serves a range.
    assert cluster.core("n0").ring.range_of(NodeId("n9")) is not None
    assert newcomer.ring.range_of(NodeId("n9")) is not None


def test_a_primary_lost_before_its_first_snapshot_ends_is_taken_over_whole() -> None:
    # A new cluster: n1's replica of n0 starts as n0's empty start, complete at checkpoint
    # 0. n0's first snapshot is lost; its checkpoint 1 arrives; a snapshot begun past it
    # (as of checkpoint 1) loses its end: n0 died before it ended. n1 must still cover
    # n0's range and take it over exactly (it applied checkpoint 1, and its backup holds
    # every batch past it); a replica that ignored checkpoint 1 would cover nothing.
    cluster = Cluster(2, replication=1, snapshot_chunk_keys=5)
    n0, n1 = cluster.core("n0"), cluster.core("n1")
    words = words_of(n0, 400)

    def lose_the_first_snapshot_and_every_end(src: str, dst: str, message: Message) -> bool:
        first = isinstance(message, (SnapshotBegin, SnapshotChunk, SnapshotEnd)) and (
            message.snap == 1
        )
        return src == "n0" and (first or isinstance(message, SnapshotEnd))

    cluster.lose = lose_the_first_snapshot_and_every_end
    cluster.feed(words[:20])
    cluster.checkpoint_all()
    cluster.feed(words[20:])
    # A snapshot as of checkpoint 1 begins at n1 (asked for, or on a request), never ends.
    cluster.queue.append(("n1", "n0", encode(SnapshotRequest(*n1.stamp))))
    cluster.deliver()
    begun = [m for src, _, m in cluster.delivered if src == "n0" and isinstance(m, SnapshotBegin)]
    assert [m.as_of for m in begun] == [1]
    expected = owned_state(n0)
    assert len(expected) == len(words)
    n1.recovery.take_over(NodeId("n0"))
    assert n1.counters.slots_lost == 0
    assert owned_state(n1) == expected
