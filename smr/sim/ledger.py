"""The feed's ledger: per key, how many of its tuples the mappers emitted and how many were
acknowledged so far, the bounds a read that runs beside the writes is checked against
(docs/design/simulation.md#readers)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass


class FeedLedger:
    """Per key, how many of its tuples the mappers emitted and how many were acknowledged so
    far (the bounds of a read). The feed reports its progress through
    :meth:`emitting` and :meth:`acked`; positions only grow."""

    def __init__(self) -> None:
        # Per mapper: key -> the positions (0-based) of its tuples in the mapper's words.
        self._positions: list[dict[str, list[int]]] = []
        self._emitted: list[int] = []
        self._acked: list[int] = []

    def add_mapper(self, words: Sequence[str]) -> MapperProgress:
        """Register a mapper's words; what its feed reports its progress through."""
        positions: dict[str, list[int]] = {}
        for position, word in enumerate(words):
            positions.setdefault(word, []).append(position)
        self._positions.append(positions)
        self._emitted.append(0)
        self._acked.append(0)
        return MapperProgress(self, len(self._positions) - 1)

    def emitting(self, mapper: int, through: int) -> None:
        """Mapper ``mapper`` may have emitted its words up to position ``through`` (exclusive)."""
        self._emitted[mapper] = max(self._emitted[mapper], through)

    def acked(self, mapper: int, through: int) -> None:
        """Every word of mapper ``mapper`` up to ``through`` (exclusive) was acknowledged."""
        self._acked[mapper] = max(self._acked[mapper], through)
        self.emitting(mapper, through)

    def floor(self, key: str) -> int:
        """The acknowledged tuples of ``key``."""
        return self._count(key, self._acked)

    def ceiling(self, key: str) -> int:
        """The emitted tuples of ``key`` (an upper bound)."""
        return self._count(key, self._emitted)

    def _count(self, key: str, through: list[int]) -> int:
        total = 0
        for positions, end in zip(self._positions, through, strict=True):
            found = positions.get(key)
            if found:
                total += bisect_left(found, end)
        return total

    def keys(self) -> list[str]:
        """Every key a mapper emits, sorted."""
        return sorted({key for positions in self._positions for key in positions})


@dataclass(frozen=True)
class MapperProgress:
    """One mapper's feed reporting to the ledger (:meth:`FeedLedger.emitting`, ``acked``)."""

    ledger: FeedLedger
    mapper: int

    def emitting(self, through: int) -> None:
        """The words up to ``through`` (exclusive) may have been emitted."""
        self.ledger.emitting(self.mapper, through)

    def acked(self, through: int) -> None:
        """The words up to ``through`` (exclusive) were acknowledged."""
        self.ledger.acked(self.mapper, through)
