"""A subscription across a node's death, driven by scripted node answers over real output
files: the nodes write through :class:`smr.output.files.OutputSink` and answer reads with its own
``read`` and ``read_of`` (only the network hop is left out). Whatever the schedule of
writes, checkpoints, reads and the death, the subscription returns every record the files
hold, each origin once, or names the dead node: never passes over a record in silence."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smr.client import subscription as subscription_module
from smr.client.control import NodeRefused, NodeUnreachable
from smr.client.subscription import Subscription
from smr.output.files import OutputFiles, OutputGone, OutputMissing, OutputSink
from smr.output.records import parse_line
from smr.ring.ids import NodeId, Token
from smr.ring.view import Member, Status, View
from smr.wire.kinds import RequestId
from smr.wire.reads import OutputReply

NODES = ("a", "b", "c")
VICTIM, TAKER = "b", "c"


class Ring:
    """Three nodes writing real output files (in one directory, or each in its own: nodes
    on separate disks), answering reads as a node's control handler does, by address."""

    def __init__(self, root: Path, shared_disk: bool) -> None:
        self.sinks = {
            node: OutputSink(
                node,
                root / ("output" if shared_disk else f"disk-{node}") / f"{node}.jsonl",
                lambda frames: None,
            )
            for node in NODES
        }
        self.answering = set(NODES)
        self.status = dict.fromkeys(NODES, Status.UP)
        self.applied = dict.fromkeys(NODES, 0)
        self.checkpointed = 0  # the victim's tuples its last checkpoint covered

    def view(self, refresh: bool = False) -> View:
        return View(
            Member(NodeId(node), 1, f"tcp://{node}", Token(100 * i), "", self.status[node], 1)
            for i, node in enumerate(NODES)
        )

    def apply(self, node: str, tuples: int, slot: int | None = None) -> None:
        """``node`` applies ``tuples`` more tuples of its own stream, a record each."""
        first = self.applied[node]
        self.applied[node] += tuples
        slot = NODES.index(node) if slot is None else slot
        self.sinks[node].extend(
            [(f"k{seq}", seq, "m", slot, seq, 0) for seq in range(first + 1, first + tuples + 1)]
        )

    def output_each(
        self, offsets: dict[str, int], max_bytes: int, of: dict[str, str] | None = None
    ) -> dict[str, Any]:
        replies: dict[str, Any] = {}
        for addr, offset in offsets.items():
            node = addr.removeprefix("tcp://")
            if node not in self.answering:
                replies[addr] = NodeUnreachable(f"{node} does not answer")
                continue
            sink = self.sinks[node]
            try:
                if of and addr in of:
                    lines, next_offset, size = sink.read_of(of[addr], offset, max_bytes)
                else:
                    lines, next_offset, size = sink.read(offset, max_bytes)
            except (OutputGone, OutputMissing) as error:
                replies[addr] = NodeRefused(str(error))
                continue
            replies[addr] = OutputReply(RequestId(1), next_offset, size, lines)
        return replies

    def every_origin(self) -> set[tuple[Any, ...]]:
        """What ``smr output`` reads from every node's file (each origin once)."""
        directories = {sink.path.parent for sink in self.sinks.values()}
        return {tuple(r["origin"]) for d in directories for r in OutputFiles(d)}

    def only_in_file_of(self, node: str) -> set[tuple[Any, ...]]:
        """The origins of records that only ``node``'s file holds."""

        def origins(path: Path) -> set[tuple[Any, ...]]:
            lines = path.read_text().splitlines()
            return {tuple(parse_line(line)["origin"]) for line in lines if parse_line(line)}

        others = set().union(*(origins(s.path) for n, s in self.sinks.items() if n != node))
        return origins(self.sinks[node].path) - others


