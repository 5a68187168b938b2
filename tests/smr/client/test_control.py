"""The control client asks many nodes at once: dead or silent nodes cost one timeout in all."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from smr.client.control import Client, NodeUnreachable, cluster_view
from smr.transport.zeromq import Inbox
from smr.wire.messages import StatusReply, StatusRequest


def _closed_port_addr() -> str:
    """An address on 127.0.0.1 where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"tcp://127.0.0.1:{port}"


@pytest.fixture
def silent_inboxes() -> Iterator[list[Inbox]]:
    """Two bound sockets that accept connections and never answer (like paused nodes)."""
    inboxes = [Inbox("tcp://127.0.0.1:*") for _ in range(2)]
    try:
        yield inboxes
    finally:
        for inbox in inboxes:
            inbox.close()


def test_silent_nodes_cost_one_timeout_in_all_not_one_each(silent_inboxes: list[Inbox]) -> None:
    client = Client(timeout_ms=600)
    try:
        started = time.monotonic()
        answers = client.request_each(
            [inbox.addr for inbox in silent_inboxes], StatusRequest, StatusReply
        )
        elapsed_s = time.monotonic() - started
    finally:
        client.close()
    assert all(isinstance(answer, NodeUnreachable) for answer in answers.values())
    assert "did not answer within 600 ms" in str(answers[silent_inboxes[0].addr])
    assert elapsed_s < 1.0, f"two silent nodes took {elapsed_s:.2f} s with a 0.6 s timeout"


def test_a_dead_address_is_reported_before_the_request_timeout() -> None:
    dead = [_closed_port_addr(), _closed_port_addr()]
    client = Client(timeout_ms=5000)
    try:
        started = time.monotonic()
        with pytest.raises(NodeUnreachable, match="no node of the cluster answers") as error:
            cluster_view(client, dead)
        elapsed_s = time.monotonic() - started
    finally:
        client.close()
    assert "accepts no connection" in str(error.value)
    assert dead[0] in str(error.value) and dead[1] in str(error.value)
    assert elapsed_s < 2.0, f"two dead addresses took {elapsed_s:.2f} s"
