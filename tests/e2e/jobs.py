"""Jobs used by the end-to-end tests (importable as tests.e2e.jobs:NAME)."""

from __future__ import annotations

from typing import Any

from examples.wordcount import add, count, split_words
from smr import Job

POISON = "zzpoison"


def count_refusing_poison(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
    """Word count whose reducer raises for one word, after touching its state."""
    if word == POISON:
        state["count"] = 10**9
        raise ValueError(f"refusing {word}")
    count(word, n, state, emit)


def split_words_failing_on_marker(line: str, emit: Any) -> None:
    """Word count whose map raises on lines containing the marker, after emitting."""
    split_words(line, emit)
    if "MAPFAIL" in line:
        raise RuntimeError("marker line")


def count_and_announce(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
    """Word count that emits a record when a word reaches 100 occurrences."""
    before = state.get("count", 0)
    state["count"] = before + n
    if before < 100 <= state["count"]:
        emit(word, state["count"])


poison_reduce = Job("poison-reduce", map=split_words, reduce=count_refusing_poison, combine=add)
failing_map = Job("failing-map", map=split_words_failing_on_marker, reduce=count)
announcing = Job("announcing", map=split_words, reduce=count_and_announce)
