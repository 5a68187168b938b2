"""The control (``smr.node.control``) alone, through what it receives (``ControlNode``): it
answers a ping with the node's id and a status request with the node's figures, gathered from
each role's report, and counts a secondary missing as under-replicated slots."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from smr.checkpoint.loss import LossLedger
from smr.checkpoint.store import StateStore
from smr.node.control import Control
from smr.node.load import LoadMeter
from smr.node.ports import Backlog
from smr.ring.ids import NodeId
from smr.wire.codec import unpack_body
from smr.wire.kinds import RequestId
from smr.wire.messages import Ping, Pong, StatusReply, StatusRequest
from tests.smr.node.fakes import FakeNode, three_node_view


def _control_alone(secondaries_missing: bool = False) -> tuple[FakeNode, Control]:
    node = FakeNode(three_node_view())
    if secondaries_missing:
        node.secondaries = ()
    report: Any = lambda *args: {}  # noqa: E731
    node.cluster_info = {}  # type: ignore[attr-defined]
    node.transport_counters = dict  # type: ignore[attr-defined]
    node.store = StateStore()  # type: ignore[attr-defined]
    node.ledger = LossLedger()  # type: ignore[attr-defined]
    node.load = LoadMeter(node.clock)  # type: ignore[attr-defined]
    node.disk = None  # type: ignore[attr-defined]
    node.output = SimpleNamespace(records_written=7, table=None)  # type: ignore[attr-defined]
    node.utilization = lambda: 0.25  # type: ignore[attr-defined]
    node.ingest = SimpleNamespace(  # type: ignore[attr-defined]
        backlog=lambda: Backlog(3, False), report=report
    )
    node.handoff = SimpleNamespace(holds_copy=False)  # type: ignore[attr-defined]
    node.retirement = SimpleNamespace(report=report)  # type: ignore[attr-defined]
    node.restart = SimpleNamespace(settling=False)  # type: ignore[attr-defined]
    node.membership = SimpleNamespace(  # type: ignore[attr-defined]
        holds_read_lease=lambda: True, read_lease_ms=lambda: 900, peer_loads=report
    )
    node.moves = SimpleNamespace(report=lambda: {"under_way": []})  # type: ignore[attr-defined]
    node.replication = SimpleNamespace(  # type: ignore[attr-defined]
        backup_bytes=0, hwm_entries=lambda: 0
    )
    node.checkpoints = SimpleNamespace(checkpoint_age_s=lambda now: None)  # type: ignore[attr-defined]
    node.recovery = SimpleNamespace(report=report, local_health=lambda: 0)  # type: ignore[attr-defined]
    node.snapshots = SimpleNamespace(sending=0, report=report)  # type: ignore[attr-defined]
    return node, Control(node)  # type: ignore[arg-type]


def _status(node: FakeNode, control: Control) -> dict[str, Any]:
    control.on_status_request(b"client", StatusRequest(RequestId(5)))
    ((identity, reply),) = node.replies
    assert identity == b"client" and isinstance(reply, StatusReply) and reply.req == 5
    status: dict[str, Any] = unpack_body(reply.body)
    return status


def test_the_control_answers_a_ping_with_the_node_id() -> None:
    node, control = _control_alone()
    control.on_ping(b"client", Ping(RequestId(3)))
    assert node.replies == [(b"client", Pong(RequestId(3), NodeId("a")))]


def test_the_control_answers_a_status_request_with_the_nodes_figures() -> None:
    node, control = _control_alone()
    status = _status(node, control)
    assert status["node"] == "a" and status["role"] == "serving"
    assert status["slots_owned"] == 85 and list(status["secondaries"]) == ["b"]
    assert status["epoch"] == node.view.epoch
    assert status["inbox_tuples"] == 3 and status["output_records"] == 7
    assert status["utilization"] == 0.25 and status["read_lease_ms"] == 900
    assert status["under_replicated_slots"] == 0


def test_a_missing_secondary_leaves_the_whole_range_under_replicated() -> None:
    node, control = _control_alone(secondaries_missing=True)
    assert control.under_replicated_slots() == 85
    assert _status(node, control)["under_replicated_slots"] == 85
