"""smr.testing.run_job: the in-process run a job's own tests use gives the states a cluster
would, and raises where a cluster would count a failure."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from examples.wordcount import WORD, batched, fast, job
from smr import Job, agg
from smr.testing import run_job
from smr.values import EmitError, StateValueError

LINES = [
    "It is a truth universally acknowledged, that a single man",
    "in possession of a good fortune, must be in want of a wife.",
    "",
    "However little known the feelings or views of such a man may be",
] * 50


def plain_counts(lines: list[str]) -> dict[str, int]:
    return dict(collections.Counter(w for line in lines for w in WORD.findall(line.lower())))


@pytest.mark.parametrize("form", [job, batched, fast], ids=["reduce", "reduce_batch", "agg"])
@pytest.mark.parametrize("combine", [True, False])
@pytest.mark.parametrize("batch_size", [1, 7, 1000])
def test_every_form_of_the_word_count_equals_plain_python(
    form: Job, combine: bool, batch_size: int
) -> None:
    run = run_job(form, LINES, combine=combine, batch_size=batch_size)
    assert {word: state["count"] for word, state in run.states.items()} == plain_counts(LINES)
    assert run.tuples > 0


def test_a_combine_that_disagrees_with_reduce_shows_as_different_states() -> None:
    def keep_last(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
        state["last"] = n

    wrong = Job("wrong", map=job.map, reduce=keep_last, combine=lambda a, b: a + b)
    assert run_job(wrong, LINES, combine=False).states != run_job(wrong, LINES).states


def test_a_set_in_state_raises_as_a_node_would_refuse_it() -> None:
    def into_set(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
        state["seen"] = {word}

    with pytest.raises(StateValueError, match="a set: store a sorted list"):
        run_job(Job("sets", map=job.map, reduce=into_set), LINES)


def test_a_bad_key_raises_as_a_feeder_would_refuse_it() -> None:
    bad = Job("bad", map=lambda line, emit: emit(3.5, 1), reduce=job.reduce)
    with pytest.raises(EmitError, match=r"3\.5"):
        run_job(bad, LINES)


def test_a_map_or_reduce_that_raises_names_its_record_or_key() -> None:
    def explode(line: str, emit: Any) -> None:
        raise KeyError("boom")

    with pytest.raises(RuntimeError, match="map raised on record 'It is a truth"):
        run_job(Job("m", map=explode, reduce=job.reduce), LINES)

    def refuse(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
        raise ValueError(word)

    with pytest.raises(RuntimeError, match="reduce raised on key 'it'"):
        run_job(Job("r", map=job.map, reduce=refuse), LINES)


def test_outputs_come_in_the_order_reduces_emitted_them() -> None:
    def announce(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
        state["count"] = state.get("count", 0) + n
        if state["count"] == 3:
            emit(word, "third")

    lines = LINES[:4] * 3
    seen: collections.Counter[str] = collections.Counter()
    expected = []
    for word in (w for line in lines for w in WORD.findall(line.lower())):
        seen[word] += 1
        if seen[word] == 3:
            expected.append((word, "third"))
    run = run_job(Job("announce", map=job.map, reduce=announce), lines, combine=False)
    assert run.outputs == expected
    assert run.outputs[0] == ("a", "third")


def test_aggregators_per_field() -> None:
    words = Job(
        "stats",
        map=lambda line, emit: [emit(w[0], len(w)) for w in WORD.findall(line.lower())],
        reduce=agg.fields(n=agg.count(), longest=agg.max()),
    )
    run = run_job(words, LINES, batch_size=13)
    assert run.states["a"]["n"] == sum(
        1 for line in LINES for w in WORD.findall(line.lower()) if w[0] == "a"
    )
    assert run.states["a"]["longest"] == len("acknowledged")


def test_a_batch_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        run_job(job, LINES, batch_size=0)
