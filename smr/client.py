"""Control requests to nodes: ping, view, status, dump, query.

Every request carries an id that its reply echoes; a reply that does not come within the
timeout raises :class:`NodeUnreachable` naming the node and its address.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, TypeVar

from ring.ids import NodeId, Slot
from ring.view import View
from smr.protocol import (
    DumpReply,
    DumpRequest,
    Error,
    FrameError,
    Message,
    Ping,
    Pong,
    QueryReply,
    QueryRequest,
    RequestId,
    StatusReply,
    StatusRequest,
    ViewReply,
    ViewRequest,
    decode,
    encode,
    pack_body,
    unpack_body,
)
from smr.transport.zeromq import Outbox, wait_any

REQUEST_TIMEOUT_MS_DEFAULT: Final = 2000
DUMP_PAGE_KEYS: Final = 10_000

Reply = TypeVar("Reply", Pong, ViewReply, StatusReply, DumpReply, QueryReply)
# The messages that answer a request (they echo its id).
_REPLIES: Final = (Error, Pong, ViewReply, StatusReply, DumpReply, QueryReply)


class NodeUnreachable(Exception):
    """A node did not answer a request in time."""


class NodeRefused(RuntimeError):
    """A node answered a request with ERROR (its message says why, e.g. a key whose state
    cannot be encoded in a reply)."""


class Client:
    """Sends control requests to the nodes of a cluster; one socket per node address."""

    def __init__(self, timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT) -> None:
        self.timeout_ms = timeout_ms
        self._outboxes: dict[str, Outbox] = {}
        self._request_ids = itertools.count(1)

    def request(
        self, addr: str, make: Callable[[RequestId], Message], expect: type[Reply]
    ) -> Reply:
        """Send the request ``make(request id)`` to ``addr`` and return the matching reply,
        of type ``expect``.

        Raises NodeUnreachable if no reply comes within the timeout, NodeRefused with the
        node's message if it answers with ERROR, and RuntimeError for a reply of another kind.
        """
        outbox = self._outboxes.get(addr)
        if outbox is None:
            outbox = self._outboxes[addr] = Outbox(addr)
        request_id = RequestId(next(self._request_ids))
        frames = encode(make(request_id))
        deadline = time.monotonic() + self.timeout_ms / 1000
        sent = False
        while True:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                raise NodeUnreachable(f"node at {addr} did not answer within {self.timeout_ms} ms")
            if not sent:
                # With IMMEDIATE set, a send fails until the connection is up: retry briefly.
                sent = outbox.send(frames)
                if not sent:
                    time.sleep(0.01)
                    continue
            if not wait_any([outbox], min(remaining_ms, 50)):
                continue
            reply_frames = outbox.receive()
            if reply_frames is None:
                continue
            try:
                reply = decode(reply_frames)
            except FrameError:
                continue  # not a reply we can read; wait for ours
            if not isinstance(reply, _REPLIES) or reply.req != request_id:
                continue  # a late reply to an earlier, timed-out request
            if isinstance(reply, Error):
                raise NodeRefused(f"node at {addr}: {reply.message}")
            if not isinstance(reply, expect):
                raise RuntimeError(f"node at {addr} answered {reply.kind.name}, not {expect}")
            return reply

    def ping(self, addr: str) -> NodeId:
        """The id of the node answering at ``addr``."""
        return self.request(addr, Ping, Pong).node

    def view(self, addr: str) -> View:
        """The view of the node at ``addr``."""
        reply = self.request(addr, ViewRequest, ViewReply)
        try:
            return View.from_wire(unpack_body(reply.body))
        except ValueError as error:
            raise RuntimeError(f"node at {addr} sent a malformed view: {error}") from None

    def status(self, addr: str) -> dict[str, Any]:
        """The status map of the node at ``addr``."""
        status: dict[str, Any] = unpack_body(self.request(addr, StatusRequest, StatusReply).body)
        return status

    def query(self, addr: str, key: str | int) -> dict[str, Any]:
        """``{"owner": bool, "slot": int, "state": dict | None}`` for ``key`` at ``addr``."""
        answer: dict[str, Any] = unpack_body(
            self.request(addr, lambda req: QueryRequest(req, pack_body(key)), QueryReply).body
        )
        return answer

    def dump(self, addr: str) -> Iterator[tuple[int, Any, dict[str, Any]]]:
        """Every ``(slot, key, state)`` the node at ``addr`` is primary of, page by page."""
        start: Slot | None = Slot(0)
        while start is not None:
            reply = self.request(
                addr,
                functools.partial(DumpRequest, start=start, max_keys=DUMP_PAGE_KEYS),
                DumpReply,
            )
            for slot, key, state in unpack_body(reply.body):
                yield slot, key, dict(state)
            start = reply.next_start

    def close(self) -> None:
        """Close every socket."""
        for outbox in self._outboxes.values():
            outbox.close()
        self._outboxes.clear()


def cluster_view(client: Client, addrs: Sequence[str]) -> View:
    """The merged view of every node at ``addrs`` that answers; NodeUnreachable if none does."""
    merged: View | None = None
    failures = []
    for addr in addrs:
        try:
            view = client.view(addr)
        except NodeUnreachable as error:
            failures.append(str(error))
            continue
        merged = view if merged is None else merged.merge(view)
    if merged is None:
        raise NodeUnreachable("no node of the cluster answers: " + "; ".join(failures))
    return merged


def fetch_view(addrs: Sequence[str], timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT) -> View:
    """The merged view of the nodes at ``addrs`` (see :func:`cluster_view`), with a client
    of its own."""
    client = Client(timeout_ms)
    try:
        return cluster_view(client, addrs)
    finally:
        client.close()
