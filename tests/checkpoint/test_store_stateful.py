"""Stateful specification of ``StateStore`` against a plain-dict model, with a live replica.

Random interleavings of writes (through ``commit`` and through ``apply_batch``, with reducers
that set, increment, append in place, delete, and one that raises after mutating its state),
deletes, duplicates, swaps, merges and slot drops. Every delta a swap produces goes through the
wire (``encode_delta`` / ``decode_delta``) into a replica store. Invariants:

- every ``get`` and ``items`` of the primary equals the model, and so does every hwm;
- a reducer that raises leaves no trace (the model never sees its changes);
- right after a swap, the replica's state and hwm vectors equal the primary's exactly, value
  types included (a list stays a list, a tuple a tuple);
- master never holds a tombstone, an empty key or an empty slot;
- a snapshot applied to an empty store reproduces the primary's slots exactly.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from smr.checkpoint.delta import TOMBSTONE, decode_delta, encode_delta
from smr.checkpoint.delta_parts import split_delta
from smr.checkpoint.ids import Key, MapperId
from smr.checkpoint.store import StateStore
from smr.ring.ids import Slot

SLOTS = [Slot(0), Slot(1), Slot(2)]
KEYS: list[Key] = ["x", "y", 7]
FIELDS = ["a", "b", "c"]
MAPPERS = [MapperId("m1"), MapperId("m2")]


class ReducerBroke(Exception):
    """Raised on purpose by the reducer, after it has mutated its state."""


values = (
    st.integers(-5, 5) | st.text(max_size=2) | st.tuples(st.integers(0, 3), st.text(max_size=1))
)
ops = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(FIELDS), values),
    st.tuples(st.just("incr"), st.sampled_from(FIELDS), st.integers(-3, 3)),
    st.tuples(st.just("del"), st.sampled_from(FIELDS)),
    st.tuples(st.just("append"), st.sampled_from(FIELDS), st.integers(0, 9)),
    st.tuples(st.just("mutate_then_raise"), st.sampled_from(FIELDS), st.integers(0, 9)),
)


def reduce_op(key: Key, op: tuple[Any, ...], state: dict[str, Any]) -> None:
    """A reducer driven by its value: ``op`` says what to do to ``state``."""
    kind, field = op[0], op[1]
    if kind == "set":
        state[field] = op[2]
    elif kind == "incr":
        state[field] = state.get(field, 0) + op[2]  # TypeError on a str or tuple: a failure
    elif kind == "del":
        state.pop(field, None)
    elif kind == "append":
        state.setdefault(field, []).append(op[2])  # AttributeError on a non-list: a failure
    else:
        for value in state.values():
            if isinstance(value, list):
                value.append(op[2])
        state[field] = [op[2]]
        state.pop(FIELDS[(FIELDS.index(field) + 1) % len(FIELDS)], None)
        raise ReducerBroke(f"after mutating {key!r}")


def exact(value: Any) -> Any:
    """A comparable form that tells apart the types ``==`` conflates (list and tuple)."""
    if isinstance(value, dict):
        return sorted(((repr(k), exact(v)) for k, v in value.items()), key=repr)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [exact(item) for item in value])
    return (type(value).__name__, value)


def states_of(store: StateStore) -> dict[tuple[Slot, Key], dict[str, Any]]:
    return {(slot, key): state for slot, key, state in store.items()}


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = StateStore()
        self.replica = StateStore()
        self.model: dict[tuple[Slot, Key], dict[str, Any]] = {}
        self.model_hwm: dict[tuple[MapperId, Slot], int] = {}

    def model_reduce(self, slot: Slot, key: Key, op: tuple[Any, ...]) -> bool:
        """Apply ``op`` to the model as the spec says: on a private copy, kept on success."""
        state = copy.deepcopy(self.model.get((slot, key), {}))
        try:
            reduce_op(key, op, state)
        except Exception:
            return False
        if state:
            self.model[slot, key] = state
        else:
            self.model.pop((slot, key), None)
        return True

    # ------------------------------------------------------------------------------ rules

    @rule(
        mapper=st.sampled_from(MAPPERS),
        tuples=st.lists(
            st.tuples(
                st.sampled_from(SLOTS),
                st.sampled_from(KEYS),
                ops,
                st.none() | st.integers(0, 3),  # None: a new seq; k: a resend k below the hwm
                st.integers(1, 2),  # gap to the next new seq
            ),
            max_size=12,
        ),
    )
    def apply_batch(
        self, mapper: MapperId, tuples: list[tuple[Slot, Key, tuple[Any, ...], int | None, int]]
    ) -> None:
        columns: tuple[list[Any], list[Any], list[Any], list[Any]] = ([], [], [], [])
        applied = duplicates = failed = 0
        failed_keys = []
        for slot, key, op, resend_back, gap in tuples:
            hwm = self.model_hwm.get((mapper, slot), 0)
            seq = max(1, hwm - resend_back) if resend_back is not None else hwm + gap
            for column, item in zip(columns, (slot, seq, key, op), strict=True):
                column.append(item)
            if seq <= hwm:
                duplicates += 1
                continue
            self.model_hwm[mapper, slot] = seq
            if self.model_reduce(slot, key, op):
                applied += 1
            else:
                failed += 1
                failed_keys.append(key)
        outcome = self.store.apply_batch(mapper, *columns, reduce_op)
        assert (outcome.applied, outcome.duplicates, outcome.failed) == (
            applied,
            duplicates,
            failed,
        )
        assert [key for key, _ in outcome.failures] == failed_keys

    @rule(slot=st.sampled_from(SLOTS), key=st.sampled_from(KEYS), op=ops)
    def commit(self, slot: Slot, key: Key, op: tuple[Any, ...]) -> None:
        state = self.store.read(slot, key)
        before = dict(state)
        try:
            reduce_op(key, op, state)
        except Exception:
            pass  # The caller drops its copy: nothing to commit.
        else:
            self.store.commit(slot, key, before, state)
        self.model_reduce(slot, key, op)

    @rule(slot=st.sampled_from(SLOTS), key=st.sampled_from(KEYS))
    def delete(self, slot: Slot, key: Key) -> None:
        self.store.delete(slot, key)
        self.model.pop((slot, key), None)

    @rule()
    def swap(self) -> None:
        if self.store.inactive:
            with pytest.raises(RuntimeError):
                self.store.swap()
            return
        self.ship(self.store.swap())

    @rule()
    def merge_inactive(self) -> None:
        self.store.merge_inactive()

    @rule(max_keys=st.integers(1, 3))
    def merge_inactive_partly(self, max_keys: int) -> None:
        """A step of a merge spread over turns: reads stay the model's (the invariants)."""
        assert self.store.merge_inactive(max_keys) == (not self.store.inactive)

    @precondition(lambda self: not self.store.inactive)
    @rule(keys_per_part=st.integers(1, 4), max_keys=st.integers(1, 3))
    def checkpoint_in_parts(self, keys_per_part: int, max_keys: int) -> None:
        """The node's cycle with the delta shipped in parts while the merge runs in steps:
        the delta handed out stays as it was, and the parts bring the replica level."""
        delta = self.store.swap()
        states_before = copy.deepcopy(delta.states)
        self.store.merge_inactive(max_keys)
        assert exact(delta.states) == exact(states_before)
        for part, _ in split_delta(delta, keys_per_part):
            self.replica.apply_delta(decode_delta(encode_delta(part)))
        assert exact(states_of(self.replica)) == exact(states_of(self.store))
        for slot in self.store.slots() | self.replica.slots():
            assert self.replica.hwm_vector(slot) == self.store.hwm_vector(slot)

    @rule()
    def checkpoint(self) -> None:
        """The node's cycle: merge anything pending, then swap, ship, merge."""
        self.store.merge_inactive()
        self.ship(self.store.swap())
        self.store.merge_inactive()
        assert self.store.inactive == {}

    @rule(slot=st.sampled_from(SLOTS))
    def drop_slot(self, slot: Slot) -> None:
        """The slot's range moved away: primary and replica both forget it."""
        self.store.drop_slots([slot])
        self.replica.drop_slots([slot])
        self.model = {k: v for k, v in self.model.items() if k[0] != slot}
        self.model_hwm = {k: v for k, v in self.model_hwm.items() if k[1] != slot}

    @precondition(lambda self: self.store.slots())
    @rule(data=st.data())
    def snapshot_reproduces_slots(self, data: st.DataObject) -> None:
        slots = data.draw(st.sets(st.sampled_from(sorted(self.store.slots()))))
        target = StateStore()
        target.apply_delta(decode_delta(encode_delta(self.store.snapshot(slots))))
        assert exact(states_of(target)) == exact(
            {k: v for k, v in states_of(self.store).items() if k[0] in slots}
        )
        for slot in slots:
            assert target.hwm_vector(slot) == self.store.hwm_vector(slot)

    def ship(self, delta: Any) -> None:
        """Send a swap's delta over the wire to the replica, then check it caught up."""
        self.replica.apply_delta(decode_delta(encode_delta(delta)))
        # Right after a swap, everything written so far is in the delta or was shipped
        # before: the replica must equal the primary exactly.
        assert exact(states_of(self.replica)) == exact(states_of(self.store))
        for slot in self.store.slots() | self.replica.slots():
            assert self.replica.hwm_vector(slot) == self.store.hwm_vector(slot)

    # ------------------------------------------------------------------------- invariants

    @invariant()
    def reads_equal_the_model(self) -> None:
        for slot in SLOTS:
            for key in KEYS:
                assert self.store.get(slot, key) == self.model.get((slot, key))
        assert exact(states_of(self.store)) == exact(self.model)
        assert self.store.key_count() == len(self.model)

    @invariant()
    def hwms_equal_the_model(self) -> None:
        for mapper in MAPPERS:
            for slot in SLOTS:
                assert self.store.hwm(mapper, slot) == self.model_hwm.get((mapper, slot), 0)

    @invariant()
    def master_holds_no_tombstone_and_nothing_empty(self) -> None:
        for store in (self.store, self.replica):
            for keys in store.master.values():
                assert keys
                for fields in keys.values():
                    assert fields
                    assert all(value is not TOMBSTONE for value in fields.values())


StoreMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreAgainstModel = StoreMachine.TestCase
