"""No user value and no handler error makes a node exit: a state that cannot be encoded is a
reduce error, rolled back; dump and query of such a state answer ERROR; a handler that
raises is counted; only a broken invariant stops the node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from smr.api import Job
from smr.checkpoint.delta import encode_delta
from smr.node.core import NodeCore
from smr.ring.hashing import slot_of
from smr.ring.ids import NodeId, Slot
from smr.ring.invariants import InvariantViolation
from smr.wire.codec import encode, pack_body, unpack_body
from smr.wire.kinds import RequestId
from smr.wire.messages import Ack, Error, Ping, Pong, StatusRequest
from smr.wire.reads import DumpRequest, OutputReply, OutputRequest, QueryReply, QueryRequest
from tests.smr.links import CallbackLinks
from tests.smr.node.test_core import PEER, SLOT_BITS, Harness


def _count_or_store_a_set(key: Any, value: Any, state: dict[str, Any], emit: Any) -> None:
    if value == "set":
        state["seen"] = {1, 2}
    elif value == "big":
        state["count"] = 2**64
    else:
        state["count"] = state.get("count", 0) + value


@pytest.fixture
def node(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path)
    job = Job("sets", map=lambda record, emit: None, reduce=_count_or_store_a_set)
    harness.core = NodeCore(
        NodeId("a"),
        job,
        harness.view,
        SLOT_BITS,
        CallbackLinks(harness.replies_to),
        harness.core.output,
    )
    return harness


def test_a_reduce_leaving_a_set_or_a_huge_int_fails_and_leaves_no_trace(node: Harness) -> None:
    k = node.own_keys[0]
    (reply,) = node.deliver(node.batch_frames(1, [(k, 1), (k, "set"), (k, "big"), (k, 2)]))
    assert isinstance(reply, Ack)
    assert node.state(k) == {"count": 3}
    assert node.core.counters.tuples_failed == 2
    # The checkpoint cycle goes on: nothing unencodable reached the store.
    encode_delta(node.core.store.swap())


def _request(node: Harness, frames: list[bytes]) -> Any:
    node.replies.clear()
    node.core.on_frames(PEER, frames)
    ((_, reply),) = node.replies
    return reply


def test_dump_and_query_of_a_state_that_cannot_be_encoded_answer_error_naming_the_key(
    node: Harness,
) -> None:
    good, bad = node.own_keys[0], node.own_keys[1]
    node.deliver(node.batch_frames(1, [(good, 1)]))
    # As if stored before states were checked.
    node.core.store.commit(slot_of(bad, SLOT_BITS), bad, {}, {"seen": {1, 2}})
    reply = _request(node, encode(DumpRequest(RequestId(1), Slot(0), Slot(1 << SLOT_BITS), 1000)))
    assert isinstance(reply, Error) and repr(bad) in reply.message
    reply = _request(node, encode(QueryRequest(RequestId(2), pack_body(bad))))
    assert isinstance(reply, Error) and repr(bad) in reply.message
    reply = _request(node, encode(QueryRequest(RequestId(3), pack_body(good))))
    assert isinstance(reply, QueryReply)
    assert node.core.counters.handler_errors == 0


def test_a_handler_that_raises_is_counted_and_the_node_goes_on(
    node: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(identity: bytes, message: Any) -> None:
        raise KeyError("a bug in a handler")

    monkeypatch.setattr(node.core.control, "on_status_request", broken)
    for req in range(3):
        node.core.on_frames(PEER, encode(StatusRequest(RequestId(req))))
    assert node.core.counters.handler_errors == 3
    assert isinstance(_request(node, encode(Ping(RequestId(9)))), Pong)
    k = node.own_keys[0]
    (reply,) = node.deliver(node.batch_frames(1, [(k, 1)]))
    assert isinstance(reply, Ack)


def test_a_broken_invariant_in_a_handler_still_stops_the_node(
    node: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(identity: bytes, message: Any) -> None:
        raise InvariantViolation("two owners")

    monkeypatch.setattr(node.core.control, "on_status_request", broken)
    with pytest.raises(InvariantViolation):
        node.core.on_frames(PEER, encode(StatusRequest(RequestId(1))))


def test_a_query_of_many_keys_answers_each_in_the_order_asked(node: Harness) -> None:
    a, b = node.own_keys[0], node.own_keys[1]
    node.deliver(node.batch_frames(1, [(a, 1), (a, 2), (b, 5)]))
    missing = "no-such-key-here"
    reply = _request(node, encode(QueryRequest(RequestId(1), pack_body([b, missing, a]))))
    assert isinstance(reply, QueryReply)
    answers = unpack_body(reply.body)
    assert [answer["state"] for answer in answers] == [{"count": 5}, None, {"count": 3}]
    assert answers[0]["owner"] is True


def test_a_query_of_a_bad_key_in_a_list_is_a_bad_frame(node: Harness) -> None:
    node.replies.clear()
    node.core.on_frames(PEER, encode(QueryRequest(RequestId(1), pack_body(["a", [1]]))))
    assert node.replies == []
    assert node.core.counters.bad_frames == 1


def test_output_reads_whole_lines_from_an_offset_and_refuse_one_past_the_end(
    node: Harness,
) -> None:
    output = node.core.reducer.output
    output.extend([("k", 1, "m", 0, 1, 0), ("k", "x" * 300, "m", 0, 2, 0), ("j", 3, "m", 1, 1, 0)])
    output.flush()
    reply = _request(node, encode(OutputRequest(RequestId(1), 0, 100)))
    assert isinstance(reply, OutputReply)
    first = reply.body.decode().splitlines()
    assert [json.loads(line)["value"] for line in first] == [1]
    rest = _request(node, encode(OutputRequest(RequestId(2), reply.next_offset, 100)))
    assert isinstance(rest, OutputReply)
    # A line longer than max_bytes still comes whole.
    assert json.loads(rest.body.decode().splitlines()[0])["value"] == "x" * 300
    end = node.output_path.stat().st_size
    tail = _request(node, encode(OutputRequest(RequestId(3), end, 100)))
    assert isinstance(tail, OutputReply) and (tail.body, tail.next_offset) == (b"", end)
    size_only = _request(node, encode(OutputRequest(RequestId(5), 0, 0)))
    assert isinstance(size_only, OutputReply) and (size_only.body, size_only.size) == (b"", end)
    past = _request(node, encode(OutputRequest(RequestId(4), end + 1, 100)))
    assert isinstance(past, Error) and "past the end" in past.message


def test_a_node_reads_another_nodes_output_file_only_from_beside_its_own(node: Harness) -> None:
    # A dead node's file in the same output directory (a local cluster's): read from an offset.
    other = node.output_path.parent / "n9.jsonl"
    other.write_text('{"node": "n9", "key": "k", "value": 1, "origin": ["m", 0, 1, 0]}\n{"no')
    reply = _request(node, encode(OutputRequest(RequestId(1), 0, 100, NodeId("n9"))))
    assert isinstance(reply, OutputReply) and reply.body.decode().count("\n") == 1
    assert (reply.next_offset, reply.size) == (
        other.read_bytes().index(b"\n") + 1,
        other.stat().st_size,
    )
    for name, reason in (
        ("n8", "holds no output file of n8"),
        ("../n9", "no output file is named"),
    ):
        refused = _request(node, encode(OutputRequest(RequestId(2), 0, 100, NodeId(name))))
        assert isinstance(refused, Error) and reason in refused.message
