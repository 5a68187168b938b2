"""A primary, one secondary and the lagging channels between them, for the checkpoint tests.

Shared by the specifications of the tuple backup (``test_backup``) and of promote
(``test_promote``): batches with the tests' own body encoding, a word count, a primary running
the checkpoint cycle, and ``Replication``, which runs a list of operations (emits, resends,
checkpoints, snapshots, deliveries) against a primary and its secondary up to a kill.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgpack
from hypothesis import strategies as st

from smr.checkpoint.backup import BackedUpBatch, HwmFn, TupleBackup
from smr.checkpoint.delta import decode_delta, encode_delta
from smr.checkpoint.ids import Key, MapperId, Seq
from smr.checkpoint.replica import PeerReplica
from smr.checkpoint.store import StateStore
from smr.ring.ids import Slot

M1 = MapperId("mapper-1")
M2 = MapperId("mapper-2")
MAPPERS = [MapperId(f"mapper-{i}") for i in range(3)]
SLOT_COUNT = 6
KEYS = [f"k{i}" for i in range(12)]


def slot_of(key: str) -> Slot:
    return Slot(int(key[1:]) % SLOT_COUNT)


# --------------------------------------------------------------------- batches and bodies


def encode_body(slots: list[int], seqs: list[int], keys: list[Key], values: list[Any]) -> bytes:
    """The test's own body encoding: msgpack of the four columns."""
    body: bytes = msgpack.packb([slots, seqs, keys, values])
    return body


def decode_body(body: bytes) -> tuple[list[int], list[int], list[Key], list[Any]]:
    slots, seqs, keys, values = msgpack.unpackb(body, use_list=True)
    return slots, seqs, keys, values


def make_batch(mapper: MapperId, tuples: Iterable[tuple[int, int, Key, Any]]) -> BackedUpBatch:
    """A batch of ``(slot, seq, key, value)`` tuples, with its summary built from its columns."""
    rows = list(tuples)
    slots = [row[0] for row in rows]
    seqs = [row[1] for row in rows]
    last_seq_by_slot: dict[Slot, Seq] = {}
    for slot, seq in zip(slots, seqs, strict=True):
        last_seq_by_slot[Slot(slot)] = max(Seq(seq), last_seq_by_slot.get(Slot(slot), Seq(0)))
    return BackedUpBatch(
        mapper=mapper,
        body=encode_body(slots, seqs, [row[2] for row in rows], [row[3] for row in rows]),
        tuple_count=len(rows),
        last_seq_by_slot=last_seq_by_slot,
    )


def is_covered(batch: BackedUpBatch, hwm: HwmFn) -> bool:
    return all(seq <= hwm(batch.mapper, slot) for slot, seq in batch.last_seq_by_slot.items())


def assert_totals_match(backup: TupleBackup) -> None:
    held = backup.batches()
    assert backup.batch_count == len(held)
    assert backup.tuple_count == sum(batch.tuple_count for batch in held)
    assert backup.bytes_held == sum(batch.size_bytes for batch in held)


def count_words(key: Key, value: Any, state: dict[str, Any]) -> None:
    """Word count that deletes a key whose count drops to zero (so deltas carry tombstones)."""
    count = state.get("count", 0) + value
    if count == 0:
        state.pop("count", None)
    else:
        state["count"] = count


def state_of(store: StateStore, slots: Iterable[Slot]) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """Everything observable of ``slots``: merged states and hwm vectors."""
    wanted = list(slots)
    states = {(slot, key): state for slot, key, state in store.items(wanted)}
    hwms = {slot: store.hwm_vector(slot) for slot in wanted if store.hwm_vector(slot)}
    return states, hwms


# ---------------------------------------------------------- a primary and its channels


@dataclass
class Primary:
    """A primary's store and checkpoint cycle, with the mappers' seq counters."""

    store: StateStore = field(default_factory=StateStore)
    checkpoints_swapped: int = 0
    next_seq: dict[tuple[MapperId, Slot], int] = field(default_factory=dict)

    def new_batch(self, mapper: MapperId, words: list[tuple[str, int]]) -> BackedUpBatch:
        rows = []
        for key, value in words:
            slot = slot_of(key)
            seq = self.next_seq[mapper, slot] = self.next_seq.get((mapper, slot), 0) + 1
            rows.append((slot, seq, key, value))
        return make_batch(mapper, rows)

    def apply(self, batch: BackedUpBatch) -> None:
        slots, seqs, keys, values = decode_body(batch.body)
        self.store.apply_batch(batch.mapper, slots, seqs, keys, values, count_words)

    def checkpoint(self) -> tuple[int, bytes]:
        """Swap, encode, merge: the numbered checkpoint as it leaves for the secondaries."""
        delta = self.store.swap()
        self.checkpoints_swapped += 1
        encoded = encode_delta(delta)
        self.store.merge_inactive()
        return self.checkpoints_swapped, encoded


