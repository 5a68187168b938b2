"""The autoscale controller's own rules, without node processes: a node whose join fails is
stopped rather than offered again."""

from __future__ import annotations

from pathlib import Path

import pytest

from ring.ids import NodeId, Token
from smr import ring_ops
from smr.autoscale.controller import Controller
from smr.autoscale.observe import Decision
from smr.autoscale.policies import PolicyRunner
from smr.spec import NodeSpec


class Provisioner:
    """Hands out n5, n6, ...; records what it was asked to stop."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.stopped: list[str] = []

    def start(self, zone: str | None = None) -> NodeSpec:
        node_id = f"n{5 + len(self.started)}"
        self.started.append(node_id)
        return NodeSpec(NodeId(node_id), "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", Token(0))

    def stop(self, node_id: str) -> None:
        self.stopped.append(node_id)

    def nodes(self) -> list[NodeSpec]:
        return []


def test_a_node_whose_join_fails_is_stopped_and_the_next_scale_out_starts_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def join(*args: object) -> str:
        raise ring_ops.RingOpError("the join of n5 is off")

    monkeypatch.setattr(ring_ops, "join", join)
    provisioner = Provisioner()
    controller = Controller(tmp_path, PolicyRunner("thresholds"), 1, 4, provisioner=provisioner)
    try:
        controller.act(Decision(4, "test"), 2)
    finally:
        controller.close()
    assert provisioner.started == ["n5", "n6"]
    assert provisioner.stopped == ["n5", "n6"]
    assert [a["ok"] for a in controller.actions] == [False, False]
    assert "the join of n5 is off" in controller.actions[0]["outcome"]
