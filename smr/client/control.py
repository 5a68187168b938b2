"""Control requests to nodes: ping, view, status, dump, query, output, a mapper's history.

Every request carries an id that its reply echoes; a reply that does not come within the
timeout raises :class:`NodeUnreachable` naming the node and its address.
"""

from __future__ import annotations

import functools
import itertools
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, TypeVar

from smr.checkpoint.ids import MapperId
from smr.ring.ids import NodeId, Slot
from smr.ring.view import View
from smr.transport.zeromq import Outbox, keys_hint, wait_any
from smr.wire.codec import decode, encode, pack_body, unpack_body
from smr.wire.kinds import FrameError, RequestId
from smr.wire.messages import (
    Error,
    JoinRequest,
    Message,
    MoveReply,
    MoveRequest,
    NetRuleReply,
    NetRuleRequest,
    Ping,
    Pong,
    RecoverReply,
    RecoverRequest,
    StatusReply,
    StatusRequest,
    ViewReply,
    ViewRequest,
)
from smr.wire.reads import (
    DumpReply,
    DumpRequest,
    HistoryReply,
    HistoryRequest,
    OutputReply,
    OutputRequest,
    QueryReply,
    QueryRequest,
)

REQUEST_TIMEOUT_MS_DEFAULT: Final = 2000
# A node whose address accepts no connection within this is reported unreachable at once,
# without waiting out the request timeout: on a live host a connection takes well under a
# millisecond even when the node is busy (the kernel accepts it), so this only ever catches
# a node that is gone. A paused or busy node is still waited for up to the timeout.
CONNECT_TIMEOUT_MS: Final = 500
DUMP_PAGE_KEYS: Final = 10_000
# Keys per query of many keys (the node's cap, smr.node.control.QUERY_KEYS_MAX).
QUERY_KEYS_MAX: Final = 10_000

Reply = TypeVar(
    "Reply",
    Pong,
    ViewReply,
    StatusReply,
    DumpReply,
    QueryReply,
    RecoverReply,
    MoveReply,
    NetRuleReply,
    OutputReply,
    HistoryReply,
)
# The messages that answer a request (they echo its id): an error, or a reply above.
_REPLIES: Final = (Error, *Reply.__constraints__)


class NodeUnreachable(Exception):
    """A node did not answer a request in time."""


class SlotsLost(NodeUnreachable):
    """A read reached slots whose state is lost (more adjacent nodes failed than the
    replication factor) and did not ask for a partial answer: nothing of them can be read
    until an operator accepts the loss (``smr recover --accept-loss``) or their state comes
    back. ``slots`` names them; ``keys``, for a read by key, the keys asked in them."""

    def __init__(self, slots: Iterable[int], keys: Iterable[str | int] = ()) -> None:
        self.slots = frozenset(slots)
        self.keys = tuple(keys)
        if len(self.keys) == 1 and len(self.slots) == 1:
            what = f"key {self.keys[0]!r} (slot {next(iter(self.slots))}) is lost: its slot's"
        else:
            what = f"{len(self.slots):,} slots are lost ({describe_slots(self.slots)}): their"
        super().__init__(
            f"{what} state went with more failed nodes than the replication factor "
            "('smr status' shows them, 'smr recover --accept-loss' brings them back empty); "
            "pass --allow-lost (allow_lost=True) to read the rest"
        )


class LostSlotsSkipped(UserWarning):
    """A read with ``allow_lost=True`` left out lost slots (the message names them, and
    :attr:`Cluster.skipped_lost_slots` holds them)."""


def describe_slots(slots: Iterable[int], ranges_max: int = 4) -> str:
    """Slots as ranges, in words: ``slots 0-1023, 4096``, at most ``ranges_max`` ranges
    (then ``and N more``)."""
    runs: list[list[int]] = []
    for slot in sorted(slots):
        if runs and slot == runs[-1][1] + 1:
            runs[-1][1] = slot
        else:
            runs.append([slot, slot])
    words = [f"{start}-{end}" if end > start else f"{start}" for start, end in runs[:ranges_max]]
    more = f" and {len(runs) - ranges_max} more ranges" if len(runs) > ranges_max else ""
    return (
        ("slot " if len(runs) == 1 and runs[0][0] == runs[0][1] else "slots ")
        + ", ".join(words)
        + more
    )


