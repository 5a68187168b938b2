"""The high-water-mark rule (checkpoint.hwm) against a plain model: a mark per slot, tuples
taken one by one, a tuple at or below its slot's mark a repeat."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from smr.checkpoint.hwm import (
    cut,
    first_uncovered,
    fresh_rows,
    is_repeat,
    raise_marks,
    raise_vectors,
)

SLOTS = st.integers(min_value=0, max_value=7)
MARKS = st.dictionaries(SLOTS, st.integers(min_value=1, max_value=30), max_size=8)


def model(marks: dict[int, int], slots: list[int], seqs: list[int]) -> tuple[list[int], dict]:
    """Tuple by tuple: the rows taken, and the marks of the slots that rose."""
    running = dict(marks)
    taken = []
    rose: dict[int, int] = {}
    for row, (slot, seq) in enumerate(zip(slots, seqs, strict=True)):
        if seq > running.get(slot, 0):
            running[slot] = rose[slot] = seq
            taken.append(row)
    return taken, rose


@st.composite
def rising_batches(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """A batch whose seqs rise per slot, as an emitter numbers them (gaps allowed)."""
    slots = draw(st.lists(SLOTS, max_size=40))
    last: dict[int, int] = {}
    seqs = []
    for slot in slots:
        last[slot] = last.get(slot, 0) + draw(st.integers(min_value=1, max_value=4))
        seqs.append(last[slot])
    return slots, seqs


@given(MARKS, rising_batches())
def test_cut_takes_exactly_what_the_tuple_by_tuple_rule_takes(marks, batch) -> None:
    slots, seqs = batch
    outcome = cut(marks, slots, seqs)
    taken, rose = model(marks, slots, seqs)
    fresh = list(range(len(slots))) if outcome.fresh is None else outcome.fresh
    assert fresh == taken
    assert outcome.marks == rose
    assert outcome.duplicates == len(slots) - len(taken)
    after = {**marks, **outcome.marks}
    assert all(is_repeat(seq, after[slot]) for slot, seq in zip(slots, seqs, strict=True))


@given(MARKS, st.lists(st.tuples(SLOTS, st.integers(min_value=1, max_value=30)), max_size=40))
def test_cut_of_any_batch_follows_the_rule_even_where_seqs_do_not_rise(marks, rows) -> None:
    slots = [slot for slot, _ in rows]
    seqs = [seq for _, seq in rows]
    outcome = cut(marks, slots, seqs)
    taken, rose = model(marks, slots, seqs)
    assert (outcome.fresh is None) == (len(taken) == len(rows))
    fresh = list(range(len(rows))) if outcome.fresh is None else outcome.fresh
    assert (fresh, outcome.marks) == (taken, rose)


def test_a_resend_inside_one_batch_counts_once() -> None:
    outcome = cut({}, [0, 0, 0, 0], [1, 2, 3, 3])
    assert (outcome.fresh, outcome.marks, outcome.duplicates) == ([0, 1, 2], {0: 3}, 1)


def test_cut_of_a_whole_batch_reports_no_rows() -> None:
    outcome = cut({3: 4}, [3, 1, 3], [5, 1, 6])
    assert outcome.fresh is None
    assert outcome.marks == {3: 6, 1: 1}
    assert outcome.duplicates == 0


def test_fresh_rows_takes_the_cut_rows_of_every_column() -> None:
    slots, seqs, keys = [1, 1, 2, 1], [5, 5, 1, 6], ["a", "b", "c", "d"]
    batch_cut = cut({2: 1}, slots, seqs)
    assert fresh_rows(batch_cut.fresh, slots, seqs, keys) == ([1, 1], [5, 6], ["a", "d"])
    whole = cut({}, [1, 2], [1, 1])
    assert fresh_rows(whole.fresh, [1, 2], ["x", "y"]) == ([1, 2], ["x", "y"])


def test_cut_rejects_columns_of_different_lengths() -> None:
    try:
        cut({}, [1, 2], [1])
    except ValueError as error:
        assert "differ in length" in str(error)
    else:
        raise AssertionError("cut accepted columns of different lengths")


@given(MARKS, MARKS)
def test_raise_marks_keeps_the_larger_and_names_what_rose(marks, learned) -> None:
    merged = dict(marks)
    rose = raise_marks(merged, learned)
    for slot in marks.keys() | learned.keys():
        assert merged[slot] == max(marks.get(slot, 0), learned.get(slot, 0))
    assert sorted(rose) == sorted(s for s in learned if learned[s] > marks.get(s, 0))


@given(
    st.dictionaries(st.sampled_from("abc"), MARKS),
    st.dictionaries(
        SLOTS, st.dictionaries(st.sampled_from("abc"), st.integers(min_value=1, max_value=30))
    ),
)
def test_raise_vectors_keeps_the_larger_of_each_pair(by_mapper, vectors) -> None:
    merged = {mapper: dict(marks) for mapper, marks in by_mapper.items()}
    raise_vectors(merged, vectors)
    for slot, vector in vectors.items():
        for mapper, seq in vector.items():
            assert merged[mapper][slot] == max(seq, by_mapper.get(mapper, {}).get(slot, 0))
    for mapper, marks in by_mapper.items():
        for slot, seq in marks.items():
            assert merged[mapper][slot] >= seq


@given(MARKS, MARKS, st.integers(min_value=0, max_value=30))
def test_first_uncovered_is_none_exactly_when_every_seq_is_a_repeat(summary, marks, floor) -> None:
    found = first_uncovered(summary, marks, floor)
    uncovered = [(s, q) for s, q in summary.items() if not is_repeat(q, marks.get(s, floor))]
    assert found == (uncovered[0] if uncovered else None)
