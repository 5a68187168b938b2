"""Following the reducers' output from a program (``smr.connect(...).subscribe()``): every
node's output file read by byte offset, through the node itself or, when it does not answer,
through any live node whose disk holds its file; each origin returned once.

The guarantee: every record a node wrote is returned, or its node is named in
:attr:`Subscription.unread_of_dead`, never passed over in silence. Why reading a dead node's
file to its end is enough: a record of a tuple its last checkpoint covered was written to
the file before that checkpoint left the node, and a record of a later tuple comes again
from its taker, which replays those tuples under the same origins
(docs/concepts/exactly-once.md, "Output"). Where no live node can read the file, the
subscriber cannot know where it ends: so the node is named.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from smr.client.control import NodeUnreachable
from smr.output.records import Repeats, parse_line
from smr.ring.ids import NodeId
from smr.ring.view import Status, View
from smr.wire.reads import OutputReply

log = logging.getLogger("smr.connection")

# A read of one node's file returns about this much (whole lines).
OUTPUT_READ_BYTES: Final = 1 << 20
# How often a subscription asks the nodes for new output when there was none.
OUTPUT_POLL_S: Final = 0.1
# How often a subscription asks for the ring's view (to learn of deaths and new nodes).
VIEW_REFRESH_S: Final = 1.0
# How often the live nodes are asked again for the file of a node none of them held.
HOLDER_PROBE_S: Final = 1.0


class OutputAsker(Protocol):
    """What a :class:`Subscription` reads through: :class:`smr.client.control.Client`, or a
    simulated client (``smr.sim``)."""

    def output_each(
        self, offsets: Mapping[str, int], max_bytes: int, of: Mapping[str, str] | None = None
    ) -> dict[str, OutputReply | NodeUnreachable | RuntimeError]:
        """Each address's output lines from its offset, or those of the node ``of`` names."""
        ...


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """One record a reducer emitted: the node that emitted it, its key, its value (as it
    was emitted: bytes, a non-finite float, a dict, see :func:`smr.values.json_form`), and
    its origin ``(mapper, slot, seq, index)``, the tuple it was emitted for
    (``smr.output``)."""

    node: str
    key: Any
    value: Any
    origin: tuple[str, int, int, int] | None = None