class NodeRefused(RuntimeError):
    """A node answered a request with ERROR (its message says why, e.g. a key whose state
    cannot be encoded in a reply)."""


class DumpPage(NamedTuple):
    """One page of a dump (:meth:`Client.dump_page`)."""

    entries: list[tuple[Any, dict[str, Any]]]
    """``(key, state)`` of whole slots from the request's start, of which the node was
    primary."""
    next_start: Slot | None
    """The first slot not served (None: every slot up to the request's end was)."""
    lost_until: Slot | None
    """If not None, ``[next_start, lost_until)`` are lost: their state is gone."""


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
        answer = self.request_each([addr], make, expect)[addr]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def request_each(
        self,
        addrs: Sequence[str],
        make: Callable[[RequestId], Message] | Mapping[str, Callable[[RequestId], Message]],
        expect: type[Reply],
    ) -> dict[str, Reply | NodeUnreachable | RuntimeError]:
        """Send ``make(request id)`` (or ``make[addr](request id)``: a request per address)
        to every address at once and wait for the replies in one poll loop, so that dead
        nodes cost one timeout in all, not one each.

        Each address maps to its reply, or to the error :meth:`request` would raise for it:
        NodeUnreachable when no connection is made within ``CONNECT_TIMEOUT_MS`` (nothing
        listens there) or no reply comes within the timeout; RuntimeError when the node
        answers with ERROR or a reply of another kind.
        """
        started = time.monotonic()
        deadline = started + self.timeout_ms / 1000
        connect_deadline = started + min(self.timeout_ms, CONNECT_TIMEOUT_MS) / 1000
        pending: dict[str, _Pending] = {}
        for addr in dict.fromkeys(addrs):
            outbox = self._outboxes.get(addr)
            if outbox is None:
                outbox = self._outboxes[addr] = Outbox(addr)
            request_id = RequestId(next(self._request_ids))
            request = make[addr](request_id) if isinstance(make, Mapping) else make(request_id)
            pending[addr] = _Pending(outbox, request_id, encode(request))
        answers: dict[str, Reply | NodeUnreachable | RuntimeError] = {}
        while pending:
            now = time.monotonic()
            for addr, waiting in list(pending.items()):
                if now >= deadline:
                    answers[addr] = NodeUnreachable(
                        f"node at {addr} did not answer within {self.timeout_ms} ms"
                    )
                elif not waiting.sent and now >= connect_deadline:
                    answers[addr] = NodeUnreachable(
                        f"node at {addr} accepts no connection (nothing listens there; "
                        f"{keys_hint()})"
                    )
                elif not waiting.sent:
                    # With IMMEDIATE set, a send fails until the connection is up: retry.
                    waiting.sent = waiting.outbox.send(waiting.frames)
                if addr in answers:
                    del pending[addr]
            sent = [waiting.outbox for waiting in pending.values() if waiting.sent]
            if not pending:
                break
            poll_ms = max(1, min(int((deadline - now) * 1000), 50))
            if len(sent) < len(pending):
                poll_ms = min(poll_ms, 10)  # some sends still wait for their connection
            if not sent:
                time.sleep(poll_ms / 1000)
                continue
            ready = {id(outbox) for outbox in wait_any(sent, poll_ms)}
            for addr, waiting in list(pending.items()):
                if id(waiting.outbox) not in ready:
                    continue
                answer = _receive_reply(addr, waiting, expect)
                if answer is not None:
                    answers[addr] = answer
                    del pending[addr]
        return answers

    def ping(self, addr: str) -> NodeId:
        """The id of the node answering at ``addr``."""
        return self.request(addr, Ping, Pong).node

    def view(self, addr: str) -> View:
        """The view of the node at ``addr``."""
        return _view_of(addr, self.request(addr, ViewRequest, ViewReply))

    def status(self, addr: str) -> dict[str, Any]:
        """The status map of the node at ``addr``."""
        status: dict[str, Any] = unpack_body(self.request(addr, StatusRequest, StatusReply).body)
        return status

    def recover(self, addr: str) -> int:
        """Accept the loss of the offline slots of the node at ``addr``; how many it brought
        back (empty)."""
        return self.request(addr, RecoverRequest, RecoverReply).accepted

    def move(self, addr: str, fraction: float | None) -> MoveReply:
        """Ask the node at ``addr`` to move the top ``fraction`` of its range's load to its
        clockwise neighbour, or (None) to leave the ring; whether the move started, and
        what moves or why not. The move goes on after the answer (its status shows it)."""
        ppm = 0 if fraction is None else round(fraction * 1_000_000)
        return self.request(addr, lambda req: MoveRequest(req, ppm, fraction is None), MoveReply)

    def join(self, addr: str, beside: str) -> MoveReply:
        """Ask the standby node at ``addr`` to join the ring beside the owner ``beside``;
        whether the join started (it goes on after the answer)."""
        return self.request(addr, lambda req: JoinRequest(req, beside), MoveReply)

    def net_rules_each(self, bodies: dict[str, bytes]) -> dict[str, str | Exception]:
        """Send each node (by address) its emulated network fault rule
        (``smr.transport.netfilter.pack_rule``), all at once; each address maps to what the
        node set, in words, or to why not (NodeUnreachable, NodeRefused)."""
        requests = {
            addr: functools.partial(NetRuleRequest, body=body) for addr, body in bodies.items()
        }
        replies = self.request_each(list(bodies), requests, NetRuleReply)
        return {
            addr: reply if isinstance(reply, Exception) else reply.text
            for addr, reply in replies.items()
        }

    def status_each(self, addrs: Sequence[str]) -> dict[str, dict[str, Any] | NodeUnreachable]:
        """The status map of every node at ``addrs``, asked at once, or why it is missing."""
        statuses: dict[str, dict[str, Any] | NodeUnreachable] = {}
        for addr, answer in self.request_each(addrs, StatusRequest, StatusReply).items():
            if isinstance(answer, RuntimeError):
                raise answer
            statuses[addr] = (
                answer if isinstance(answer, NodeUnreachable) else unpack_body(answer.body)
            )
        return statuses

    def query(self, addr: str, key: str | int) -> dict[str, Any]:
        """``{"owner": bool, "slot": int, "state": dict | None}`` for ``key`` at ``addr``."""
        answer: dict[str, Any] = unpack_body(
            self.request(addr, lambda req: QueryRequest(req, pack_body(key)), QueryReply).body
        )
        return answer

    def query_each(
        self, keys_by_addr: Mapping[str, Sequence[str | int]]
    ) -> dict[str, list[dict[str, Any]] | NodeUnreachable | RuntimeError]:
        """Ask every address for its keys (at most ``QUERY_KEYS_MAX`` each), all at once;
        each address maps to its answers, in the order of its keys (as :meth:`query`), or
        to why not."""
        requests = {
            addr: functools.partial(QueryRequest, body=pack_body(list(keys)))
            for addr, keys in keys_by_addr.items()
        }
        answers: dict[str, list[dict[str, Any]] | NodeUnreachable | RuntimeError] = {}
        for addr, reply in self.request_each(list(requests), requests, QueryReply).items():
            answers[addr] = reply if isinstance(reply, Exception) else list(unpack_body(reply.body))
        return answers

    def dump_page(
        self, addr: str, start: Slot, end: Slot, max_keys: int = DUMP_PAGE_KEYS
    ) -> DumpPage:
        """One page of slots ``[start, end)`` from the node at ``addr``, see
        :class:`smr.wire.reads.DumpRequest`: a page holds whole slots of which the node was
        primary, from ``start``, and says where it stopped and whether lost slots follow."""
        reply = self.request(
            addr,
            functools.partial(DumpRequest, start=start, end=end, max_keys=max_keys),
            DumpReply,
        )
        entries = [(key, dict(state)) for _slot, key, state in unpack_body(reply.body)]
        return DumpPage(entries, reply.next_start, reply.lost_until)

    def output_each(
        self, offsets: Mapping[str, int], max_bytes: int, of: Mapping[str, str] | None = None
    ) -> dict[str, OutputReply | NodeUnreachable | RuntimeError]:
        """Each address's output lines from its offset (about ``max_bytes``), asked all at
        once; or why not (NodeRefused when the offset is past the end of its file). With
        ``of``, an address it names reads that node's file from its disk instead (NodeRefused
        if it holds none)."""
        of = of or {}
        requests = {
            addr: functools.partial(
                OutputRequest,
                offset=offset,
                max_bytes=max_bytes,
                of=None if addr not in of else NodeId(of[addr]),
            )
            for addr, offset in offsets.items()
        }
        return self.request_each(list(requests), requests, OutputReply)

    def history_each(
        self, addrs: Sequence[str], mapper: MapperId
    ) -> dict[str, HistoryReply | NodeUnreachable | RuntimeError]:
        """What each node at ``addrs`` holds of ``mapper`` in the slots it is primary of,
        asked all at once (``smr.client.history``); or why not."""
        return self.request_each(
            addrs, functools.partial(HistoryRequest, mapper=mapper), HistoryReply
        )

    def close(self) -> None:
        """Close every socket."""
        for outbox in self._outboxes.values():
            outbox.close()
        self._outboxes.clear()


