"""The batcher on its own: tuples join the open batch of their slot's destination and get
their seqs; a batch closes by count, by bytes, by linger and on close_all, and goes to the
send function whole; open tuples follow their slots when the routing changes; rows handed
back go out again in seq order per slot."""

from __future__ import annotations

from typing import Any

import pytest

from smr.mapper.batcher import Batcher
from smr.mapper.channels import Row
from smr.ring.hashing import slot_of
from smr.values import EmitError

SLOT_BITS = 4
SLOTS = 1 << SLOT_BITS


class Sent:
    """The send function a batcher is given: records each closed batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[Row]]] = []

    def __call__(self, dest: int, rows: list[Row]) -> None:
        self.batches.append((dest, list(rows)))

    def seqs(self) -> list[int]:
        return [row[1] for _, rows in self.batches for row in rows]


def _batcher(
    destinations: int = 1,
    batch_size: int = 1000,
    combine: Any = None,
    linger_ms: float | None = None,
    batch_bytes: int = 1 << 20,
) -> tuple[Batcher, Sent]:
    sent = Sent()
    batcher = Batcher(SLOT_BITS, batch_size, batch_bytes, combine, linger_ms, sent)
    batcher.regroup([slot % destinations for slot in range(SLOTS)], destinations)
    return batcher, sent


def test_a_batch_closes_at_batch_size_and_goes_to_its_slots_destination() -> None:
    batcher, sent = _batcher(destinations=2, batch_size=3)
    words = [w for w in (f"w{i}" for i in range(100)) if slot_of(w, SLOT_BITS) % 2 == 1][:3]
    for word in words[:2]:
        batcher.emit(word, 1)
    assert sent.batches == []
    batcher.emit(words[2], 1)
    ((dest, rows),) = sent.batches
    assert dest == 1
    assert [row[2] for row in rows] == words
    assert not batcher.has_open()


def test_seqs_are_positions_in_the_stream_from_the_base() -> None:
    batcher, sent = _batcher()
    batcher.begin(100)
    for word in ["a", "b", "a"]:
        batcher.emit(word, 1)
    batcher.close_all()
    assert sent.seqs() == [101, 102, 103]
    assert batcher.position == batcher.last_seq() == 103
    assert batcher.tuples_emitted == 3


def test_combine_folds_a_key_and_gives_seqs_per_slot_when_the_batch_closes() -> None:
    batcher, sent = _batcher(combine=lambda a, b: a + b)
    batcher.begin(10)
    for word in ["a", "b", "a", "a"]:
        batcher.emit(word, 1)
    batcher.close_all()
    ((_, rows),) = sent.batches
    assert {row[2]: row[3] for row in rows} == {"a": 3, "b": 1}
    same_slot = slot_of("a", SLOT_BITS) == slot_of("b", SLOT_BITS)
    assert sorted(row[1] for row in rows) == ([11, 12] if same_slot else [11, 11])
    assert batcher.tuples_emitted == 4
    assert batcher.last_seq() == (12 if same_slot else 11)


def test_a_combine_that_raises_is_a_bad_emit() -> None:
    batcher, _ = _batcher(combine=lambda a, b: a + b)
    batcher.emit("a", 1)
    with pytest.raises(EmitError, match="combine raised TypeError"):
        batcher.emit("a", "x")


def test_a_batch_closes_before_a_row_would_take_it_past_its_bytes() -> None:
    batcher, sent = _batcher(batch_size=1000, batch_bytes=1024)
    value = "v" * 300
    for index in range(4):
        batcher.emit(f"k{index}", value)
    batcher.close_all()
    assert len(sent.batches) >= 2
    assert all(sum(len(row[3]) for row in rows) <= 1024 for _, rows in sent.batches)


def test_linger_closes_the_open_batches_at_the_first_emit_past_it() -> None:
    batcher, sent = _batcher(linger_ms=0)
    batcher.emit("a", 1)
    assert sent.batches == []  # the first tuple only sets when the batch must go
    batcher.emit("b", 1)  # at or past the deadline: every open tuple goes, this one too
    assert sent.seqs() == [1, 2] and not batcher.has_open()


def test_regroup_moves_open_tuples_with_their_slots_in_seq_order() -> None:
    batcher, sent = _batcher(destinations=2)
    words = [f"w{i}" for i in range(20)]
    for word in words:
        batcher.emit(word, 1)
    batcher.regroup([0] * SLOTS, 1)  # one destination left: every open tuple goes to it
    assert len(batcher.open_rows(0)) == len(words)
    batcher.close_all()
    ((dest, rows),) = sent.batches
    assert dest == 0
    assert [(row[0], row[1]) for row in rows] == sorted((row[0], row[1]) for row in rows)


def test_reopened_rows_go_out_again_before_later_seqs_of_their_slots() -> None:
    batcher, sent = _batcher()
    batcher.emit("a", 1)
    batcher.close_all()
    ((_, first),) = sent.batches
    batcher.emit("a", 1)  # seq 2, open
    batcher.reopen(first)  # seq 1 comes back (a re-route)
    batcher.send_open_rows()
    assert [row[1] for row in sent.batches[-1][1]] == [1, 2]


def test_send_open_rows_held_back_leaves_them_open_for_the_next_flush() -> None:
    batcher, sent = _batcher()
    batcher.reopen([(slot_of("a", SLOT_BITS), 5, "a", 1, 0.0)])
    batcher.send_open_rows(hold_back=True)
    assert sent.batches == [] and batcher.has_open()
    batcher.close_all()
    assert sent.seqs() == [5]


def test_clear_forgets_every_open_tuple() -> None:
    batcher, sent = _batcher()
    batcher.emit("a", 1)
    batcher.clear()
    batcher.close_all()
    assert sent.batches == [] and not batcher.has_open()