@dataclass
class Reader:
    subscription: Subscription
    origins: list[tuple[Any, ...]] = field(default_factory=list)

    def take(self, count: int) -> None:
        """Read up to ``count`` records (fewer if the subscription runs idle)."""
        for _ in range(count):
            try:
                record = next(self.subscription)
            except StopIteration:
                return
            assert record.origin is not None
            self.origins.append(record.origin)

    def drain(self) -> None:
        self.take(1 << 30)


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A pass per call, no pause between passes, every holder asked again at once; reads of
    # a few lines, so that a reader is often behind a file.
    monkeypatch.setattr(subscription_module, "OUTPUT_POLL_S", 0.0)
    monkeypatch.setattr(subscription_module, "HOLDER_PROBE_S", 0.0)
    monkeypatch.setattr(subscription_module, "OUTPUT_READ_BYTES", 200)
    yield


def subscribe(ring: Ring) -> Reader:
    return Reader(Subscription(ring.view, ring, "start", idle_timeout_s=0.0))  # type: ignore[arg-type]


before_death = st.lists(
    st.one_of(
        st.tuples(st.just("apply"), st.sampled_from(NODES), st.integers(1, 8)),
        st.tuples(st.just("tick"), st.sampled_from(NODES), st.just(0)),
        st.tuples(st.just("checkpoint"), st.just(VICTIM), st.just(0)),
        st.tuples(st.just("read"), st.just(""), st.integers(0, 12)),
    ),
    max_size=20,
)


def run_schedule(
    ring: Ring, reader: Reader, steps: list[tuple[str, str, int]], silent_reads: list[int]
) -> None:
    """Play ``steps``, then kill the victim: it stops answering (records it had not
    written are lost with it), the reader goes on ``silent_reads`` times before the view
    says it is dead, then its taker replays every tuple past its last checkpoint and both
    live nodes apply more; the reader reads to the end."""
    for action, node, count in steps:
        if action == "apply":
            ring.apply(node, count)
        elif action == "tick":
            ring.sinks[node].flush()
        elif action == "checkpoint":
            assert ring.sinks[VICTIM].make_durable()
            ring.checkpointed = ring.applied[VICTIM]
        else:
            reader.take(count)
    ring.answering.discard(VICTIM)
    for count in silent_reads:
        reader.take(count)
    ring.status[VICTIM] = Status.DEAD
    victim_slot = NODES.index(VICTIM)
    replayed = ring.applied[VICTIM] - ring.checkpointed
    ring.sinks[TAKER].extend(
        [
            (f"k{seq}", seq, "m", victim_slot, seq, 0)
            for seq in range(ring.checkpointed + 1, ring.checkpointed + replayed + 1)
        ]
    )
    ring.apply(TAKER, 3)
    ring.apply("a", 2)
    for node in ("a", TAKER):
        ring.sinks[node].flush()
    reader.drain()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=before_death, silent_reads=st.lists(st.integers(0, 6), max_size=3))
def test_over_a_shared_disk_every_record_of_a_dead_node_is_returned_once(
    steps: list[tuple[str, str, int]], silent_reads: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        ring = Ring(Path(root), shared_disk=True)
        reader = subscribe(ring)
        run_schedule(ring, reader, steps, silent_reads)
        assert len(reader.origins) == len(set(reader.origins)), "an origin returned twice"
        assert set(reader.origins) == ring.every_origin()
        assert reader.subscription.unread_of_dead == {}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=before_death, silent_reads=st.lists(st.integers(0, 6), max_size=3))
