"""A node's tunables (:class:`NodeSettings`) and what it counts (:class:`NodeCounters`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeSettings:
    """A node's tunables; the defaults are those of docs/design/architecture.md."""

    replication: int = 0
    checkpoint_interval_ms: int = 1000
    heartbeat_interval_ms: int = 100
    failure_timeout_ms: int = 500
    probe_timeout_ms: int = 200
    # How long a silent node that answered no probe stays suspected before it is declared
    # dead (ring.failure, step 2c): it may refute, and other owners may vouch for it.
    suspicion_timeout_ms: int = 300
    # Extra silence allowed from a node never heard from yet (it may still be starting).
    first_contact_grace_ms: int = 5000
    # A node restored from disk holds pings, reads and batches until it has heard the view
    # of every other owner of its view, or this long at most (smr.node.restart, step 3): an
    # owner that did not come back never answers.
    restart_settle_ms: int = 3000
    # The nodes the operator left out of a restart from disk (``smr cluster up --without``):
    # a node restored from a crash waits for every other owner but these (smr.node.restart).
    restart_left_out: frozenset[str] = frozenset()
    # Raw batch bytes held for all primaries together. From EARLY_CHECKPOINT_AT_FRACTION of
    # it, the node asks its primaries for an early checkpoint (whose eviction makes room); at
    # the bound, new backup batches are not accepted (not acked) until checkpoints evict old
    # ones: the mappers wait.
    backup_bytes_max: int = 512 * 1024 * 1024
    # Keys per snapshot chunk: bounds how long one chunk keeps the event loop. Measured
    # (bench/snapshot_stall.py, 100 k word-count keys, 2-core machine at load 4-5): a chunk
    # of 5000 keys takes a median 35 ms to send and 25 ms to apply, the worst 70-80 ms
    # (preemption included); 1000 keys, 5 and 3 ms. The longest seen on a node is in its
    # status as snapshot_stall_ms_max.
    snapshot_chunk_keys: int = 5000
    # Keys per part of a checkpoint (checkpoint.delta.split_delta): a primary sends one part
    # a turn and a secondary applies each as it comes, so a big checkpoint stalls neither
    # loop. Measured on 2 cores (a delta of 20 k word-count keys): encoding and merging cost
    # the primary 2-3 µs a key, decoding and applying the secondary 2.5-3.5 µs; a part of
    # 1000 keys keeps a loop about 3 ms, the whole delta in one go 45-70 ms.
    checkpoint_part_keys: int = 250
    # A loop that reads no message for this long is reported stuck (a reduce call that does
    # not return); it is not declared dead: its heartbeats go on from their own thread.
    stuck_after_ms: int = 30_000
    # A node fenced (declared dead while alive) is capacity: this long after it rejoined on
    # standby it asks to join beside the node with the largest range (the one that took its
    # range over, most often), again every few seconds until it has joined. None: it stays
    # on standby until asked. The wait lets a node that was slow settle first.
    rejoin_after_fence_ms: int | None = 30_000
    # A windowed job: a mapper not heard from in a slot for this long stops holding the
    # slot's watermark back (docs/design/windows.md#a-slots-watermark).
    window_idle_timeout_ms: int = 10_000
    # Tuples applied per second at most (smr.node.rate_cap: emulates a smaller machine for
    # benchmarks and tests of autoscaling). None: as fast as the reducer goes.
    apply_rate_cap_per_s: float | None = None
    # A node admits into its inbox at most this long of work at its apply rate (its cap,
    # else what it measured) and stops reading beyond it (smr.node.ingest, step 6): a
    # saturated node holds little, so a move, join or takeover never waits seconds for a
    # queue to drain; the rest waits at the mappers (backpressure). None: batches only.
    admit_ms: int | None = 200
    # Neighbour balance (smr.node.balance): a node at least this busy (utilisation, 0 to 1)
    # for a few seconds moves a third of its load to its clockwise neighbour, which accepts
    # only if it is 0.3 less busy. None: off (moves come from operators and the autoscaler).
    balance_above: float | None = None
    # A node started on standby by itself (``smr node --join``: a compose replica, a host of
    # its own) asks to join this long after it started, beside the busiest owner, again
    # every few seconds until it has joined; the wait lets its gossip reach the ring first.
    # None: it stays on standby until an operator or the autoscaler asks it to join.
    join_after_start_ms: int | None = None
    # How long after a mapper said it finished its hwms are dropped (smr.node.retirement):
    # long enough for its checkpoints, moves and takeovers under way to settle.
    mapper_lease_ms: int = 600_000


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
    # Messages whose handler raised (not a bad frame): the node logged it and went on.
    handler_errors: int = 0
    # Pings, reads and batches left unanswered while a restart settled (smr.node.restart).
    held_while_settling: int = 0
    disk_errors: int = 0
    replies_dropped: int = 0
    checkpoints: int = 0
    # Bytes of the checkpoints sent to secondaries (and to a move's copy holder), each copy.
    checkpoint_bytes_sent: int = 0
    backup_batches: int = 0
    backup_refused_full: int = 0
    checkpoints_applied: int = 0
    # As a secondary: early checkpoints asked for; as a primary: early checkpoints taken.
    checkpoints_requested: int = 0
    checkpoints_early: int = 0
    # Checkpoints not taken because the output table could not commit (taken later).
    checkpoints_held: int = 0
    snapshots_sent: int = 0
    snapshots_received: int = 0
    # Snapshots aborted on arrival because a chunk of them was missing (then asked again).
    snapshot_chunks_missing: int = 0
    takeovers: int = 0
    # Slots found with no surviving copy at a takeover (loss beyond tolerance), marked lost.
    slots_lost: int = 0
    # Lost slots an operator brought back empty (smr recover --accept-loss).
    slots_loss_accepted: int = 0
    # Lost slots brought back with their state, from a node declared dead while alive.
    slots_restored: int = 0
    # Batches refused because a slot of theirs is offline (lost, not accepted yet).
    batches_refused_offline: int = 0
    # Views refused because applying them would serve a live node's slots with no takeover.
    views_refused: int = 0
    tuples_replayed: int = 0
    # Moves (smr.node.moves): given and done, received (promoted here), called off as the
    # giver; batches refused because a slot of theirs was being handed over.
    moves_given: int = 0
    moves_received: int = 0
    moves_called_off: int = 0
    batches_refused_moving: int = 0
    # Channels whose queued batches a move's freeze handed back to their mapper (Ingest 6a).
    batches_handed_back: int = 0
    peer_messages_dropped: int = 0
    # Bytes of the peer messages this node handed to its links (heartbeats, checkpoints,
    # snapshots, moves; tuples come from the feeders and are not counted).
    peer_bytes_sent: int = 0
    fenced: int = 0
    # Probe rounds that ended without an answer and without a quorum (see Recovery.judge).
    quorum_missed: int = 0
    # As a judge: suspicions begun, and those a vouch of another owner ended. As a subject:
    # suspicions of this node it refuted. As a helper: vouches sent for a suspect.
    suspicions: int = 0
    suspicions_vouched: int = 0
    suspicions_refuted: int = 0
    vouches_sent: int = 0
    # A windowed job (smr.node.windows): windows whose final result left, corrections that
    # left, tuples dropped as later than the allowed lateness.
    windows_closed: int = 0
    window_corrections: int = 0
    late_dropped: int = 0
