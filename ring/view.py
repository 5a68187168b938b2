"""The view: the membership table every node and mapper routes by
(docs/design/architecture.md#view).

A `View` is an immutable value: a table of one `Member` entry per node. Views spread by gossip
and are combined with `View.merge`, which is commutative, associative and idempotent, so every
node that has seen the same entries holds the same view whatever order they arrived in.

Who may write what (the protocol, not enforced here): only a node changes its own entry and
raises its version each time; any node may mark another dead by writing that entry with
``version + 1``; a node that learns it was marked dead rejoins as a new incarnation with
empty state. The two range changes that other nodes compute are pure functions here:
`successor_takes_over` (after a failure, docs/design/architecture.md#failures) and `grant_range` (a
handoff, docs/design/architecture.md#moves).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

from smr.ring.ids import Epoch, NodeId, Token
from smr.ring.member import (
    INCARNATION_LIMIT,
    OWNING_STATUSES,
    TOKEN_LIMIT,
    VERSION_LIMIT,
    Member,
    Status,
    short_repr,
)

__all__ = [
    "INCARNATION_LIMIT",
    "OWNING_STATUSES",
    "TOKEN_LIMIT",
    "VERSION_LIMIT",
    "Member",
    "Status",
    "View",
    "grant_range",
    "hand_over_all",
    "join_view",
    "joining_at",
    "ring_order",
    "successor_takes_over",
    "with_status",
]


def _epoch_weight(member: Member) -> int:
    # An order-preserving encoding of the first three components of precedence
    # (incarnation, dead, version), plus one so that a new member counts as news. Versions
    # are below 2**32, so the dead bit (2**32) outweighs any version and the incarnation
    # (from 2**33 up) outweighs both.
    dead = member.status is Status.DEAD
    return 1 + (member.incarnation << 33) + (dead << 32) + member.version


def _keep_max(table: dict[NodeId, Member], member: Member) -> None:
    current = table.get(member.node_id)
    if current is None or member.precedence() > current.precedence():
        table[member.node_id] = member


class View:
    """An immutable membership table: at most one `Member` per node id.

    Guarantees: a value object (equal views compare equal; no method mutates a view, each
    returns a new one); `merge` is commutative, associative and idempotent; `epoch` never
    decreases under merge. Not hashable.
    """

    __slots__ = ("_epoch", "_members", "_members_view", "_owners")

    _members: dict[NodeId, Member]
    _members_view: Mapping[NodeId, Member]
    _epoch: Epoch
    _owners: tuple[Member, ...]

    def __init__(self, members: Iterable[Member] = ()) -> None:
        """Build a view from entries; of several entries for one node, the one with the
        highest precedence is kept (as if they had been merged one by one)."""
        table: dict[NodeId, Member] = {}
        for member in members:
            if not isinstance(member, Member):
                raise TypeError(f"a View holds Members, got {type(member).__name__}")
            _keep_max(table, member)
        self._members = table
        self._members_view = MappingProxyType(table)
        self._epoch = Epoch(sum(_epoch_weight(member) for member in table.values()))
        self._owners = tuple(
            sorted(
                (member for member in table.values() if member.status in OWNING_STATUSES),
                key=ring_order,
            )
        )

    @property
    def members(self) -> Mapping[NodeId, Member]:
        """The entries by node id, read-only."""
        return self._members_view

    def get(self, node_id: NodeId) -> Member | None:
        """The entry of `node_id`, or None if the view has never heard of it."""
        return self._members.get(node_id)

    def merge(self, other: View) -> View:
        """The view holding, per node id, the entry with the highest `Member.precedence`
        among the two views: highest incarnation, then `dead` (final for its incarnation),
        then highest version (docs/design/architecture.md#view).

        Guarantees: commutative, associative, idempotent; the result's epoch is at least the
        epoch of each input.
        """
        return View([*self._members.values(), *other.members.values()])

    def with_member(self, member: Member) -> View:
        """This view merged with a view holding just `member` (so a stale entry is ignored)."""
        return self.merge(View((member,)))

    def mark_dead(self, node_id: NodeId) -> View:
        """This view with `node_id`'s entry rewritten as `dead` at ``version + 1``, the write
        any node may make about another (docs/design/architecture.md#view). Raises `KeyError` if the
        node is not in the view."""
        member = self._members.get(node_id)
        if member is None:
            raise KeyError(f"cannot mark {node_id!r} dead: it is not in the view")
        return self.with_member(
            dataclasses.replace(member, status=Status.DEAD, version=member.version + 1)
        )

    @property
    def epoch(self) -> Epoch:
        """A cheap number that says whether one view may have news for another.

        Guarantees: never decreases under merge (``a.merge(b).epoch >= a.epoch``), and
        strictly increases when a merge brings news: a member `a` did not have, a newer
        incarnation, a `dead` mark, or a higher version of an entry. (Only a change in the
        remaining fields at the same incarnation, deadness and version, which the protocol
        never produces, leaves it unchanged.) So a peer whose epoch is not greater than ours
        has nothing for us in the entries that count.

        It is the sum over members of ``1 + incarnation * 2**33 + is_dead * 2**32 + version``,
        an encoding of the order of `Member.precedence`. (A plain sum of incarnation + version
        would drop when an entry of a newer incarnation with a lower version replaces an
        older one.) With small incarnations it fits in 64 bits; it grows by ``2**33`` per
        incarnation of each member.
        """
        return self._epoch

    def owners(self) -> tuple[Member, ...]:
        """The members that own slots (status in `OWNING_STATUSES`), in ring order: sorted
        by ``(token, node_id)``."""
        return self._owners

    def to_wire(self) -> list[list[str | int]]:
        """A msgpack/JSON-ready list of member wires, sorted by node id.

        Guarantees: ``View.from_wire(v.to_wire()) == v``, and equal views give equal wires.
        """
        return [self._members[node_id].to_wire() for node_id in sorted(self._members)]

    @classmethod
    def from_wire(cls, obj: object) -> View:
        """Parse the output of `to_wire`, received from an untrusted peer.

        Guarantees: returns a `View` or raises `ValueError` saying what was wrong; never any
        other exception. Several entries for one node are merged, as in the constructor.
        """
        if not isinstance(obj, list | tuple):
            raise ValueError(f"a view must be a list of members, got {short_repr(obj)}")
        return cls(Member.from_wire(item) for item in obj)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, View):
            return NotImplemented
        return self._members_view == other.members

    __hash__ = None  # type: ignore[assignment]  # a value compared by content, not a key

    def __repr__(self) -> str:
        entries = ", ".join(
            f"{member.node_id}@{member.token}:{member.status.value}"
            f"(i{member.incarnation}v{member.version})"
            for member in sorted(self._members.values(), key=lambda m: m.node_id)
        )
        return f"View([{entries}], epoch={self._epoch})"


def ring_order(member: Member) -> tuple[int, bool, str]:
    """The order of owners on the ring: by token; on one token a leaving owner first (so
    that the owner that took its range over, which moved onto its token, is the one that
    owns it), then by node id."""
    return member.token, member.status is not Status.LEAVING, member.node_id


def _clockwise_neighbour(owners: Sequence[Member], member: Member) -> Member | None:
    """The first of `owners` (in ring order) after `member`'s place, wrapping; never `member`
    itself. None if there is no other owner."""
    others = [owner for owner in owners if owner.node_id != member.node_id]
    if not others:
        return None
    place = ring_order(member)
    for owner in others:
        if ring_order(owner) > place:
            return owner
    return others[0]


def successor_takes_over(view: View, dead: NodeId) -> View:
    """The view after `dead`'s first live clockwise neighbour takes over its range
    (docs/design/architecture.md#failures).

    Steps:
      1. mark `dead` dead (``version + 1``), unless it already is;
      2. find the successor: the next owner after `dead`'s token in ring order, wrapping;
      3. move the successor's token down to `dead`'s token and raise its version.

    Guarantees (with distinct owner tokens): exactly the slots `dead` was primary for change
    primary, and all of them go to the successor; every other slot keeps its primary. If
    `dead` was the only owner it is just marked dead (no one is left to take over). If `dead`
    never owned anything (joining, standby) it is just marked dead. If it is already dead
    (another node marked it first, so its slots fell back on its counter-clockwise
    neighbour, who holds no copy of them) the takeover still happens, unless an owner
    already sits at its token, in which case the takeover is done and the view is returned
    unchanged: the function is idempotent. A dead entry is taken to have been an owner when
    it died, so call this only for a node whose range you back up (your counter-clockwise
    neighbours), as the failure detector does. Raises `KeyError` if `dead` is not in the view.
    """
    member = view.get(dead)
    if member is None:
        raise KeyError(f"cannot take over {dead!r}: it is not in the view")
    # 1.
    if member.status is Status.DEAD:
        if any(owner.token == member.token for owner in view.owners()):
            return view
        marked = view
    elif member.status in OWNING_STATUSES:
        marked = view.mark_dead(dead)
    else:
        return view.mark_dead(dead)
    # 2.
    successor = _clockwise_neighbour(marked.owners(), member)
    if successor is None:
        return marked
    # 3.
    return marked.with_member(
        dataclasses.replace(successor, token=member.token, version=successor.version + 1)
    )


def _strictly_inside(split: int, start: int, end: int) -> bool:
    """Whether `split` lies in the clockwise range ``[start, end)`` and is not `start`."""
    if start < end:
        return start < split < end
    if start > end:  # the range wraps past the top slot
        return split > start or 0 <= split < end
    return False  # start == end: empty


def grant_range(view: View, owner: NodeId, split: Token) -> View:
    """The view after `owner` grants the top of its range, ``[split, end)``, to its clockwise
    neighbour (the handoff of docs/design/architecture.md#moves): the neighbour moves its token down
    to `split` and raises its version.

    Guarantees: exactly the slots ``[split, end)`` of `owner`'s range change primary, all to
    the neighbour, and `owner` keeps ``[token, split)``, which is non-empty. Raises
    `ValueError` if `owner` owns no range, has no neighbour (it is the only owner), or
    `split` is not strictly inside its range (it must differ from `owner`'s token and lie
    before the neighbour's). `split` must also be a slot of the ring the view is used with
    (``< slot_count``); the view does not know the slot count, so `Ring` checks that.
    """
    member = view.get(owner)
    if member is None or member.status not in OWNING_STATUSES:
        raise ValueError(f"{owner!r} owns no range to grant (entry: {member!r})")
    neighbour = _clockwise_neighbour(view.owners(), member)
    if neighbour is None:
        raise ValueError(f"{owner!r} is the only owner: there is no neighbour to grant to")
    if not _strictly_inside(split, member.token, neighbour.token):
        raise ValueError(
            f"split {split} is not strictly inside {owner!r}'s range "
            f"[{member.token}, {neighbour.token}) (clockwise, wrapping)"
        )
    return view.with_member(
        dataclasses.replace(neighbour, token=split, version=neighbour.version + 1)
    )


def hand_over_all(view: View, owner: NodeId) -> View:
    """The view after `owner`, leaving, hands its whole range to its clockwise neighbour
    (a leave, docs/design/architecture.md#moves): the neighbour moves its token onto `owner`'s and
    raises its version; on that shared token the neighbour owns the range (``ring_order`` puts a
    leaving owner first). Only the neighbour's entry changes, written by the neighbour:
    the leaver writes its own (``leaving``, then ``left``), so that a switch undone (the
    neighbour marked dead on its older entry) leaves the leaver owning its range still.

    Guarantees: exactly `owner`'s slots change primary, all to the neighbour. Raises
    `ValueError` if `owner` is not leaving, or is the only owner.
    """
    member = view.get(owner)
    if member is None or member.status is not Status.LEAVING:
        raise ValueError(f"{owner!r} is not leaving (entry: {member!r})")
    neighbour = _clockwise_neighbour(view.owners(), member)
    if neighbour is None:
        raise ValueError(f"{owner!r} is the only owner: there is no neighbour to hand over to")
    return view.with_member(
        dataclasses.replace(neighbour, token=member.token, version=neighbour.version + 1)
    )


def with_status(view: View, node: NodeId, status: Status) -> View:
    """The view after `node` writes its own entry with `status` (``version + 1``): leaving
    (before its leave's commit), up again (a leave called off), on standby (a leave done,
    or a join called off at the joiner)."""
    member = view.get(node)
    if member is None:
        raise ValueError(f"{node!r} is not in the view")
    if member.status is status:
        return view
    return view.with_member(dataclasses.replace(member, status=status, version=member.version + 1))


def joining_at(view: View, joiner: NodeId, token: Token) -> View:
    """The view after `joiner`, on standby, starts joining at `token` (written by the
    joiner: its own entry becomes ``joining`` at `token`, ``version + 1``). Placement then
    makes it an extra secondary of the owners it will back up (``ring.placement``). Raises
    `ValueError` if `joiner` is not on standby."""
    member = view.get(joiner)
    if member is None or member.status is not Status.STANDBY:
        raise ValueError(f"only a standby node can join, not {member!r}")
    return view.with_member(
        dataclasses.replace(member, status=Status.JOINING, token=token, version=member.version + 1)
    )


def join_view(view: View, joiner: NodeId) -> View:
    """The view once `joiner` has joined: its entry ``up`` at its token, ``version + 1``
    (written by the joiner). Raises `ValueError` if it is not joining."""
    member = view.get(joiner)
    if member is None or member.status is not Status.JOINING:
        raise ValueError(f"{joiner!r} is not joining (entry: {member!r})")
    return view.with_member(
        dataclasses.replace(member, status=Status.UP, version=member.version + 1)
    )