@dataclass
class _Pending:
    """A request sent (or still to send) to one node, waiting for its reply."""

    outbox: Outbox
    request_id: RequestId
    frames: list[bytes]
    sent: bool = False


def _receive_reply(
    addr: str, waiting: _Pending, expect: type[Reply]
) -> Reply | RuntimeError | None:
    """The reply to ``waiting`` among the messages queued on its outbox, or None if it has
    not come yet (replies to earlier, timed-out requests and unreadable frames are
    skipped)."""
    while (reply_frames := waiting.outbox.receive()) is not None:
        try:
            reply = decode(reply_frames)
        except FrameError:
            continue
        if not isinstance(reply, _REPLIES) or reply.req != waiting.request_id:
            continue
        if isinstance(reply, Error):
            return NodeRefused(f"node at {addr}: {reply.message}")
        if not isinstance(reply, expect):
            return RuntimeError(f"node at {addr} answered {reply.kind.name}, not {expect}")
        return reply
    return None


def cluster_view(client: Client, addrs: Sequence[str]) -> View:
    """The merged view of every node at ``addrs`` that answers; NodeUnreachable if none does."""
    merged: View | None = None
    failures = []
    for addr, answer in client.request_each(addrs, ViewRequest, ViewReply).items():
        if isinstance(answer, NodeUnreachable):
            failures.append(str(answer))
            continue
        if isinstance(answer, RuntimeError):
            raise answer
        view = _view_of(addr, answer)
        merged = view if merged is None else merged.merge(view)
    if merged is None:
        raise NodeUnreachable(none_answers_message(failures))
    return merged


