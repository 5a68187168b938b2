"""Loss beyond tolerance, made loud and durable (docs/design/architecture.md#failures).

When more adjacent nodes fail than the replication factor, the node that takes over a range
may hold no copy of some of its slots: their state is gone. Those slots must not come back
empty in silence. They are marked *lost* in the state itself, as the hwm of a reserved
mapper id (:data:`LOSS_MARK`) in each lost slot, so the mark travels wherever the slot's
state goes (checkpoints, snapshots, promotion after a later failure) with no machinery of its
own, and a node refuses tuples for a lost slot until an operator accepts the loss.

The mark's hwm says where the slot stands, and only ever rises, like any hwm:

- ``LOST`` (1): the slot's state was lost; tuples for it are refused.
- ``ACCEPTED`` (2): the slot serves again: an operator accepted the loss (``smr recover
  --accept-loss``) and it starts from empty state, or its state came back from the copy that
  a node wrongly declared dead still held (:func:`restore_lost`).

A node asks what is lost of one place, its :class:`LossLedger`: the slots its store marks
lost, read from the marks whenever they may change (a takeover, a promotion, an acceptance,
a restore from a peer's copy or from disk, a fence). Reads, intake, ``status``, metrics and
``recover`` all ask it; nothing else keeps a set of lost slots.

Pure logic: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from smr.checkpoint.delta import Delta
from smr.checkpoint.ids import MapperId, Seq, Slot
from smr.checkpoint.store import StateStore

RESERVED_MAPPER_PREFIX: Final = "smr:"
"""Mapper ids starting with this are the engine's own; a node refuses batches that use one."""

LOSS_MARK: Final = MapperId(RESERVED_MAPPER_PREFIX + "loss")
"""The reserved mapper id whose hwm in a slot marks the slot's state as lost."""

LOST: Final = Seq(1)
ACCEPTED: Final = Seq(2)


def uncovered_slots(taken: Iterable[Slot], covered: Iterable[Iterable[Slot]]) -> set[Slot]:
    """The slots of ``taken`` (a range being taken over) that none of the ``covered`` slot
    sets holds: no copy of their state exists on the taking node."""
    missing = set(taken)
    for slots in covered:
        missing.difference_update(slots)
        if not missing:
            break
    return missing


def mark_lost(store: StateStore, slots: Iterable[Slot]) -> None:
    """Mark ``slots`` lost in ``store`` (a slot already accepted stays accepted: the mark
    never goes down)."""
    for slot in slots:
        store.raise_hwm(LOSS_MARK, slot, LOST)


def lost_slots(store: StateStore) -> set[Slot]:
    """The slots of ``store`` marked lost and not accepted yet."""
    return {slot for slot, mark in store.hwms_of(LOSS_MARK).items() if mark == LOST}


def accept_loss(store: StateStore, slots: Iterable[Slot]) -> int:
    """Accept the loss of those of ``slots`` marked lost in ``store``; how many they were."""
    accepted = 0
    marks = store.hwms_of(LOSS_MARK)
    for slot in slots:
        if marks.get(slot) == LOST:
            store.raise_hwm(LOSS_MARK, slot, ACCEPTED)
            accepted += 1
    return accepted


def restore_lost(store: StateStore, copy: Delta, slots: Iterable[Slot]) -> set[Slot]:
    """Bring back the lost ``slots`` of ``store`` from ``copy``, a snapshot of them taken
    from the last primary that held them (a node declared dead while alive, which kept its
    state when it was fenced). Returns the slots restored: those of ``slots`` marked lost in
    ``store`` and not in ``copy`` (a copy marked lost itself holds nothing to restore).

    Each restored slot gets the copy's state, hwm vector and watermark and serves again
    (``ACCEPTED``): its tuples that the copy already holds are dropped as duplicates when
    resent.
    """
    lost = lost_slots(store)
    restorable = {
        slot for slot in slots if slot in lost and copy.hwms.get(slot, {}).get(LOSS_MARK) != LOST
    }
    if not restorable:
        return set()
    store.apply_delta(
        Delta(
            states={slot: keys for slot, keys in copy.states.items() if slot in restorable},
            hwms={slot: vector for slot, vector in copy.hwms.items() if slot in restorable},
            watermarks={slot: m for slot, m in copy.watermarks.items() if slot in restorable},
        )
    )
    for slot in restorable:
        store.raise_hwm(LOSS_MARK, slot, ACCEPTED)
    return restorable


class LossLedger:
    """The slots of a node's store that are lost and not accepted yet: the one place a node
    asks what is lost (module docstring).

    Guarantees: after each of its changing methods, and after :meth:`rebuild`, the ledger
    holds exactly the slots the store marks ``LOST``; a slot leaves it only through
    :meth:`accept` (an operator's word) or :meth:`restore` (its state came back from a
    copy), or when the store it was read from is replaced (a fence hands the range to its
    taker, whose ledger holds it).
    """

    def __init__(self) -> None:
        self._lost: frozenset[Slot] = frozenset()

    def rebuild(self, store: StateStore) -> frozenset[Slot]:
        """Read the lost slots from ``store``'s loss marks (a restored store, a promotion,
        a new store); the slots now lost."""
        self._lost = frozenset(lost_slots(store))
        return self._lost

    @property
    def slots(self) -> frozenset[Slot]:
        """Every slot lost here."""
        return self._lost

    def count(self) -> int:
        """How many slots are lost here."""
        return len(self._lost)

    def is_lost(self, slot: int) -> bool:
        """Whether ``slot`` is lost here."""
        return slot in self._lost

    def lost_among(self, slots: Iterable[int]) -> set[Slot]:
        """The slots of ``slots`` that are lost here."""
        if not self._lost:
            return set()
        return {Slot(slot) for slot in slots if slot in self._lost}

    def count_where(self, contains: Callable[[Slot], bool]) -> int:
        """How many lost slots ``contains`` holds (a range's ``contains``)."""
        return sum(1 for slot in self._lost if contains(slot))

    def mark(self, store: StateStore, slots: Iterable[Slot]) -> None:
        """Mark ``slots`` lost in ``store`` (:func:`mark_lost`)."""
        mark_lost(store, slots)
        self.rebuild(store)

    def accept(self, store: StateStore, slots: Iterable[Slot]) -> int:
        """An operator accepts the loss of ``slots`` (:func:`accept_loss`): how many of them
        were lost and now serve again, empty."""
        accepted = accept_loss(store, slots)
        self.rebuild(store)
        return accepted

    def restore(self, store: StateStore, copy: Delta, slots: Iterable[Slot]) -> set[Slot]:
        """Bring lost ``slots`` back from ``copy`` (:func:`restore_lost`); the slots
        restored."""
        restored = restore_lost(store, copy, slots)
        self.rebuild(store)
        return restored
