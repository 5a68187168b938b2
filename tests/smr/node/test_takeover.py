"""The takeover and fencing (``smr.node.takeover``) alone, through what they receive
(``TakeoverNode``): a node restored from a crash whose possible taker was left out of the
restart counts its whole range and its state lost, keeping the state, and drops its copies;
a node marked dead keeps what it served as a fenced copy and rejoins empty on standby."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.takeover import Takeover
from smr.ring.ids import NodeId, Slot
from smr.ring.view import Status
from tests.smr.node.fakes import FakeNode, three_node_view

B = NodeId("b")


class _Resets:
    """A role of which the takeover asks only ``reset`` (and ``surrender``: none here)."""

    def __init__(self) -> None:
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1


def _node(state: dict[int, dict[str, int]]) -> tuple[Any, Takeover]:
    node: Any = FakeNode(three_node_view())
    node.store = StateStore()
    for slot, keys in state.items():
        for key, count in keys.items():
            node.store.commit(Slot(slot), key, {}, {"count": count})
    node.ledger = LossLedger()
    node.ledger.rebuild(node.store)
    node.replication, node.snapshots = _Resets(), _Resets()
    node.checkpoints, node.ingest, node.moves = _Resets(), _Resets(), _Resets()
    node.disk = None
    node.handoff = SimpleNamespace(keep=lambda store, incarnation: None)
    node.membership = SimpleNamespace(gossip=lambda: None)
    return node, Takeover(node)


def test_a_crashed_node_whose_taker_was_left_out_counts_its_range_and_state_lost() -> None:
    # a owns [0, 85); its disk held state for slot 3 and, from before a move, slot 200.
    node, takeover = _node({3: {"x": 5}, 200: {"y": 1}})
    takeover.doubt_restored_state([])  # nobody left out: nothing to doubt
    assert node.ledger.count() == 0 and node.replication.resets == 0
    takeover.doubt_restored_state([B])
    own = set(range(85))
    assert node.ledger.lost_among(own | {200}) == own | {200}  # empty slots of its range too
    assert node.counters.slots_lost == 86
    assert node.store.get(Slot(3), "x") == {"count": 5}  # kept, not served
    assert node.replication.resets == 1 and node.snapshots.resets == 1  # copies dropped


def test_a_fenced_node_keeps_what_it_served_and_rejoins_empty_on_standby() -> None:
    node, takeover = _node({3: {"x": 5}})
    kept: list[StateStore] = []
    node.handoff = SimpleNamespace(keep=lambda store, incarnation: kept.append(store))
    node.now = 7.0
    takeover.fence()
    assert kept and kept[0].get(Slot(3), "x") == {"count": 5}
    assert node.store.key_count() == 0 and takeover.fenced_at == 7.0
    me = node.view.get(node.node_id)
    assert me.status is Status.STANDBY and me.incarnation == 2
    assert node.counters.fenced == 1
    # Fenced, it owns and holds nothing: a doubt after it changes nothing.
    takeover.doubt_restored_state([B])
    assert node.ledger.count() == 0