def test_over_separate_disks_a_dead_node_not_read_to_its_end_is_named(
    steps: list[tuple[str, str, int]], silent_reads: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as root:
        ring = Ring(Path(root), shared_disk=False)
        reader = subscribe(ring)
        run_schedule(ring, reader, steps, silent_reads)
        subscription = reader.subscription
        assert len(reader.origins) == len(set(reader.origins)), "an origin returned twice"
        missing = ring.every_origin() - set(reader.origins)
        # Only records that the dead node's file alone holds can be missing, and then it is
        # named, with no more bytes than its file holds past the subscription's position.
        assert missing <= ring.only_in_file_of(VICTIM)
        if missing:
            assert VICTIM in subscription.unread_of_dead
        if VICTIM in subscription.unread_of_dead:
            unread = ring.sinks[VICTIM].path.stat().st_size - subscription.position[VICTIM]
            assert 0 <= subscription.unread_of_dead[VICTIM] <= unread
        assert set(subscription.unread_of_dead) <= {VICTIM}


# The victim writes three records, the reader reads them all (the victim's last answer),
# then the victim writes four more and a checkpoint covers them: its taker will not replay
# them, so they are in its file only.
ANSWERED_THEN_CHECKPOINTED = [
    ("apply", VICTIM, 3),
    ("tick", VICTIM, 0),
    ("read", "", 10),
    ("apply", VICTIM, 4),
    ("checkpoint", VICTIM, 0),
]


def test_a_dead_node_read_after_its_last_answer_and_covered_by_a_checkpoint_is_returned(
    tmp_path: Path,
) -> None:
    # The case that was lost in silence: what it wrote after its last answer.
    ring = Ring(tmp_path, shared_disk=True)
    reader = subscribe(ring)
    run_schedule(
        ring,
        reader,
        ANSWERED_THEN_CHECKPOINTED,
        silent_reads=[5],
    )
    assert sorted(origin[2] for origin in reader.origins if origin[1] == 1) == list(range(1, 8))
    assert reader.subscription.unread_of_dead == {}


def test_a_dead_node_whose_file_no_live_node_holds_is_named_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ring = Ring(tmp_path, shared_disk=False)
    reader = subscribe(ring)
    with caplog.at_level(logging.WARNING, logger="smr.connection"):
        run_schedule(
            ring,
            reader,
            ANSWERED_THEN_CHECKPOINTED,
            silent_reads=[],
        )
    # Its last four records are in its file only: not returned, and it is named.
    assert sorted(origin[2] for origin in reader.origins if origin[1] == 1) == [1, 2, 3]
    assert VICTIM in reader.subscription.unread_of_dead
    assert "node b is dead and no live node holds its output file" in caplog.text
    # Once its file can be read (a live node's disk holds it), it is read and the name is
    # taken back.
    (ring.sinks["a"].path.parent / "b.jsonl").symlink_to(ring.sinks[VICTIM].path)
    reader.drain()
    assert sorted(origin[2] for origin in reader.origins if origin[1] == 1) == list(range(1, 8))
    assert reader.subscription.unread_of_dead == {}


def test_from_now_a_silent_node_is_placed_at_its_end_through_a_node_holding_its_file(
    tmp_path: Path,
) -> None:
    ring = Ring(tmp_path, shared_disk=True)
    ring.apply(VICTIM, 3)
    ring.sinks[VICTIM].flush()
    ring.answering.discard(VICTIM)  # paused as the subscription begins
    reader = Reader(Subscription(ring.view, ring, "end", idle_timeout_s=0.0))  # type: ignore[arg-type]
    ring.answering.add(VICTIM)
    ring.apply(VICTIM, 2)
    ring.sinks[VICTIM].flush()
    reader.drain()
    assert [origin[2] for origin in reader.origins] == [4, 5]


def test_from_now_a_node_dead_before_is_not_named_and_is_followed_once_it_is_back(
    tmp_path: Path,
) -> None:
    ring = Ring(tmp_path, shared_disk=False)
    ring.apply(VICTIM, 3)
    ring.sinks[VICTIM].flush()
    ring.answering.discard(VICTIM)
    ring.status[VICTIM] = Status.DEAD
    reader = Reader(Subscription(ring.view, ring, "end", idle_timeout_s=0.0))  # type: ignore[arg-type]
    reader.drain()
    assert reader.origins == [] and reader.subscription.unread_of_dead == {}
    # It rejoins (a new incarnation, the same file): all its file holds is read, nothing
    # it wrote since it came back skipped.
    ring.answering.add(VICTIM)
    ring.status[VICTIM] = Status.UP
    ring.apply(VICTIM, 1)
    ring.sinks[VICTIM].flush()
    reader.drain()
    assert [origin[2] for origin in reader.origins] == [1, 2, 3, 4]
