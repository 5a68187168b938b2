"""Per-slot keyed state of one node, in three fragments, with per-slot dedup
(docs/design/architecture.md#state).

The life of a tuple here: the node hands a batch from one mapper to ``StateStore.apply_batch``,
which drops duplicates by the ``(mapper, slot)`` high-water mark (hwm), reduces the rest into
the ``active`` fragment, and records which slots' hwm moved. Every checkpoint interval the node
runs the checkpoint cycle:

1. ``delta = store.swap()``: ``active`` becomes ``inactive`` and a new empty ``active`` takes
   the writes that follow; the delta holds the inactive fragment and the moved hwm vectors.
2. The node encodes the delta (``checkpoint.delta.encode_delta``) and sends it, numbered, to
   the range's secondaries, which ``apply_delta`` it to their replica store.
3. ``store.merge_inactive()`` folds the inactive fragment into ``master``.

No step waits for the network, and the event loop is single-threaded, so a swap happens between
two tuples and never pauses processing.

Field values are shared between fragments and deltas but never mutated in place by the store:
values of mutable types (list, dict, set, bytearray and their subclasses) are deep-copied when
read, so a reducer that mutates them in place mutates its own copy. Values of other mutable
types (a deque, a custom object, a list inside a tuple) must be replaced, never mutated in
place, or the change may be lost.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from smr.checkpoint.apply import (
    FAILURE_EXAMPLES_MAX,
    MUTABLE_TYPES,
    NO_FIELDS,
    BatchOutcome,
    ReduceFn,
    apply_tuples,
)
from smr.checkpoint.delta import PLAIN_TYPES, TOMBSTONE, Delta, SlotTableFactory, merge_into
from smr.checkpoint.ids import Fragment, Key, MapperId, Seq, Slot
from smr.checkpoint.kernels import IN_FORCE
from smr.checkpoint.marks import Marks
from smr.checkpoint.watermarks import WatermarkRecord, WatermarkRecords


class _InForce:
    """The default of ``StateStore(slot_table=...)``: the factory in force (``IN_FORCE``)."""


IN_FORCE_TABLE: Final = _InForce()

__all__ = ["FAILURE_EXAMPLES_MAX", "TOMBSTONE", "BatchOutcome", "ReduceFn", "StateStore"]


class StateStore:
    """Keyed state of a node's slots, in three fragments, plus the per-slot dedup hwms.

    Fragments, each slot -> key -> field -> value (read-only outside the store, public so that
    tests and metrics can see their sizes):

    - ``master``: stable state, already shipped; never holds a tombstone, an empty key or an
      empty slot. A slot's keys there may be a table (``checkpoint.delta.SlotTable``, made by
      ``slot_table``) that answers as the dict it stands for: compact keys of a count.
    - ``inactive``: the fragment being shipped, between ``swap`` and ``merge_inactive``.
    - ``active``: takes every write; a deleted field is ``TOMBSTONE``.

    Guarantees: a read sees, field by field, the newest of active, inactive and master, with
    tombstoned fields absent; each tuple ``(mapper, slot, seq)`` changes state at most once,
    since seqs at or below the ``(mapper, slot)`` hwm are dropped; a reducer that raises leaves
    no trace in state; a ``Delta`` handed out is never mutated by the store afterwards.
    """

    def __init__(self, slot_table: SlotTableFactory | _InForce | None = IN_FORCE_TABLE) -> None:
        # What holds a slot's keys in master: a dict (None), or a table this makes
        # (checkpoint.delta.SlotTable); by default the one in force when the store is made.
        self._slot_table: SlotTableFactory | None = (
            IN_FORCE.slot_table if isinstance(slot_table, _InForce) else slot_table
        )
        self.master: Fragment = {}
        """Stable state, already shipped to the secondaries (or received, on a replica)."""
        self.inactive: Fragment = {}
        """The fragment being shipped: the last ``swap``'s delta until ``merge_inactive``."""
        self.active: Fragment = {}
        """Writes since the last ``swap``; deleted fields are ``TOMBSTONE``."""
        # The dedup memory: hwms, the slots whose hwm rose since the last swap, retirements.
        self._marks = Marks()
        self._watermarks = WatermarkRecords()  # a windowed job's, which travel like hwms
        # Whether a fragment may hold a tombstone: when neither does, reads skip the scan.
        self._active_has_tombstones = False
        self._inactive_has_tombstones = False
        # Whether ``inactive`` is the very dict the last swap's delta holds: a partial merge
        # then works on a copy, so the delta stays as it was handed out.
        self._inactive_shared = False
        # Whether any value of a mutable type may be in the store: until one is, reads need
        # not look for values to deep-copy. Never reset: values move between fragments.
        self._holds_mutables = False

    # ----------------------------------------------------------------------------- reads

    def read(self, slot: Slot, key: Key) -> dict[str, Any]:
        """The key's merged live state as a fresh dict (``{}`` if absent).

        The caller may mutate the dict and the values in it: values of mutable types are
        deep copies, so nothing done to the result can alter the store.
        """
        state = self.merged(slot, key)
        if state is None:
            return {}
        for name, value in state.items():
            if value.__class__ not in PLAIN_TYPES and isinstance(value, MUTABLE_TYPES):
                state[name] = copy.deepcopy(value)
        return state

    def get(self, slot: Slot, key: Key) -> dict[str, Any] | None:
        """Like ``read``, but None when the key has no live field."""
        state = self.read(slot, key)
        return state if state else None

    def items(
        self, slots: Iterable[Slot] | None = None
    ) -> Iterator[tuple[Slot, Key, dict[str, Any]]]:
        """Yield ``(slot, key, state)`` for every key with a live field in ``slots`` (None:
        all slots), each state a fresh dict as from ``read``. Do not write to the store while
        iterating."""
        for slot in self._fragment_slots() if slots is None else slots:
            for key in self._keys_of(slot):
                state = self.read(slot, key)
                if state:
                    yield slot, key, state

    def key_count(self) -> int:
        """Number of keys with at least one live field, over all slots."""
        count = 0
        for slot in self._fragment_slots():
            if slot not in self.active and slot not in self.inactive:
                # Master holds no empty key, so every key of the slot is live.
                count += len(self.master.get(slot, ()))
            else:
                count += sum(1 for key in self._keys_of(slot) if self.merged(slot, key))
        return count

    def slots(self) -> set[Slot]:
        """Slots with an entry in any fragment, any hwm or a watermark."""
        return self._fragment_slots() | self._marks.slots() | self._watermarks.slots()

    @property
    def has_tombstones(self) -> bool:
        """Whether ``active`` or ``inactive`` may hold a tombstone: when neither does, a read
        need not look for one."""
        return self._active_has_tombstones or self._inactive_has_tombstones

    @property
    def holds_mutables(self) -> bool:
        """Whether a value of a mutable type may be in the store: until one is, a read need
        not look for values to deep-copy."""
        return self._holds_mutables

    def hwm_entries(self) -> int:
        """How many ``(mapper, slot)`` high-water marks the store holds: its dedup memory,
        one per slot each mapper wrote to, until the mapper is retired."""
        return self._marks.entries()

    @property
    def retired(self) -> Mapping[MapperId, Seq]:
        """``{mapper: last seq}`` of the finished mappers this store retired (read-only)."""
        return self._marks.retired

    def retired_last(self, mapper: MapperId) -> Seq | None:
        """The last seq of ``mapper`` if this store retired it, else None (one dict lookup:
        for intake and eviction, once per batch)."""
        return self._marks.retired_last(mapper)

    def retire(self, mapper: MapperId, last: Seq, *, forget_hwms: bool = True) -> int:
        """Record that ``mapper`` finished at seq ``last`` and, with ``forget_hwms``, drop
        its hwms (those at or below ``last``: all of them, for a mapper that kept its word);
        return how many hwms went.

        Only safe where nothing but a guarded intake can bring a tuple of ``mapper`` to this
        store again: the node drops every batch of a retired mapper before it reaches a
        store (``smr.node.retirement``), a replica retires only when its primary says so, and
        a promotion keeps the hwms it needs (``checkpoint.promote``). The retirement goes
        out with the next delta, and with every snapshot.
        """
        return self._marks.retire(mapper, last, forget_hwms=forget_hwms)

    def forget_retired_hwms(self) -> int:
        """Drop the hwms that retired mappers still have here (a promotion brought them back
        from a copy that had not retired them); return how many went. Safe once no
        promotion or move is replaying into this store."""
        return self._marks.forget_retired()

    def hwm(self, mapper: MapperId, slot: Slot) -> Seq:
        """The highest seq of ``mapper`` applied to ``slot``; 0 if none."""
        return self._marks.hwm(mapper, slot)

    def hwm_vector(self, slot: Slot) -> dict[MapperId, Seq]:
        """``{mapper: hwm}`` of ``slot`` for every mapper with a tuple applied there."""
        return self._marks.vector(slot)

    def hwm_vectors(self, slots: set[Slot]) -> dict[Slot, dict[MapperId, Seq]]:
        """``{slot: hwm_vector(slot)}`` for ``slots`` (copies)."""
        return self._marks.vectors(slots)

    def hwms_of(self, mapper: MapperId) -> Mapping[Slot, Seq]:
        """``{slot: hwm}`` of ``mapper`` for every slot it has a tuple applied in (read-only)."""
        return self._marks.of_mapper(mapper)

    def hwm_marks(self, mapper: MapperId) -> Mapping[Slot, Seq]:
        """``{slot: hwm}`` of ``mapper``, the store's own dict (no copy, no proxy: the duplicate
        cut reads it per tuple); a caller must not keep it past its next write."""
        return self._marks.marks(mapper)

    def take_marks(self, mapper: MapperId, marks: Mapping[int, int]) -> None:
        """Set ``mapper``'s hwms of ``marks``' slots to ``marks`` (a :class:`~checkpoint.hwm.Cut`'s,
        which only raise them) and mark those slots dirty: consumed tuples."""
        self._marks.take(mapper, marks)

    def note_writes(self, wrote_tombstone: bool, holds_mutables: bool) -> None:
        """Record what a writer into ``active`` other than the store's own methods wrote (the
        compiled per-tuple driver): a tombstone, a value of a mutable type."""
        self._active_has_tombstones = self._active_has_tombstones or wrote_tombstone
        self._holds_mutables = self._holds_mutables or holds_mutables

    def raise_hwm(self, mapper: MapperId, slot: Slot, seq: Seq) -> None:
        """Raise ``mapper``'s hwm in ``slot`` to ``seq`` (never lowers it); the slot's vector
        goes out with the next delta, as after applying a tuple."""
        self._marks.raise_one(mapper, slot, seq)

    def is_duplicate(self, mapper: MapperId, slot: Slot, seq: Seq) -> bool:
        """True when the tuple ``(mapper, slot, seq)`` was already applied (or consumed)."""
        return self._marks.is_duplicate(mapper, slot, seq)

    def watermark(self, slot: Slot) -> WatermarkRecord | None:
        """A windowed job's watermark record of ``slot`` (noted or received), or None."""
        return self._watermarks.of(slot)

    def note_watermark(self, slot: Slot, record: WatermarkRecord) -> None:
        """A primary's record of ``slot`` after its cycle (merged), shipped with the next delta."""
        self._watermarks.note(slot, record)

    # ---------------------------------------------------------------------------- writes

    def commit(
        self, slot: Slot, key: Key, before: Mapping[str, Any], after: Mapping[str, Any]
    ) -> None:
        """Record in ``active`` the change of a key's state from ``before`` to ``after``.

        Writes exactly the fields of ``after`` that differ from ``before`` (by ``is`` or
        ``==``; a value of a mutable type always counts as changed, since it may have been
        mutated in place), and a tombstone for each field of ``before`` missing in ``after``.
        The store keeps deep copies of mutable values, so the caller may go on using ``after``.
        """
        active_keys = self.active.get(slot)
        active_fields = None if active_keys is None else active_keys.get(key)
        for name, value in after.items():
            if value.__class__ not in PLAIN_TYPES and isinstance(value, MUTABLE_TYPES):
                value = copy.deepcopy(value)
                self._holds_mutables = True
            elif name in before:
                try:
                    old = before[name]
                    if value is old or value == old:
                        continue
                except Exception:
                    pass  # An __eq__ that raises (or an ambiguous truth value): a change.
            if active_fields is None:
                if active_keys is None:
                    active_keys = self.active[slot] = {}
                active_fields = active_keys[key] = {}
            active_fields[name] = value
        for name in before:
            if name not in after:
                if active_fields is None:
                    if active_keys is None:
                        active_keys = self.active[slot] = {}
                    active_fields = active_keys[key] = {}
                active_fields[name] = TOMBSTONE
                self._active_has_tombstones = True

    def delete(self, slot: Slot, key: Key) -> None:
        """Delete the key: tombstone every live field of it (no-op if it has none)."""
        state = self.merged(slot, key)
        if state:
            self.commit(slot, key, state, NO_FIELDS)

    def apply_batch(
        self,
        mapper: MapperId,
        slots: Sequence[int],
        seqs: Sequence[int],
        keys: Sequence[Key],
        values: Sequence[Any],
        reduce_fn: ReduceFn,
    ) -> BatchOutcome:
        """Reduce a batch of tuples from one mapper into state, skipping duplicates.

        Tuple ``i`` is ``(mapper, slots[i], seqs[i])`` with payload ``(keys[i], values[i])``.
        For each tuple, in order:

        1. If ``seq <= hwm[mapper][slot]`` it is a duplicate: skip it and count it.
        2. Raise the hwm to ``seq`` and mark the slot hwm-dirty. The tuple is consumed even if
           the reducer fails, so a deterministic failure is never retried forever.
        3. ``state = read(slot, key)``, remember ``before = dict(state)``, and call
           ``reduce_fn(key, value, state)`` (``checkpoint.apply.APPLYING`` names the tuple
           during the call).
        4. If it raised an ``Exception``, the tuple has no effect on state (``state`` was a
           private copy, so nothing is half-applied): count it, keep the first
           ``FAILURE_EXAMPLES_MAX`` ``(key, exception)`` examples, and go on.
        5. Otherwise ``commit(slot, key, before, state)``.

        ``reduce_fn`` must not call back into the store, nor keep references to ``state`` or
        its values after it returns. An exception that is not an ``Exception`` (such as
        ``KeyboardInterrupt``) propagates: earlier tuples stay applied, and the interrupted one
        stays consumed without effect.

        This is the hot path: one loop, in ``checkpoint.apply``.
        """
        return apply_tuples(self, mapper, slots, seqs, keys, values, reduce_fn)

    # ------------------------------------------------------------------ checkpoint cycle

    def swap(self) -> Delta:
        """Step 1 of the checkpoint cycle: freeze the writes since the last swap as a delta.

        1. Refuse (``RuntimeError``) if the previous inactive fragment still holds unmerged
           writes: swapping now would lose them.
        2. Collect the hwm-dirty slots' full vectors and the watermarks noted; clear both.
        3. ``active`` becomes ``inactive``; a new empty ``active`` takes the next writes.

        Returns a ``Delta`` of the inactive fragment and those vectors. The store never
        mutates it afterwards (``merge_inactive`` reads it, then lets go of it).
        """
        # 1.
        if self.inactive:
            raise RuntimeError(
                f"swap() while the previous inactive fragment ({len(self.inactive)} slots) is "
                "not merged yet; call merge_inactive() once its delta is shipped"
            )
        # 2.
        hwms, retired = self._marks.take_dirty()
        watermarks = self._watermarks.take_dirty()
        # 3.
        self.inactive, self.active = self.active, {}
        self._inactive_shared = True
        self._inactive_has_tombstones = self._active_has_tombstones
        self._active_has_tombstones = False
        return Delta(self.inactive, hwms, retired, watermarks)

    def merge_inactive(self, max_keys: int | None = None) -> bool:
        """Step 3 of the checkpoint cycle: fold the inactive fragment into master, clear it;
        with ``max_keys``, fold whole slots until about that many keys are folded (so a long
        merge can be spread over several turns of a loop). True once it is merged whole.

        Tombstones delete fields; a key left without fields and a slot left without keys
        disappear from master. Reads return the same states before, between and after
        partial merges: each slot moves from inactive to master in one step.
        """
        if max_keys is None:
            merge_into(self.master, self.inactive, self._inactive_has_tombstones, self._slot_table)
            # Rebind rather than clear: the delta returned by swap shares this fragment.
            self.inactive = {}
            self._inactive_has_tombstones = False
            return True
        if self._inactive_shared:
            self.inactive = dict(self.inactive)
            self._inactive_shared = False
        inactive = self.inactive
        merged_keys = 0
        while inactive and merged_keys < max_keys:
            slot, keys = inactive.popitem()
            merge_into(self.master, {slot: keys}, self._inactive_has_tombstones, self._slot_table)
            merged_keys += len(keys)
        if inactive:
            return False
        self._inactive_has_tombstones = False
        return True

    def apply_delta(self, delta: Delta, *, forget_retired: bool = True) -> None:
        """The replica side of a checkpoint: merge ``delta`` into master and raise the hwms.

        Fields are set, tombstones delete fields (keys and slots left empty disappear), and
        each hwm becomes the larger of its own and the delta's, so applying a delta twice, or
        an older one after a newer one, never lowers a hwm; each slot's watermark likewise
        (``checkpoint.watermarks.merge_records``). Then the delta's retired mappers
        are retired here too, their hwms dropped unless ``forget_retired`` is False (a
        promotion, which may still replay their tuples into slots of another copy). Meant
        for a replica, which takes no local writes: on a key that also has unmerged local
        writes, those shadow the delta. It marks nothing dirty: after a promotion the new
        secondaries get a full ``snapshot``.
        """
        merge_into(self.master, delta.states, new_slot=self._slot_table)
        if not self._holds_mutables:
            self._holds_mutables = any(
                value.__class__ not in PLAIN_TYPES and isinstance(value, MUTABLE_TYPES)
                for keys in delta.states.values()
                for fields in keys.values()
                for value in fields.values()
            )
        self._marks.raise_vectors(delta.hwms)
        self._watermarks.merge(delta.watermarks)
        for mapper, last in delta.retired.items():
            self.retire(mapper, last, forget_hwms=forget_retired)

    def snapshot(self, slots: Iterable[Slot]) -> Delta:
        """Full merged state, full hwm vectors and watermarks of ``slots``, and every retired
        mapper, as a delta with no tombstones.

        For re-replication and handoff. A snapshot does not delete what the receiver may
        already hold for those slots: the receiver ``drop_slots`` them first, then
        ``apply_delta`` reproduces exactly this store's state and hwms of those slots.
        """
        wanted = set(slots)
        states: Fragment = {}
        for slot in wanted:
            slot_states = {key: self.merged(slot, key) for key in self._keys_of(slot)}
            live = {key: state for key, state in slot_states.items() if state}
            if live:
                states[slot] = live
        hwms = self._marks.vectors(wanted)
        return Delta(states, hwms, dict(self._marks.retired), self._watermarks.of_slots(wanted))

    def adopt(self, other: StateStore, slots: Iterable[Slot]) -> None:
        """Move ``slots`` of ``other`` (a replica being promoted) into this store: afterwards
        this store holds their state and hwms exactly as ``apply_delta(other.snapshot(slots),
        forget_retired=False)`` would leave them, and ``other`` holds nothing of them.

        A slot that ``other`` keeps only in master (a replica takes no local writes) and that
        this store does not hold yet moves as one dict, by reference: the cost is per slot,
        not per key, so promoting a large replica stays short. Any other slot is copied
        through a snapshot.
        """
        wanted = set(slots)
        movable = {
            slot
            for slot in wanted
            if slot not in other.active
            and slot not in other.inactive
            and slot not in self.master
            and slot not in self.active
            and slot not in self.inactive
        }
        copied = wanted - movable
        if copied:
            self.apply_delta(other.snapshot(copied), forget_retired=False)
        for slot in movable:
            keys = other.master.pop(slot, None)
            if keys:
                self.master[slot] = keys
        self._holds_mutables = self._holds_mutables or other.holds_mutables
        self._marks.adopt(other.retired, other.hwm_vectors(movable))
        self._watermarks.merge_from(other.watermark, movable)
        other.drop_slots(wanted)

    def drop_slots(self, slots: Iterable[Slot]) -> None:
        """Forget the state (all fragments), hwms and watermarks of ``slots`` (a range moved)."""
        dropped = set(slots)
        for slot in dropped:
            self.master.pop(slot, None)
            self.active.pop(slot, None)
        if not dropped.isdisjoint(self.inactive):
            # Rebuild rather than edit: the delta returned by swap shares this fragment.
            self.inactive = {s: k for s, k in self.inactive.items() if s not in dropped}
            self._inactive_shared = False
        self._marks.drop_slots(dropped)
        self._watermarks.drop_slots(dropped)

    # --------------------------------------------------------------------------- helpers

    def merged(self, slot: Slot, key: Key) -> dict[str, Any] | None:
        """The key's merged live fields as a fresh dict, or None if none. The values are the
        store's own (no deep copy, unlike ``read``): the caller must not mutate them."""
        master_keys = self.master.get(slot)
        master_fields = None if master_keys is None else master_keys.get(key)
        active_keys = self.active.get(slot)
        active_fields = None if active_keys is None else active_keys.get(key)
        # The inactive fragment lives only while a delta is shipped: usually empty.
        inactive_keys = self.inactive.get(slot) if self.inactive else None
        inactive_fields = None if inactive_keys is None else inactive_keys.get(key)
        if inactive_fields is None and active_fields is None:
            # Fast path: master never holds a tombstone or an empty key.
            return None if master_fields is None else dict(master_fields)
        merged = {} if master_fields is None else dict(master_fields)
        if inactive_fields is not None:
            merged.update(inactive_fields)
        if active_fields is not None:
            merged.update(active_fields)
        if self._active_has_tombstones or self._inactive_has_tombstones:
            for name in [name for name, value in merged.items() if value is TOMBSTONE]:
                del merged[name]
        return merged or None

    def _keys_of(self, slot: Slot) -> set[Key]:
        """Keys with an entry for ``slot`` in any fragment (live or not)."""
        keys: set[Key] = set()
        for fragment in (self.master, self.inactive, self.active):
            keys.update(fragment.get(slot, ()))
        return keys

    def _fragment_slots(self) -> set[Slot]:
        return set(self.master).union(self.inactive, self.active)
