"""Faults as data: typed faults with targets, start times and durations, and the operator's
commands a schedule also holds (``Move``, ``Join``); a :class:`FaultSchedule` is a sorted
list of them (docs/design/faults.md#faults).

Nothing here does I/O or knows how a fault is carried out (node ids are strings, times are
milliseconds from the start of a run), so the simulation and the process and Docker backends
play the same values. Which schedules the ring must survive: docs/design/faults.md#tolerance.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, TypeAlias

from smr.faults.commands import Join, Move
from smr.faults.commands import check_time as _check_time
from smr.ring.ids import NodeId

__all__ = [
    "Delay",
    "Fault",
    "FaultSchedule",
    "Forge",
    "Join",
    "Kill",
    "Move",
    "Partition",
    "Pause",
    "Stall",
    "Starve",
]


@dataclass(frozen=True)
class Kill:
    """Kill ``node`` at ``at_ms``, for good."""

    node: NodeId
    at_ms: int

    def __post_init__(self) -> None:
        _check_time("at_ms", self.at_ms)

    @property
    def end_ms(self) -> int:
        """When the fault stops acting: a kill is instant (its effect is permanent)."""
        return self.at_ms

    def describe(self) -> str:
        """One line: when and what."""
        return f"{self.at_ms:>7} ms  kill {self.node}"


@dataclass(frozen=True)
class Forge:
    """At ``at_ms``, hand ``node`` a forged view that marks ``victim`` dead with nobody
    taking it over, as any local process could send one: the node must refuse it (it would
    serve the victim's slots from empty state), so it loses nobody."""

    node: NodeId
    victim: NodeId
    at_ms: int

    def __post_init__(self) -> None:
        _check_time("at_ms", self.at_ms)

    @property
    def end_ms(self) -> int:
        """An instant."""
        return self.at_ms

    def describe(self) -> str:
        """One line: when and what."""
        return f"{self.at_ms:>7} ms  forge a view at {self.node} marking {self.victim} dead"


@dataclass(frozen=True)
class _NodeSpan:
    """A fault that holds one ``node`` from ``at_ms`` for ``duration_ms``."""

    node: NodeId
    at_ms: int
    duration_ms: int
    VERB: ClassVar[str] = ""

    def __post_init__(self) -> None:
        _check_time("at_ms", self.at_ms)
        _check_time("duration_ms", self.duration_ms, 1)

    @property
    def end_ms(self) -> int:
        """When it lets go of the node."""
        return self.at_ms + self.duration_ms

    def describe(self) -> str:
        """One line: when and what."""
        return f"{self.at_ms:>7} ms  {self.VERB} {self.node} for {self.duration_ms} ms"


@dataclass(frozen=True)
class Pause(_NodeSpan):
    """Pause ``node`` from ``at_ms`` for ``duration_ms`` (SIGSTOP, then SIGCONT)."""

    VERB: ClassVar[str] = "pause"


@dataclass(frozen=True)
class Stall(_NodeSpan):
    """Stall ``node``'s event loop from ``at_ms`` for ``duration_ms``: one reduce call that
    takes that long (a slow lookup, a GC pause). The node reads nothing and runs no timer
    meanwhile, but it is alive: its heartbeats go on from a thread of their own, so it must
    not be declared dead for being slow (docs/design/architecture.md#failures, "slow is not
    dead")."""

    VERB: ClassVar[str] = "stall"


@dataclass(frozen=True)
class Starve(_NodeSpan):
    """Starve ``node`` of CPU from ``at_ms`` for ``duration_ms``: the whole process (its loop
    and its heartbeat thread) runs only in turns, ``gap_ms`` without the CPU, then one timer
    tick with it, as on a machine loaded past its cores. Slow, not dead: every gap is far
    shorter than the failure timeout, and after each the node beats and reads again."""

    gap_ms: int = 100
    VERB: ClassVar[str] = "starve"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_time("gap_ms", self.gap_ms, 1)

    @property
    def lateness_ms(self) -> int:
        """How late the node may answer or beat, at most."""
        return self.gap_ms

    def describe(self) -> str:
        """One line: when and what."""
        return f"{super().describe()} (gaps of {self.gap_ms} ms)"


@dataclass(frozen=True)
class Partition:
    """Cut ``group_a`` off from ``group_b`` from ``at_ms`` for ``duration_ms``.

    Guarantees: both groups are non-empty, disjoint and sorted (so equal partitions compare
    equal whatever order their members were given in).
    """

    group_a: tuple[NodeId, ...]
    group_b: tuple[NodeId, ...]
    at_ms: int
    duration_ms: int

    def __post_init__(self) -> None:
        _check_time("at_ms", self.at_ms)
        _check_time("duration_ms", self.duration_ms, 1)
        if not self.group_a or not self.group_b:
            raise ValueError(f"both groups of a partition must be non-empty: {self!r}")
        if set(self.group_a) & set(self.group_b):
            shared = sorted(set(self.group_a) & set(self.group_b))
            raise ValueError(f"partition groups must be disjoint; both hold {shared}")
        object.__setattr__(self, "group_a", tuple(sorted(self.group_a)))
        object.__setattr__(self, "group_b", tuple(sorted(self.group_b)))

    @property
    def end_ms(self) -> int:
        """When the groups hear each other again."""
        return self.at_ms + self.duration_ms

    def separates(self, a: str, b: str) -> bool:
        """Whether a message between ``a`` and ``b`` crosses the cut."""
        return (a in self.group_a and b in self.group_b) or (
            a in self.group_b and b in self.group_a
        )

    def describe(self) -> str:
        """One line: when and what."""
        return (
            f"{self.at_ms:>7} ms  partition [{' '.join(self.group_a)}] | "
            f"[{' '.join(self.group_b)}] for {self.duration_ms} ms"
        )


@dataclass(frozen=True)
class Delay:
    """Delay every message to or from ``node`` by ``extra_ms`` more, from ``at_ms`` for
    ``duration_ms``; order on each connection is kept."""

    node: NodeId
    at_ms: int
    duration_ms: int
    extra_ms: int

    def __post_init__(self) -> None:
        _check_time("at_ms", self.at_ms)
        _check_time("duration_ms", self.duration_ms, 1)
        _check_time("extra_ms", self.extra_ms, 1)

    @property
    def end_ms(self) -> int:
        """When messages stop being delayed (those already delayed still arrive late)."""
        return self.at_ms + self.duration_ms

    @property
    def lateness_ms(self) -> int:
        """How much later than usual the node's messages arrive."""
        return self.extra_ms

    def describe(self) -> str:
        """One line: when and what."""
        return (
            f"{self.at_ms:>7} ms  delay {self.node} by {self.extra_ms} ms for {self.duration_ms} ms"
        )


Fault: TypeAlias = Kill | Pause | Stall | Starve | Forge | Partition | Delay | Move | Join
"""Any one fault."""

_KIND_NAMES: Final[dict[type[Any], str]] = {
    Kill: "kill",
    Pause: "pause",
    Stall: "stall",
    Starve: "starve",
    Forge: "forge",
    Partition: "partition",
    Delay: "delay",
    Move: "move",
    Join: "join",
}


def _order(fault: Fault) -> tuple[int, str, str]:
    # Start time, then kind, then text: a total order that needs no hashing of str.
    return fault.at_ms, _KIND_NAMES[type(fault)], fault.describe()


@dataclass(frozen=True)
class FaultSchedule:
    """Faults sorted by start time (then kind and target, so the order is total).

    Guarantees: ``faults`` is sorted; equal schedules compare equal; ``describe()`` prints
    one line per fault, enough to rebuild the schedule by hand.
    """

    faults: tuple[Fault, ...] = field(default=())

    def __post_init__(self) -> None:
        for fault in self.faults:
            if type(fault) not in _KIND_NAMES:
                raise TypeError(f"a FaultSchedule holds faults, got {type(fault).__name__}")
        object.__setattr__(self, "faults", tuple(sorted(self.faults, key=_order)))

    def __iter__(self) -> Iterator[Fault]:
        return iter(self.faults)

    def __len__(self) -> int:
        return len(self.faults)

    def with_fault(self, fault: Fault) -> FaultSchedule:
        """This schedule with ``fault`` added."""
        return FaultSchedule((*self.faults, fault))

    @property
    def end_ms(self) -> int:
        """When the last fault stops acting (0 for an empty schedule)."""
        return max((fault.end_ms for fault in self.faults), default=0)

    def describe(self) -> str:
        """The schedule as text, one fault per line."""
        if not self.faults:
            return "fault schedule: no faults"
        lines = [f"fault schedule ({len(self.faults)} faults):"]
        lines.extend(f"  {fault.describe()}" for fault in self.faults)
        return "\n".join(lines)

    def to_wire(self) -> list[dict[str, Any]]:
        """A JSON-ready list, one map per fault with its ``kind``."""
        wire: list[dict[str, Any]] = []
        for fault in self.faults:
            item: dict[str, Any] = {"kind": _KIND_NAMES[type(fault)]}
            for name, value in vars(fault).items():
                item[name] = list(value) if isinstance(value, tuple) else value
            wire.append(item)
        return wire

    @classmethod
    def from_wire(cls, wire: Iterable[dict[str, Any]]) -> FaultSchedule:
        """Parse ``to_wire``'s output; ``ValueError`` saying which item is wrong."""
        faults: list[Fault] = []
        kinds = {name: kind for kind, name in _KIND_NAMES.items()}
        for index, item in enumerate(wire):
            try:
                fields = dict(item)
                kind = kinds[fields.pop("kind")]
                for name in ("group_a", "group_b"):
                    if name in fields:
                        fields[name] = tuple(NodeId(node) for node in fields[name])
                faults.append(kind(**fields))
            except (KeyError, TypeError, ValueError) as error:
                raise ValueError(f"fault {index} ({item!r}) is malformed: {error}") from None
        return cls(tuple(faults))
