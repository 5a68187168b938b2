"""The primary's checkpoint cycle (``smr.node.checkpoints``) alone, through what it receives
(``CycleNode``): each checkpoint is numbered one past the last, sent whole to every
secondary (its parts in order, the last one marked), and merged into master; none begins
while the output cannot be made durable."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from smr.checkpoint.delta import decode_delta
from smr.checkpoint.store import StateStore
from smr.node.checkpoints import CheckpointCycle
from smr.ring.ids import NodeId, Slot
from smr.wire.peer import Checkpoint
from tests.smr.node.fakes import FakeNode, three_node_view


def _cycle(durable: list[bool]) -> tuple[Any, CheckpointCycle]:
    node: Any = FakeNode(three_node_view(), checkpoint_part_keys=1)
    node.store = StateStore()
    node.output = SimpleNamespace(make_durable=lambda: durable[0])
    node.disk = None
    node.moves = SimpleNamespace(copy_target=lambda: ())
    return node, CheckpointCycle(node)


def test_checkpoints_are_numbered_sent_whole_to_each_secondary_and_merged() -> None:
    node, cycle = _cycle([True])
    for key, slot in (("x", 3), ("y", 4)):
        node.store.commit(Slot(slot), key, {}, {"count": 1})
    assert cycle.checkpoint()
    sent = node.sent_of(Checkpoint)
    assert {peer for peer, _ in sent} == set(node.secondaries) == {NodeId("b")}
    parts = [message for _, message in sent]
    assert [(m.number, m.part, m.last) for m in parts] == [(1, 0, False), (1, 1, True)]
    shipped = [decode_delta(m.body, max_bytes=len(m.body)) for m in parts]
    assert sorted(slot for delta in shipped for slot in delta.states) == [3, 4]
    assert node.store.get(Slot(3), "x") == {"count": 1}  # merged into master
    assert cycle.checkpoint() and node.sent_of(Checkpoint)[-1][1].number == 2


def test_no_checkpoint_begins_while_the_output_cannot_be_made_durable() -> None:
    durable = [False]
    node, cycle = _cycle(durable)
    node.store.commit(Slot(3), "x", {}, {"count": 1})
    assert not cycle.checkpoint()
    assert not node.sent and node.counters.checkpoints_held == 1
    durable[0] = True
    assert cycle.checkpoint() and node.sent_of(Checkpoint)[0][1].number == 1