def none_answers_message(failures: Sequence[str]) -> str:
    """One message for a cluster none of whose nodes answered: each reason said once, with
    the nodes it holds for (``failures`` are NodeUnreachable messages, "node at ADDR
    REASON"), and what to do."""
    by_reason: dict[str, list[str]] = {}
    for failure in failures:
        match = re.match(r"node at (\S+) (.*)$", failure, re.DOTALL)
        addr, reason = match.groups() if match else ("", failure)
        by_reason.setdefault(reason, []).append(addr)
    reasons = "; ".join(
        f"{', '.join(addr for addr in addrs if addr)}: {reason}".removeprefix(": ")
        for reason, addrs in by_reason.items()
    )
    return (
        f"no node of the cluster answers ({reasons}); is it running? 'smr cluster up' "
        "starts it, 'smr status' shows its nodes"
    )


def _view_of(addr: str, reply: ViewReply) -> View:
    try:
        return View.from_wire(unpack_body(reply.body))
    except ValueError as error:
        raise RuntimeError(f"node at {addr} sent a malformed view: {error}") from None


def fetch_view(addrs: Sequence[str], timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT) -> View:
    """The merged view of the nodes at ``addrs`` (see :func:`cluster_view`), with a client
    of its own."""
    client = Client(timeout_ms)
    try:
        return cluster_view(client, addrs)
    finally:
        client.close()
