"""The operator's commands a fault schedule can hold beside its faults (:mod:`smr.faults`):
a :class:`Move` (or a leave) and a :class:`Join`, played at their time against the nodes as
``smr move``, ``smr scale in`` and ``smr scale out`` would. Plain data, like the faults."""

from __future__ import annotations

from dataclasses import dataclass

from smr.ring.ids import NodeId


def check_time(name: str, value: int, minimum: int = 0) -> None:
    """ValueError unless ``value`` is an int (not a bool) of at least ``minimum`` ms."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum} (milliseconds), got {value!r}")


@dataclass(frozen=True)
class Move:
    """At ``at_ms``, ask ``node`` to move the top of its range to its clockwise neighbour,
    about ``fraction_ppm`` millionths of its load, or all of it (``leave``: the node then
    owns nothing). A move the node cannot make now is refused, which is no failure."""

    node: NodeId
    at_ms: int
    fraction_ppm: int = 500_000
    leave: bool = False

    def __post_init__(self) -> None:
        check_time("at_ms", self.at_ms)
        if not 0 < self.fraction_ppm < 1_000_000:
            raise ValueError(f"fraction_ppm must be in (0, 1000000), got {self.fraction_ppm!r}")

    @property
    def end_ms(self) -> int:
        """An instant (the move itself takes what it takes)."""
        return self.at_ms

    def describe(self) -> str:
        """One line: when and what."""
        if self.leave:
            return f"{self.at_ms:>7} ms  {self.node} leaves the ring"
        share = self.fraction_ppm / 10_000
        return f"{self.at_ms:>7} ms  {self.node} moves {share:g}% of its load clockwise"


@dataclass(frozen=True)
class Join:
    """At ``at_ms``, ask the standby ``node`` to join the ring beside ``beside`` (taking the
    top of its range once caught up). A join the nodes cannot make now is refused."""

    node: NodeId
    beside: NodeId
    at_ms: int

    def __post_init__(self) -> None:
        check_time("at_ms", self.at_ms)

    @property
    def end_ms(self) -> int:
        """An instant (the join itself takes what it takes)."""
        return self.at_ms

    def describe(self) -> str:
        """One line: when and what."""
        return f"{self.at_ms:>7} ms  {self.node} joins beside {self.beside}"