class Subscription:
    """An iterator of :class:`OutputRecord`, read from each node's output file in order.

    Every record a node wrote is returned, each origin once, or the node is named in
    :attr:`unread_of_dead`: never passed over in silence, whatever the timing of a death.
    A node that answers is read through itself; one that does not (dead, paused, cut off)
    through a live node whose disk holds its file (a local cluster's directory, a volume
    the nodes share), so a dead node's file is read to its end. What the dead node had not
    written, its taker's replay emits again, under the same origins. A dead node whose file
    no live node holds (nodes on separate disks) is named in :attr:`unread_of_dead` and a
    warning is logged; it leaves it when its file can be read again.

    :attr:`position` (node -> byte offset) always points just after the last record
    returned: give it to :meth:`smr.connection.Cluster.subscribe` to go on from there. A
    node's records come in the order it wrote them, those of different nodes interleaved.
    A record whose origin came before (a takeover's replay) is skipped, at the cost of
    remembering every origin read. Iteration ends after ``idle_timeout_s`` without a record
    (never, by default).
    """

    def __init__(
        self,
        view: Callable[[bool], View],
        client: OutputAsker,
        position: Mapping[str, int] | str,
        idle_timeout_s: float | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if isinstance(position, str) and position not in ("start", "end"):
            raise ValueError(f'position must be "start", "end" or a mapping, not {position!r}')
        self._view_of = view
        # The caller's time (virtual in a simulation): to poll, refresh and time out.
        self._clock = clock
        self._sleep = sleep
        self._view_at = -math.inf
        self._client = client
        self.position: dict[str, int] = dict(position) if isinstance(position, Mapping) else {}
        self._idle_timeout_s = idle_timeout_s
        self._pending: deque[tuple[str, int, OutputRecord | None]] = deque()
        self.repeats = Repeats()
        # Torn lines passed over: a node killed mid-write (their records come again).
        self.torn = 0
        self.unread_of_dead: dict[str, int] = {}
        """Each dead node whose output file no live node can read, and how many bytes of it
        are known unread: at least that many, from :attr:`position` to its size when last
        seen (more if it wrote after that)."""
        # Each node's file size when last read; the live node that last read each silent
        # node's file; silent nodes none could read, with when the live ones were last asked.
        self._sizes: dict[str, int] = {}
        self._holders: dict[str, str] = {}
        self._unheld: dict[str, float] = {}
        # Nodes dead before a subscription from now began: everything they wrote came before.
        self._not_followed: set[str] = set()
        if position == "end":
            self._place_at_end()

    def __iter__(self) -> Iterator[OutputRecord]:
        return self

    def __next__(self) -> OutputRecord:
        idle_since = self._clock()
        while True:
            while not self._pending:
                self._read()
                if self._pending:
                    break
                if (
                    self._idle_timeout_s is not None
                    and self._clock() - idle_since >= self._idle_timeout_s
                ):
                    raise StopIteration
                self._sleep(OUTPUT_POLL_S)
            node, end_offset, record = self._pending.popleft()
            self.position[node] = end_offset
            if record is not None:  # None: a repeat or a torn line, passed over
                return record

    # -- one pass ------------------------------------------------------------------------------

    def _read(self) -> None:
        """One pass over every node followed, its lines queued in ``_pending`` each with the
        offset just after it:

        1. Place the nodes first seen in the view (every node is followed, dead ones too).
        2. Ask each live node for its own lines, all at once.
        3. Read each node that did not answer, or is dead, through a live node holding its
           file (``_read_through_holder``).
        4. Name each dead node that no live node could read; a node read again leaves the
           names.

        A node that refuses its own offset (its output file replaced) raises RuntimeError.
        """
        # 1.
        view = self._view()
        self._place(view)
        live = {
            node: view.members[NodeId(node)].addr
            for node in self.position
            if _status(view, node) not in (None, Status.DEAD)
        }
        # 2.
        replies = self._client.output_each(
            {addr: self.position[node] for node, addr in live.items()}, OUTPUT_READ_BYTES
        )
        servers: list[str] = []
        silent = [node for node in self.position if node not in live]
        for node, addr in live.items():
            reply = replies.get(addr)
            if isinstance(reply, OutputReply):
                servers.append(addr)
                self._unheld.pop(node, None)
                self._take(node, reply)
            elif isinstance(reply, RuntimeError):
                raise RuntimeError(f"cannot follow the output of {node}: {reply}")
            else:
                silent.append(node)
        # 3.
        for node in silent:
            self._read_through_holder(node, servers)
        # 4.
        self._name_unread(view)

    def _read_through_holder(self, node: str, servers: list[str]) -> None:
        """Read the lines of ``node``, which does not answer, through the live node that
        read its file last time, else through any of ``servers`` (live nodes that answered)
        whose disk holds it: asked all at once, the largest copy read. A node none holds is
        remembered as unheld, and the servers are asked again after ``HOLDER_PROBE_S``."""
        holder = self._holders.pop(node, None)
        reply = None
        if holder in servers:
            reply = self._read_of(node, [holder]).get(holder)
        if reply is None:
            asked_at = self._unheld.get(node)
            if asked_at is not None and self._clock() - asked_at < HOLDER_PROBE_S:
                return
            held = self._read_of(node, servers)
            if not held:
                self._unheld[node] = self._clock()
                return
            holder, reply = max(held.items(), key=lambda item: item[1].size)
        assert holder is not None
        self._holders[node] = holder
        self._unheld.pop(node, None)
        self._take(node, reply)

    def _read_of(self, node: str, addrs: list[str]) -> dict[str, OutputReply]:
        """The replies of those of ``addrs`` that read ``node``'s file from its position."""
        if not addrs:
            return {}
        offset = self.position[node]
        replies = self._client.output_each(
            dict.fromkeys(addrs, offset), OUTPUT_READ_BYTES, of=dict.fromkeys(addrs, node)
        )
        return {addr: reply for addr, reply in replies.items() if isinstance(reply, OutputReply)}

    def _name_unread(self, view: View) -> None:
        """Step 4 of ``_read``: a dead node (or one the view does not know) that no live
        node could read is named in ``unread_of_dead``, with a warning, once per naming."""
        for node, offset in self.position.items():
            dead = _status(view, node) in (None, Status.DEAD)
            if not dead or node not in self._unheld:
                self.unread_of_dead.pop(node, None)
            elif node not in self.unread_of_dead:
                unread = max(0, self._sizes.get(node, offset) - offset)
                self.unread_of_dead[node] = unread
                log.warning(
                    "node %s is dead and no live node holds its output file: what it wrote "
                    "from byte %d on (at least %d bytes) was not read; its taker emits again "
                    "only the records of tuples past its last checkpoint",
                    node,
                    offset,
                    unread,
                )

    def _take(self, node: str, reply: OutputReply) -> None:
        """Queue the lines of ``reply`` (read from ``node``'s position on), each with the
        offset after it: a record, or None for a repeat or a torn line."""
        self._sizes[node] = reply.size
        offset = self.position[node]
        for line in reply.body.splitlines(keepends=True):
            offset += len(line)
            entry = parse_line(line)
            origin = None if entry is None else entry.get("origin")
            if entry is None:
                self.torn += line.strip() != b""
            if entry is None or self.repeats.is_repeat(origin):
                self._pending.append((node, offset, None))
                continue
            record = OutputRecord(
                entry["node"],
                entry["key"],
                entry["value"],
                None if origin is None else tuple(origin),
            )
            self._pending.append((node, offset, record))

    # -- which nodes, from where ---------------------------------------------------------------

    def _view(self) -> View:
        """The ring's view, asked again at most every ``VIEW_REFRESH_S``."""
        refresh = self._clock() - self._view_at >= VIEW_REFRESH_S
        view = self._view_of(refresh)
        if refresh:
            self._view_at = self._clock()
        return view

    def _place(self, view: View) -> None:
        """Follow every node of ``view`` not followed yet from the start of its file: one
        that did not answer when a subscription from now began, one that joined since, one
        dead then that came back, and for a subscription from the start or a position,
        every node, dead ones too. Nothing a node wrote after now is skipped; what it wrote
        before may come too."""
        for node_id, member in view.members.items():
            node = str(node_id)
            if node in self._not_followed and member.status is not Status.DEAD:
                self._not_followed.discard(node)
            if node not in self.position and node not in self._not_followed:
                self.position[node] = 0

    def _place_at_end(self) -> None:
        """For a subscription from now: each node placed at the end of its file, as it or a
        live node holding its file says. A live node nobody can place is read from its start
        once it answers (so nothing it wrote after now is skipped); a dead one is not
        followed (it wrote nothing after now)."""
        view = self._view()
        live = {
            str(node): member.addr
            for node, member in view.members.items()
            if member.status is not Status.DEAD
        }
        replies = self._client.output_each(dict.fromkeys(live.values(), 0), 0)
        servers = [addr for addr, reply in replies.items() if isinstance(reply, OutputReply)]
        for node_id in view.members:
            node = str(node_id)
            reply = replies.get(live.get(node, ""))
            if isinstance(reply, OutputReply):
                self.position[node] = reply.size
            elif (size := self._size_through_holders(node, servers)) is not None:
                self.position[node] = size
            elif node not in live:
                self._not_followed.add(node)

    def _size_through_holders(self, node: str, servers: list[str]) -> int | None:
        """The size of ``node``'s file as the largest copy of it that ``servers`` hold."""
        replies = self._client.output_each(
            dict.fromkeys(servers, 0), 0, of=dict.fromkeys(servers, node)
        )
        return max((r.size for r in replies.values() if isinstance(r, OutputReply)), default=None)


def _status(view: View, node: str) -> Status | None:
    """``node``'s status in ``view``; None if the view does not know it."""
    member = view.members.get(NodeId(node))
    return None if member is None else member.status