words = st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from([-1, 1, 2])), max_size=6)

# Operations of the primary, the mappers and the lagging channels to the secondary, as
# (kind, mapper, words, index); the kinds are weighted so that runs have several checkpoints.
Operation = tuple[str, MapperId, list[tuple[str, int]], int]
OPERATION_KINDS = [
    *["emit"] * 3,
    "resend",
    *["deliver_batch"] * 3,
    *["checkpoint"] * 2,
    *["deliver_checkpoint"] * 2,
]
operation = st.tuples(
    st.sampled_from(OPERATION_KINDS), st.sampled_from(MAPPERS), words, st.integers(0, 100)
)
operations = st.lists(operation, min_size=10, max_size=80)


@dataclass
class Replication:
    """A primary and one secondary (its replica and tuple backup), with two lagging channels.

    The mappers send every batch to the primary at once and to the secondary over a lagging
    channel (so a checkpoint may overtake a batch); ``resend`` sends an old batch again (a
    duplicate). Checkpoints, and the messages of a ``snapshot`` (the primary re-replicating
    its whole state, in two chunks), travel in order over their own lagging channel; each
    one delivered is followed by an eviction. The replica starts from an empty snapshot.
    """

    primary: Primary = field(default_factory=Primary)
    replica: PeerReplica = field(default_factory=PeerReplica)
    backup: TupleBackup = field(default_factory=TupleBackup)
    sent: list[BackedUpBatch] = field(default_factory=list)
    """Every distinct batch the mappers emitted, in emit order."""
    batches_in_flight: list[BackedUpBatch] = field(default_factory=list)
    messages_in_flight: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.replica.begin_snapshot(as_of=0)  # The primary is empty: an empty snapshot.
        self.replica.end_snapshot()

    def run(self, operation: Operation) -> None:
        """One step: ``emit``, ``resend``, ``checkpoint``, ``snapshot``, ``deliver_batch`` or
        ``deliver_checkpoint`` (the next message of the checkpoint channel)."""
        kind, mapper, emitted, index = operation
        primary, replica, backup = self.primary, self.replica, self.backup
        if kind == "emit" or (kind == "resend" and self.sent):
            if kind == "emit":
                batch = primary.new_batch(mapper, emitted)
                if batch.tuple_count == 0:
                    return
                self.sent.append(batch)
            else:
                batch = self.sent[index % len(self.sent)]
            primary.apply(batch)
            self.batches_in_flight.append(batch)
        elif kind == "deliver_batch" and self.batches_in_flight:
            batch = self.batches_in_flight.pop(0)
            stored = backup.add(batch, replica.hwm)
            assert stored is not is_covered(batch, replica.hwm)
        elif kind == "checkpoint":
            number, encoded = primary.checkpoint()
            self.messages_in_flight.append(lambda: self._deliver_checkpoint(number, encoded))
        elif kind == "snapshot":
            self._send_snapshot()
        elif kind == "deliver_checkpoint" and self.messages_in_flight:
            self.messages_in_flight.pop(0)()
            backup.evict_covered(replica.hwm)
            assert all(not is_covered(batch, replica.hwm) for batch in backup.batches())
        assert_totals_match(backup)

    def kill(self) -> None:
        """The primary dies: messages in flight die with it, and the mappers resend to the
        secondary every batch it has not got."""
        self.messages_in_flight.clear()
        for batch in self.batches_in_flight:
            self.backup.add(batch, self.replica.hwm)
        self.batches_in_flight.clear()

    def _deliver_checkpoint(self, number: int, encoded: bytes) -> None:
        assert self.replica.apply_checkpoint(number, decode_delta(encoded))

    def _send_snapshot(self) -> None:
        """The primary's whole state, read now, as of its last swapped checkpoint."""
        as_of = self.primary.checkpoints_swapped
        all_slots = [Slot(slot) for slot in range(SLOT_COUNT)]
        chunks = [encode_delta(self.primary.store.snapshot(all_slots[part::2])) for part in (0, 1)]
        replica = self.replica
        self.messages_in_flight.append(lambda: replica.begin_snapshot(as_of))
        for chunk in chunks:
            self.messages_in_flight.append(
                lambda chunk=chunk: replica.apply_snapshot_chunk(decode_delta(chunk))
            )
        self.messages_in_flight.append(replica.end_snapshot)
