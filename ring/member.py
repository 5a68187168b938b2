"""One node's entry in the view (a `Member`): who it is, where it listens and sits, its status
and version; each field checked on construction and on the wire, so a `Member` in hand is well
formed. The table of them and its merge are `ring.view`'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from smr.ring.hashing import SLOT_BITS_MAX
from smr.ring.ids import Incarnation, NodeId, Token


class Status(StrEnum):
    """A node's lifecycle state. Only `OWNING_STATUSES` own slots."""

    JOINING = "joining"
    """Started, receiving a snapshot of its future slots; owns nothing yet."""
    UP = "up"
    """Serving its range."""
    LEAVING = "leaving"
    """Still serving its range while handing it off (scale in)."""
    DEAD = "dead"
    """Marked failed; final for this incarnation (the node must rejoin as a new one)."""
    STANDBY = "standby"
    """In the provisioner's pool, ready to join; owns nothing."""


OWNING_STATUSES: Final = frozenset({Status.UP, Status.LEAVING})
"""The statuses whose members own slots; every other member is invisible to placement."""

INCARNATION_LIMIT: Final = 1 << 32
"""Incarnations are in ``[0, 2**32)``: a restart counter, uint32 on the wire."""

VERSION_LIMIT: Final = 1 << 32
"""Versions are in ``[0, 2**32)``. A version is raised once per change of an entry, so this is
never reached in practice; the bound is what lets `View.epoch` be monotone (see there)."""

TOKEN_LIMIT: Final = 1 << SLOT_BITS_MAX
"""Tokens are slots, so below the largest slot count any ring can have."""

_MEMBER_WIRE_LENGTH: Final = 7
_STATUS_BY_VALUE: Final[Mapping[str, Status]] = {status.value: status for status in Status}
_REPR_CHARS_MAX: Final = 200
"""Error messages quote untrusted input; this keeps a huge junk frame from flooding the log."""

Precedence = tuple[int, bool, int, tuple[str, str, int, str, str]]
"""The key `Member.precedence` returns; see there."""


def short_repr(obj: object) -> str:
    """``repr(obj)``, cut to ``_REPR_CHARS_MAX`` characters (it may be untrusted input)."""
    text = repr(obj)
    return text if len(text) <= _REPR_CHARS_MAX else text[:_REPR_CHARS_MAX] + "..."


def _check_int(name: str, value: object, limit: int) -> None:
    # bool is an int subclass; a True incarnation is junk, not 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(
            f"member {name} must be an int, got {type(value).__name__}: {short_repr(value)}"
        )
    if not 0 <= value < limit:
        raise ValueError(f"member {name} must be in [0, {limit}), got {value}")


def _check_str(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise TypeError(
            f"member {name} must be a str, got {type(value).__name__}: {short_repr(value)}"
        )


@dataclass(frozen=True, slots=True)
class Member:
    """One node's entry in the view: who it is, where it listens and sits, and its state.

    Guarantees: every field is validated on construction (`TypeError` for a wrong type,
    `ValueError` for a value out of range), so a `Member` in hand is well formed.
    """

    node_id: NodeId
    """The node's stable name; non-empty."""
    incarnation: Incarnation
    """Raised each time the node (re)joins with empty state; an entry of a newer incarnation
    supersedes every entry of older ones, whatever their versions."""
    addr: str
    """Where the node listens (e.g. ``"tcp://10.0.0.3:7000"``)."""
    token: Token
    """The slot the node sits at; it is primary from here up to the next owner's token."""
    zone: str
    """The fault zone (rack, host, availability zone); may be empty."""
    status: Status
    """Lifecycle state; only `OWNING_STATUSES` own slots."""
    version: int
    """Raised by every change of this entry within one incarnation."""

    def __post_init__(self) -> None:
        _check_str("node_id", self.node_id)
        if not self.node_id:
            raise ValueError("member node_id must be non-empty")
        _check_int("incarnation", self.incarnation, INCARNATION_LIMIT)
        _check_str("addr", self.addr)
        _check_int("token", self.token, TOKEN_LIMIT)
        _check_str("zone", self.zone)
        if not isinstance(self.status, Status):
            raise TypeError(
                f"member status must be a Status, got {type(self.status).__name__}: "
                f"{short_repr(self.status)}"
            )
        _check_int("version", self.version, VERSION_LIMIT)

    def precedence(self) -> Precedence:
        """The total order merge keeps the maximum of, for entries of one node.

        Highest incarnation first; within an incarnation a `dead` entry beats every live one,
        and then the highest version wins. Dead ranks above version, not below it, because
        docs/design/architecture.md#view makes dead final for its incarnation: a node cut off by a
        partition may keep raising its own version after a peer marked it dead, and must not come
        back to life when the partition heals (it learns it is dead and rejoins as a new
        incarnation: that is the fencing). It differs from "highest version wins, dead wins on
        equal versions" only where a live entry of the marked incarnation has a higher
        version than the mark, which is exactly that resurrection.

        The remaining fields come last only as a tie-break, so that two entries that agree on
        all of that but differ elsewhere (which the protocol never produces) still have a
        well-defined maximum, and merge stays commutative. Every field takes part, so equal
        precedence means equal members.
        """
        return (
            self.incarnation,
            self.status is Status.DEAD,
            self.version,
            (self.node_id, self.addr, self.token, self.zone, self.status.value),
        )

    def to_wire(self) -> list[str | int]:
        """A msgpack/JSON-ready list of the fields in declaration order.

        Guarantees: ``Member.from_wire(m.to_wire()) == m``.
        """
        return [
            self.node_id,
            self.incarnation,
            self.addr,
            self.token,
            self.zone,
            self.status.value,
            self.version,
        ]

    @classmethod
    def from_wire(cls, obj: object) -> Member:
        """Parse the output of `to_wire`, received from an untrusted peer.

        Guarantees: returns a well-formed `Member` or raises `ValueError` saying what was
        wrong; never any other exception, whatever `obj` is. Accepts a tuple as well as a
        list (msgpack can decode arrays as either).
        """
        if not isinstance(obj, list | tuple) or len(obj) != _MEMBER_WIRE_LENGTH:
            raise ValueError(
                f"a member must be a list of {_MEMBER_WIRE_LENGTH} fields "
                f"[node_id, incarnation, addr, token, zone, status, version], got {short_repr(obj)}"
            )
        node_id, incarnation, addr, token, zone, status_value, version = obj
        status = _STATUS_BY_VALUE.get(status_value) if isinstance(status_value, str) else None
        if status is None:
            raise ValueError(
                f"member status must be one of {sorted(_STATUS_BY_VALUE)}, "
                f"got {short_repr(status_value)}"
            )
        try:
            return cls(
                node_id=node_id,
                incarnation=incarnation,
                addr=addr,
                token=token,
                zone=zone,
                status=status,
                version=version,
            )
        except TypeError as error:
            raise ValueError(f"malformed member {short_repr(obj)}: {error}") from None
        except ValueError as error:
            raise ValueError(f"malformed member {short_repr(obj)}: {error}") from None
