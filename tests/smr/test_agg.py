"""Specification of ``smr.agg`` and of jobs built from it (``map_batch``, ``reduce_batch``)."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr import Job, agg
from smr.agg import AggregateError, Aggregation

ALL = agg.fields(
    n=agg.count(),
    total=agg.sum(),
    low=agg.min(),
    high=agg.max(),
    avg=agg.mean(),
    kinds=agg.distinct(),
    top=agg.top_k(3),
    latest=agg.last(),
)


def fold_in_chunks(aggregation: Aggregation, values: list[Any], cuts: list[int]) -> dict[str, Any]:
    """Lift every value, merge within chunks cut at ``cuts`` (a mapper's batches), and fold
    the chunks into one state in order (a node applying them)."""
    state: dict[str, Any] = {}
    bounds = [0, *sorted(set(cuts)), len(values)]
    for start, end in itertools.pairwise(bounds):
        if start >= end:
            continue
        partial = aggregation.lift(values[start])
        for value in values[start + 1 : end]:
            partial = aggregation.merge(partial, aggregation.lift(value))
        state.update(aggregation.fold_key(state or None, partial))
    return state


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(-1000, 1000), min_size=1, max_size=60),
    cuts=st.lists(st.integers(0, 60), max_size=8),
)
def test_every_aggregator_matches_plain_python_however_the_tuples_were_grouped(
    values: list[int], cuts: list[int]
) -> None:
    state = fold_in_chunks(ALL, values, [c for c in cuts if c < len(values)])
    assert state["n"] == len(values)
    assert state["total"] == sum(values)
    assert state["low"] == min(values)
    assert state["high"] == max(values)
    assert state["avg"] == pytest.approx(statistics.fmean(values))
    assert state["avg.n"] == len(values)
    assert state["kinds"] == len(set(values))
    assert set(state["kinds.values"]) == set(values)
    assert list(state["top"]) == sorted(values, reverse=True)[:3]
    assert state["latest"] == values[-1]


def test_approx_distinct_stays_within_its_error_and_its_memory() -> None:
    approx = agg.fields(d=agg.approx_distinct())
    for distinct in (10, 1000, 20_000):
        values = [f"user-{i}" for i in range(distinct)] * 2
        state = fold_in_chunks(approx, values, list(range(0, len(values), 500)))
        # Standard error 3.3% at precision 10: 4 of them is far out.
        assert abs(state["d"] - distinct) <= max(1, 0.13 * distinct)
        assert len(state["d.hll"]) == 1024


def test_of_picks_a_field_an_item_or_a_computed_part() -> None:
    sales = agg.fields(revenue=agg.sum(of="price"), most=agg.max(of="qty"))
    assert sales.lift({"price": 2.5, "qty": 3}) == (2.5, 3)
    picked = agg.fields(q=agg.max(of=1))
    assert picked.lift(("x", 7)) == 7
    assert agg.fields(n=agg.max(of=len)).lift("abcd") == 4


def test_values_an_aggregator_cannot_take_fail_in_the_mapper_with_their_name() -> None:
    with pytest.raises(AggregateError, match=r"sum\(\) takes numbers, got str"):
        agg.fields(t=agg.sum()).lift("12")
    with pytest.raises(TypeError, match="unhashable"):
        agg.fields(d=agg.distinct()).lift([1, 2])
    with pytest.raises(ValueError, match="precision"):
        agg.approx_distinct(precision=30)
    with pytest.raises(ValueError, match="k >= 1"):
        agg.top_k(0)
    with pytest.raises(TypeError, match=r"not an smr\.agg aggregator"):
        agg.fields(n=len)  # type: ignore[arg-type]


def test_a_sum_past_64_bits_fails_its_key_instead_of_reaching_a_checkpoint() -> None:
    total = agg.fields(t=agg.sum())
    with pytest.raises(AggregateError, match="64-bit"):
        total.fold_key({"t": 2**63}, 2**63)


def test_a_job_of_aggregators_brings_its_combine_and_names_a_lone_one_by_its_kind() -> None:
    job = Job("words", map=lambda line, emit: emit(line, 1), reduce=agg.count())
    assert job.aggregation is not None
    assert job.combine is not None and job.combine(2, 3) == 5
    assert job.aggregation.owned == {"count"}
    with pytest.raises(TypeError, match="combines by itself"):
        Job("x", map=lambda r, e: None, reduce=agg.count(), combine=lambda a, b: a)


def test_a_job_needs_one_reduce_and_some_map() -> None:
    with pytest.raises(TypeError, match="a reduce or a reduce_batch"):
        Job("x", map=lambda r, e: None)
    with pytest.raises(TypeError, match="a reduce or a reduce_batch"):
        Job("x", map=lambda r, e: None, reduce=lambda *a: None, reduce_batch=lambda *a: None)
    with pytest.raises(TypeError, match="a map or a map_batch"):
        Job("x", reduce=lambda *a: None)


def test_mappers_emit_lifted_partials_and_batch_mappers_fold_them() -> None:
    def words(lines: list[str]) -> tuple[list[str], list[int]]:
        found = " ".join(lines).split()
        return found, [len(w) for w in found]

    job = Job("w", map_batch=words, reduce=agg.fields(n=agg.count(), chars=agg.sum()))
    emitted: list[tuple[Any, Any]] = []
    job.mapper()("a bb a", lambda k, v: emitted.append((k, v)))
    assert emitted == [("a", (1, 1)), ("bb", (1, 2)), ("a", (1, 1))]
    batch_mapper = job.batch_mapper()
    assert batch_mapper is not None
    keys, values, produced = batch_mapper(["a bb", "a"])
    assert (list(keys), list(values), produced) == (["a", "bb"], [(2, 2), (1, 2)], 3)


def test_a_map_batch_returning_columns_of_two_lengths_is_refused() -> None:
    job = Job("w", map_batch=lambda records: (["a", "b"], [1]), reduce=agg.count())
    batch_mapper = job.batch_mapper()
    assert batch_mapper is not None
    with pytest.raises(ValueError, match="2 keys and 1 values"):
        batch_mapper(["x"])


def test_an_aggregation_is_also_a_per_tuple_reduce_over_partials() -> None:
    state: dict[str, Any] = {}
    for value in (3, 1, 2):
        ALL("k", ALL.lift(value), state, None)
    assert (state["n"], state["total"], state["low"], list(state["top"])) == (3, 6, 1, [3, 2, 1])
