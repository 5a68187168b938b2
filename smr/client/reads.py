"""Reads of a cluster's state from each key's primary, the only node whose state for the key
is current: keys by query, every key by pages of slots; a node that does not answer, or is no
longer the primary, asked again by a fresher view until the read's timeout. A lost slot is
never read as empty (:class:`~smr.client.control.SlotsLost`, or skipped and named)."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from smr.client.control import (
    QUERY_KEYS_MAX,
    Client,
    LostSlotsSkipped,
    NodeUnreachable,
    SlotsLost,
    describe_slots,
)
from smr.ring.hashing import slot_of
from smr.ring.ids import Slot
from smr.ring.placement import Ring
from smr.ring.view import View

SCAN_PAGE_KEYS: Final = 10_000
"""Keys a scan asks of a node at once."""


class Unreachable(NodeUnreachable):
    """A call could not reach the nodes it needed within its timeout (the message names
    them, or the slot or key it could not read)."""


class StateReader:
    """A connection's reads of state (``smr.connection.Cluster`` delegates ``get_many`` and
    ``scan`` to it): ``view(refresh=False)`` is the connection's view, refreshed as the reads
    meet a moved range or a silent node; ``timeout_s`` bounds each wait for a newer view."""

    def __init__(
        self, client: Client, view: Callable[..., View], slot_bits: int, timeout_s: float
    ) -> None:
        self._client = client
        self._view = view
        self.slot_bits = slot_bits
        self.timeout_s = timeout_s
        self.skipped_lost_slots: frozenset[int] = frozenset()
        """The lost slots the last read with ``allow_lost=True`` left out (empty if none)."""

    def get_many(
        self, keys: Iterable[str | int], *, allow_lost: bool = False
    ) -> dict[str | int, dict[str, Any] | None]:
        """``Cluster.get_many``: each key's state from its primary (its docstring says how)."""
        wanted = list(dict.fromkeys(checked_key(key) for key in keys))
        self.skipped_lost_slots = frozenset()
        states: dict[str | int, dict[str, Any] | None] = {}
        lost: dict[str | int, int] = {}
        deadline = time.monotonic() + self.timeout_s
        pending = wanted
        while pending:
            ring = Ring(self._view(), self.slot_bits)
            by_addr: dict[str, list[str | int]] = {}
            for key in pending:
                primary = ring.primary(Slot(slot_of(key, self.slot_bits)))
                by_addr.setdefault(ring.view.members[primary].addr, []).append(key)
            retry: list[str | int] = []
            failures: list[str] = []
            for round_keys in _rounds(by_addr, QUERY_KEYS_MAX):
                for addr, answer in self._client.query_each(round_keys).items():
                    if isinstance(answer, Exception):
                        failures.append(str(answer))
                        retry.extend(round_keys[addr])
                        continue
                    for key, entry in zip(round_keys[addr], answer, strict=True):
                        if not entry["owner"]:
                            retry.append(key)
                            continue
                        states[key] = _state(entry["state"])
                        if entry.get("lost"):
                            lost[key] = entry["slot"]
            pending = retry
            if pending:
                self.wait_for_view(deadline, f"{len(pending)} keys", failures)
        if lost:
            self._lost_read(lost.values(), allow_lost, keys=lost)
        return {key: states[key] for key in wanted}

    def _lost_read(
        self, slots: Iterable[int], allow_lost: bool, keys: Iterable[str | int] = ()
    ) -> None:
        """A read met lost ``slots``: raise :class:`SlotsLost`, or with ``allow_lost``
        record them as skipped and warn."""
        if not allow_lost:
            raise SlotsLost(slots, keys)
        self.skipped_lost_slots = frozenset(slots)
        warnings.warn(
            f"the read left out {len(self.skipped_lost_slots):,} lost slots "
            f"({describe_slots(self.skipped_lost_slots)}): their state is gone",
            LostSlotsSkipped,
            stacklevel=4,
        )

    def scan(
        self, prefix: str | None = None, *, allow_lost: bool = False
    ) -> Iterator[tuple[str | int, dict[str, Any]]]:
        """``Cluster.scan``: every ``(key, state)``, slot by slot (its docstring says how)."""
        slot_count = 1 << self.slot_bits
        slot = 0
        deadline = time.monotonic() + self.timeout_s
        self.skipped_lost_slots = frozenset()
        skipped: set[int] = set()
        while slot < slot_count:
            ring = Ring(self._view(), self.slot_bits)
            primary = ring.primary(Slot(slot))
            end = slot + 1
            while end < slot_count and ring.primary(Slot(end)) == primary:
                end += 1
            addr = ring.view.members[primary].addr
            try:
                entries, next_start, lost_until = self._client.dump_page(
                    addr, Slot(slot), Slot(end), SCAN_PAGE_KEYS
                )
            except NodeUnreachable as error:
                self.wait_for_view(deadline, f"slot {slot}", [str(error)])
                continue
            if lost_until is not None and next_start is not None and not allow_lost:
                raise SlotsLost(range(next_start, lost_until))
            for key, state in entries:
                if prefix is None or (isinstance(key, str) and key.startswith(prefix)):
                    yield key, state
            if lost_until is not None and next_start is not None:
                skipped.update(range(next_start, lost_until))
                slot = lost_until
            elif next_start == slot:
                # The node is not this slot's primary any more: a newer view says who is.
                self.wait_for_view(deadline, f"slot {slot}", [f"{primary} moved it"])
                continue
            else:
                slot = end if next_start is None else next_start
            deadline = time.monotonic() + self.timeout_s
        if skipped:
            self._lost_read(skipped, allow_lost)

    def wait_for_view(self, deadline: float, what: str, failures: list[str]) -> None:
        """Pause briefly and ask for a newer view, or raise Unreachable past ``deadline``."""
        if time.monotonic() >= deadline:
            reasons = "; ".join(dict.fromkeys(failures)) or "no answer"
            raise Unreachable(f"could not read {what} within {self.timeout_s} s: {reasons}")
        time.sleep(0.05)
        with contextlib.suppress(Unreachable):
            self._view(refresh=True)


def checked_key(key: Any) -> str | int:
    """``key`` if it can be a key (a str, or an int that is not a bool); TypeError if not."""
    if key.__class__ is str or key.__class__ is int:
        return key
    raise TypeError(f"a key is a str or an int, not {type(key).__name__}: {key!r}")


def _state(raw: Any) -> dict[str, Any] | None:
    return None if raw is None else dict(raw)


def _rounds(
    keys_by_addr: dict[str, list[str | int]], per_request: int
) -> Iterator[dict[str, list[str | int]]]:
    """The keys of each address split into requests of at most ``per_request`` keys, one
    request per address per round."""
    offset = 0
    while True:
        round_keys = {
            addr: keys[offset : offset + per_request]
            for addr, keys in keys_by_addr.items()
            if len(keys) > offset
        }
        if not round_keys:
            return
        yield round_keys
        offset += per_request
