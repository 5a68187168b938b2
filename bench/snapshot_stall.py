"""Snapshot stall: the longest a snapshot chunk holds a node's event loop.

A primary sends a secondary a full snapshot of its range in chunks (``NodeCore._snapshot_steps``,
one chunk per turn of the event loop), and the secondary applies each chunk on arrival; both
are synchronous work during which the node handles nothing else (no batch, no heartbeat, no
probe). This measures that work with real ``NodeCore`` objects in one process, without
sockets (sending is handing the frames over; the network adds nothing to the stall):

1. A primary ``n0`` of a two-node ring (r = 1, 2**14 slots) gets ``--keys`` distinct keys in
   its range (word-count state), through tuple batches of 1000 as a mapper sends them,
   then checkpoints.
2. Its secondary ``n1`` asks for a snapshot; the primary's background steps run one at a time
   and every message they send is delivered to ``n1`` at once.
3. Per chunk: the wall time of the primary's step (choosing the chunk's slots, reading,
   encoding, sending) and of the secondary's handling (decoding, applying). The node's own
   counter (``snapshot_stall_ms_max``, shown by ``smr status --json``) is read too.

Repeated ``--runs`` times for each ``snapshot_chunk_keys`` in ``--chunk-keys``; medians
with min-max. Results in ``bench/results/snapshot_stall.json``.

    python bench/snapshot_stall.py [--keys 100000] [--runs 3] [--chunk-keys 1000,5000,20000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from smr.api import Job  # noqa: E402
from smr.checkpoint.ids import MapperId  # noqa: E402 (needs the path set above)
from smr.node.core import NodeCore  # noqa: E402
from smr.node.settings import NodeSettings  # noqa: E402
from smr.ring.hashing import even_tokens, slot_of  # noqa: E402
from smr.ring.ids import NodeId  # noqa: E402
from smr.ring.placement import Ring  # noqa: E402
from smr.ring.view import Member, Status, View  # noqa: E402
from smr.sim.nodes import MemoryOutput  # noqa: E402
from smr.wire.batch_body import encode_batch_body  # noqa: E402
from smr.wire.codec import decode, encode  # noqa: E402
from smr.wire.kinds import ChannelNumber, StreamId  # noqa: E402
from smr.wire.messages import Batch  # noqa: E402
from smr.wire.peer import SnapshotChunk, SnapshotRequest  # noqa: E402

RESULTS = REPO / "bench" / "results"
SLOT_BITS = 14
BATCH_TUPLES = 1000


def _count(key: Any, value: Any, state: dict[str, Any], emit: Any) -> None:
    state["count"] = state.get("count", 0) + value


JOB = Job("count", map=lambda record, emit: None, reduce=_count)


class _QueueLinks:
    """Node links that queue peer messages for the benchmark to deliver by hand."""

    def __init__(self, queue: deque[tuple[NodeId, Sequence[bytes]]]) -> None:
        self._queue = queue

    def reply(self, identity: bytes, frames: Sequence[bytes]) -> bool:
        return True

    def send(self, node: NodeId, addr: str, frames: Sequence[bytes]) -> bool:
        self._queue.append((node, frames))
        return True

    def dropped(self, peers: Sequence[tuple[NodeId, str]]) -> list[NodeId]:
        return []


def run_once(keys: int, chunk_keys: int) -> dict[str, Any]:
    """Steps 1-3 once; the per-chunk stalls in ms and the nodes' own counters."""
    view = View(
        Member(NodeId(f"n{i}"), 1, f"inproc://n{i}", token, "", Status.UP, 1)
        for i, token in enumerate(even_tokens(2, SLOT_BITS))
    )
    queue: deque[tuple[NodeId, Sequence[bytes]]] = deque()
    settings = NodeSettings(replication=1, snapshot_chunk_keys=chunk_keys)
    cores = {
        NodeId(name): NodeCore(
            NodeId(name),
            JOB,
            view,
            SLOT_BITS,
            _QueueLinks(queue),
            MemoryOutput(name),
            settings=settings,
        )
        for name in ("n0", "n1")
    }
    primary, secondary = cores[NodeId("n0")], cores[NodeId("n1")]
    # 1.
    ring = Ring(view, SLOT_BITS)
    words: list[str] = []
    index = 0
    while len(words) < keys:
        word = f"key{index}"
        index += 1
        if ring.primary(slot_of(word, SLOT_BITS)) == "n0":
            words.append(word)
    seq_of_slot: dict[int, int] = {}
    for chan, start in enumerate(range(0, keys, BATCH_TUPLES), start=1):
        batch = words[start : start + BATCH_TUPLES]
        slots = [slot_of(w, SLOT_BITS) for w in batch]
        seqs = []
        for slot in slots:
            seq_of_slot[slot] = seq_of_slot.get(slot, 0) + 1
            seqs.append(seq_of_slot[slot])
        body = encode_batch_body(slots, seqs, batch, [1] * len(batch), [0.0] * len(batch))
        message = Batch(
            StreamId("s"),
            MapperId("m"),
            ChannelNumber(chan),
            ChannelNumber(1),
            view.epoch,
            len(batch),
            body,
        )
        primary.on_frames(b"mapper", encode(message))
        while primary.ingest.inbox:  # a turn applies at most APPLY_SECONDS_PER_TURN
            primary.ingest.apply_inbox(tuples_max=10**9)
    assert primary.store.key_count() == keys, primary.store.key_count()
    primary.checkpoints.checkpoint()
    queue.clear()
    # 2.
    secondary.peer_send(NodeId("n0"), SnapshotRequest(*secondary.stamp))
    send_ms: list[float] = []
    apply_ms: list[float] = []

    def deliver() -> None:
        while queue:
            dst, frames = queue.popleft()
            is_chunk = isinstance(decode(frames), SnapshotChunk)
            started = time.perf_counter()
            cores[dst].on_frames(b"peer", frames)
            if is_chunk:
                apply_ms.append((time.perf_counter() - started) * 1000)

    snapshot_started = time.perf_counter()
    deliver()
    while primary.snapshots.has_work:
        # 3.
        started = time.perf_counter()
        primary.snapshots.step()
        send_ms.append((time.perf_counter() - started) * 1000)
        deliver()
    snapshot_ms = (time.perf_counter() - snapshot_started) * 1000
    replica = secondary.replication.replicas[NodeId("n0")]
    assert replica.is_complete and replica.store.key_count() == keys
    return {
        "chunks": len(apply_ms),
        "snapshot_ms": snapshot_ms,
        "send_step_ms_max": max(send_ms),
        "send_step_ms_median": statistics.median(send_ms),
        "apply_chunk_ms_max": max(apply_ms),
        "apply_chunk_ms_median": statistics.median(apply_ms),
        "primary_snapshot_stall_ms_max": primary.snapshots.stall_ms_max,
        "secondary_snapshot_stall_ms_max": secondary.snapshots.stall_ms_max,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--chunk-keys", default="1000,5000,20000")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {"keys": args.keys, "slot_bits": SLOT_BITS, "cases": []}
    for chunk_keys in (int(text) for text in args.chunk_keys.split(",")):
        runs = [run_once(args.keys, chunk_keys) for _ in range(args.runs)]
        summary = {
            name: {
                "median": statistics.median(run[name] for run in runs),
                "min": min(run[name] for run in runs),
                "max": max(run[name] for run in runs),
            }
            for name in runs[0]
        }
        case = {"snapshot_chunk_keys": chunk_keys, "summary": summary, "runs": runs}
        results["cases"].append(case)
        worst = max(
            summary["primary_snapshot_stall_ms_max"]["median"],
            summary["secondary_snapshot_stall_ms_max"]["median"],
        )
        send, apply = summary["send_step_ms_max"], summary["apply_chunk_ms_max"]
        print(
            f"chunk_keys={chunk_keys:>6}: {summary['chunks']['median']:.0f} chunks, "
            f"snapshot {summary['snapshot_ms']['median']:.0f} ms; longest stall: "
            f"sending {send['median']:.1f} ms ({send['min']:.1f}-{send['max']:.1f}), "
            f"applying {apply['median']:.1f} ms ({apply['min']:.1f}-{apply['max']:.1f}); "
            f"median per chunk {summary['send_step_ms_median']['median']:.1f} / "
            f"{summary['apply_chunk_ms_median']['median']:.1f} ms; "
            f"node counter {worst:.1f} ms"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "snapshot_stall.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
