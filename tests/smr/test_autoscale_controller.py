"""The autoscale controller's own rules, without node processes: the nodes of a scale-out
join side by side, and a node whose join fails is stopped rather than offered again; a silent
node is a gap in the figures until the ring took it over; no release starts once the
controller is asked to stop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from smr.autoscale.controller import Controller
from smr.autoscale.observe import Decision
from smr.autoscale.policies import PolicyRunner
from smr.client.control import NodeUnreachable
from smr.cluster import ring_ops
from smr.ring.ids import NodeId, Token
from smr.spec.model import ClusterSpec, NodeSpec
from smr.spec.parse import write_spec


class Provisioner:
    """Hands out n5, n6, ...; records what it was asked to stop."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.stopped: list[str] = []

    def start(self, zone: str | None = None) -> NodeSpec:
        node_id = f"n{5 + len(self.started)}"
        self.started.append(node_id)
        return NodeSpec(NodeId(node_id), "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", Token(0))

    def start_many(self, count: int) -> list[NodeSpec]:
        return [self.start() for _ in range(count)]

    def stop(self, node_id: str) -> None:
        self.stopped.append(node_id)

    def nodes(self) -> list[NodeSpec]:
        return []


def test_the_nodes_of_a_scale_out_join_together_and_those_whose_join_fails_are_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[list[str]] = []

    def join_together(cluster_dir: Path, nodes: list[NodeSpec], *args: object) -> list[object]:
        asked.append([node.id for node in nodes])
        return ["joined", ring_ops.RingOpError("the join of n6 is off")]

    monkeypatch.setattr(ring_ops, "join_together", join_together)
    provisioner = Provisioner()
    controller = Controller(tmp_path, PolicyRunner("thresholds"), 1, 4, provisioner=provisioner)
    try:
        controller.act(Decision(4, "test"), 2)
    finally:
        controller.close()
    # Both nodes join in one go (side by side), not one after the other.
    assert asked == [["n5", "n6"]]
    assert provisioner.stopped == ["n6"]
    assert [a["ok"] for a in controller.actions] == [True, False]
    assert "the join of n6 is off" in controller.actions[1]["outcome"]


def _row(node: str, dead: tuple[str, ...] = ()) -> dict[str, object]:
    """A serving node's status, as far as the controller reads it."""
    return {
        "node": node,
        "role": "serving",
        "moves": {"under_way": []},
        "status_in_view": "up",
        "tuples_applied": 0,
        "inbox_tuples": 0,
        "tuples_per_s": 0.0,
        "utilization": 0.1,
        "dead_in_view": list(dead),
    }


def test_a_silent_node_is_a_gap_until_the_ring_took_it_over_then_it_is_gone(
    tmp_path: Path,
) -> None:
    nodes = [
        NodeSpec(
            NodeId(f"n{i}"), f"tcp://127.0.0.1:{10 + i}", f"tcp://127.0.0.1:{20 + i}", Token(i)
        )
        for i in range(3)
    ]
    write_spec(tmp_path, ClusterSpec(8, 1, "examples.wordcount:job", nodes))
    answers: list[dict[str, object]] = []
    now = [0.0]
    controller = Controller(
        tmp_path, PolicyRunner("thresholds"), 1, 4, provisioner=Provisioner(), clock=lambda: now[0]
    )
    controller._client.status_each = lambda addrs: {  # type: ignore[method-assign]
        addr: answer for addr, answer in zip(addrs, answers, strict=True)
    }
    try:
        answers[:] = [_row("n0"), _row("n1"), _row("n2")]
        assert [r.node for r in controller.observe().nodes] == ["n0", "n1", "n2"]
        # n1 stops answering: its last report stays (a gap in the figures), not a smaller ring.
        now[0] = 1.0
        answers[:] = [_row("n0"), NodeUnreachable("n1"), _row("n2")]
        seen = controller.observe()
        assert [r.node for r in seen.nodes] == ["n0", "n1", "n2"]
        assert seen.nodes[1].reported_at_s == 0.0
        # The ring took it over: it is gone at once, not after UNANSWERED_KEPT_S.
        now[0] = 2.0
        answers[:] = [_row("n0", ("n1",)), NodeUnreachable("n1"), _row("n2")]
        assert [r.node for r in controller.observe().nodes] == ["n0", "n2"]
    finally:
        controller.close()


def test_the_controller_releases_no_further_node_once_asked_to_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopping = threading.Event()
    moved: list[str] = []

    def move(cluster_dir: Path, node_id: str, *args: object) -> str:
        moved.append(node_id)
        stopping.set()  # asked to stop while the first node leaves
        return "left"

    monkeypatch.setattr(ring_ops, "move", move)
    monkeypatch.setattr(ring_ops, "wait_replicated", lambda *args: None)
    provisioner = Provisioner()
    controller = Controller(tmp_path, PolicyRunner("thresholds"), 1, 4, provisioner=provisioner)
    try:
        controller.act(Decision(1, "test", (NodeId("n2"), NodeId("n1"))), 3, stopping)
    finally:
        controller.close()
    assert moved == ["n2"]
    assert provisioner.stopped == ["n2"]
    assert [a["action"] for a in controller.actions] == ["release n2"]
