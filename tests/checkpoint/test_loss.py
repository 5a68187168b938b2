"""Loss marks: which slots a takeover finds uncovered, and how a mark travels and rises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from smr.checkpoint.loss import (
    ACCEPTED,
    LOSS_MARK,
    LOST,
    LossLedger,
    accept_loss,
    lost_slots,
    mark_lost,
    uncovered_slots,
)
from smr.checkpoint.store import StateStore
from smr.ring.ids import Slot

slot_sets = st.sets(st.integers(0, 63).map(Slot), max_size=40)


@given(slot_sets, st.lists(slot_sets, max_size=4))
def test_uncovered_slots_are_the_taken_ones_no_copy_holds(
    taken: set[Slot], covered: list[set[Slot]]
) -> None:
    union = set().union(*covered) if covered else set()
    assert uncovered_slots(taken, covered) == taken - union


@given(slot_sets, slot_sets)
def test_a_mark_replicates_with_the_slot_and_accepting_only_raises_it(
    lost: set[Slot], accepted: set[Slot]
) -> None:
    primary = StateStore()
    mark_lost(primary, lost)
    assert lost_slots(primary) == lost
    # The marks ride the hwm vectors: a replica fed the delta knows them too.
    replica = StateStore()
    replica.apply_delta(primary.swap())
    assert lost_slots(replica) == lost
    assert accept_loss(primary, accepted) == len(lost & accepted)
    assert lost_slots(primary) == lost - accepted
    # Marking again never undoes an acceptance: the mark only rises.
    mark_lost(primary, lost)
    assert lost_slots(primary) == lost - accepted
    replica.apply_delta(primary.swap())
    assert lost_slots(replica) == lost - accepted
    for slot in lost & accepted:
        assert replica.hwm(LOSS_MARK, slot) == ACCEPTED


def test_a_lost_slot_holds_no_key_but_counts_among_the_store_slots() -> None:
    store = StateStore()
    mark_lost(store, [Slot(3)])
    assert store.hwm(LOSS_MARK, Slot(3)) == LOST
    assert store.key_count() == 0
    assert Slot(3) in store.slots()
    assert store.snapshot([Slot(3)]).hwms == {Slot(3): {LOSS_MARK: LOST}}


@given(slot_sets, slot_sets, slot_sets)
def test_the_ledger_holds_exactly_the_slots_the_store_marks_lost(
    lost: set[Slot], accepted: set[Slot], asked: set[Slot]
) -> None:
    store, ledger = StateStore(), LossLedger()
    ledger.mark(store, lost)
    assert ledger.slots == lost and ledger.count() == len(lost)
    assert ledger.lost_among(asked) == lost & asked
    assert all(ledger.is_lost(slot) == (slot in lost) for slot in asked)
    assert ledger.count_where(lambda slot: slot < 32) == sum(1 for slot in lost if slot < 32)
    assert ledger.accept(store, accepted) == len(lost & accepted)
    assert ledger.slots == lost_slots(store) == lost - accepted
    # A store restored from a copy of the marks (a restart, a promotion) brings them back.
    restored = StateStore()
    restored.apply_delta(store.snapshot(store.slots()))
    assert LossLedger().rebuild(restored) == lost - accepted
    # A new, empty store holds no loss.
    assert ledger.rebuild(StateStore()) == frozenset()
