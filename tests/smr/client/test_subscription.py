"""A subscription from now skips nothing of a node it could not place at the start: such a
node (silent then, or joined since) is read from the start of its output. It returns each
origin once: a takeover's replay of a record is passed over, its position moved past."""

from __future__ import annotations

import json
from typing import Any

import pytest

from smr.client import subscription as subscription_module
from smr.client.control import NodeUnreachable
from smr.client.subscription import Subscription
from smr.ring.ids import NodeId, Token
from smr.ring.view import Member, Status, View
from smr.wire.kinds import RequestId
from smr.wire.reads import OutputReply


class FakeOutputs:
    """Two nodes' output files; node b does not answer until ``b_up``."""

    def __init__(self) -> None:
        self.files = {"tcp://a": b"", "tcp://b": b""}
        self.b_up = False

    def write(self, addr: str, node: str, key: str, origin: list[Any] | None = None) -> None:
        record = {"node": node, "key": key, "value": 1}
        if origin is not None:
            record["origin"] = origin
        self.files[addr] += (json.dumps(record) + "\n").encode()

    def output_each(
        self, offsets: dict[str, int], max_bytes: int, of: dict[str, str] | None = None
    ) -> dict[str, Any]:
        replies: dict[str, Any] = {}
        for addr, offset in offsets.items():
            if of:  # these nodes' disks hold no other node's file
                replies[addr] = RuntimeError(f"no output file of {of[addr]} here")
                continue
            if addr == "tcp://b" and not self.b_up:
                replies[addr] = NodeUnreachable("b does not answer")
                continue
            data = self.files[addr]
            body = data[offset:] if max_bytes else b""
            if max_bytes and len(body) > max_bytes:  # whole lines, at least one
                body = body[: max(body.find(b"\n", max_bytes - 1), body.find(b"\n")) + 1]
            replies[addr] = OutputReply(RequestId(1), offset + len(body), len(data), body)
        return replies


class FakeCluster:
    def __init__(self, outputs: FakeOutputs) -> None:
        self._client = outputs
        self._view_at = 0.0
        self._view = View(
            [
                Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1),
                Member(NodeId("b"), 1, "tcp://b", Token(128), "", Status.UP, 1),
            ]
        )

    def view(self, refresh: bool = False) -> View:
        return self._view


def subscribe(cluster: FakeCluster, position: Any, idle_timeout_s: float) -> Subscription:
    return Subscription(cluster.view, cluster._client, position, idle_timeout_s)  # type: ignore[arg-type]


def test_a_node_silent_when_the_subscription_started_is_read_from_its_start() -> None:
    outputs = FakeOutputs()
    outputs.write("tcp://a", "a", "before-a")
    outputs.write("tcp://b", "b", "before-b")
    subscription = subscribe(FakeCluster(outputs), "end", idle_timeout_s=0.2)
    outputs.write("tcp://a", "a", "after-a")
    outputs.write("tcp://b", "b", "while-b-was-silent")
    outputs.b_up = True
    keys = sorted(record.key for record in subscription)
    # a was placed at its end, so its earlier record is not repeated; b could not be
    # placed, so all it holds is read: nothing it wrote after the start is skipped.
    assert keys == ["after-a", "before-b", "while-b-was-silent"]
    assert subscription.position == {
        "a": len(outputs.files["tcp://a"]),
        "b": len(outputs.files["tcp://b"]),
    }


def test_a_replayed_record_is_returned_once_and_its_position_passed() -> None:
    outputs = FakeOutputs()
    outputs.b_up = True
    subscription = subscribe(FakeCluster(outputs), "start", idle_timeout_s=0.2)
    outputs.write("tcp://a", "a", "x", ["m", 5, 10, 0])
    outputs.write("tcp://a", "a", "y", ["m", 5, 11, 0])
    # b took a's range over and replayed seq 11, then applied seq 12; a torn line is skipped.
    outputs.write("tcp://b", "b", "y", ["m", 5, 11, 0])
    outputs.files["tcp://b"] += b'{"node": "b", "ke\n'
    outputs.write("tcp://b", "b", "z", ["m", 5, 12, 0])
    records = list(subscription)
    assert [(r.key, r.origin) for r in records] == [
        ("x", ("m", 5, 10, 0)),
        ("y", ("m", 5, 11, 0)),
        ("z", ("m", 5, 12, 0)),
    ]
    assert subscription.repeats.repeats == 1 and subscription.torn == 1
    assert subscription.position["b"] == len(outputs.files["tcp://b"])


def test_a_node_that_dies_with_records_unread_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One line per read: the subscription learns b's size before it has read all of it.
    monkeypatch.setattr(subscription_module, "OUTPUT_READ_BYTES", 1)
    outputs = FakeOutputs()
    outputs.b_up = True
    cluster = FakeCluster(outputs)
    subscription = subscribe(cluster, "start", idle_timeout_s=0.2)
    outputs.write("tcp://b", "b", "y", ["m", 6, 10, 0])
    outputs.write("tcp://b", "b", "z", ["m", 6, 11, 0])
    assert next(subscription).key == "y"
    cluster._view = View(
        [
            Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1),
            Member(NodeId("b"), 1, "tcp://b", Token(128), "", Status.DEAD, 1),
        ]
    )
    assert list(subscription) == []
    unread = len(outputs.files["tcp://b"]) - subscription.position["b"]
    assert unread > 0 and subscription.unread_of_dead == {"b": unread}
