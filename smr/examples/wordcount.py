"""Word count: the number of occurrences of every word, kept as ``state["count"]``.

A word is a match of ``[a-z0-9']+`` in the lower-cased line. Two forms of the same job:

- ``job``: a ``map`` per line and a ``reduce`` per tuple, the plain form any job can take;
- ``batched``: ``reduce_batch`` instead of ``reduce``, one call per batch;
- ``fast``: a ``map_batch`` that finds the words of many lines in one regular-expression
  pass, and the built-in count (``smr.agg``), which folds them per key on the mapper side
  and applies them in bulk on the nodes. Same state, several times the throughput.

Two that publish output as well (``emit``), for a sink such as a PostgreSQL table
(``smr cluster up --output-postgres``):

- ``counted``: each tuple's count, ``(word, n)``: summed per word (``--output-merge add``)
  they are the counts;
- ``published``: a word's new count each time it changes, ``(word, count)``: the last one
  per word (``--output-merge replace``) is its count.
"""

from __future__ import annotations

import re
from typing import Any

from smr import Job, agg

WORD = re.compile(r"[a-z0-9']+")


def split_words(line: str, emit: Any) -> None:
    """Emit ``(word, 1)`` for every word of the line."""
    for word in WORD.findall(line.lower()):
        emit(word, 1)


def count(word: Any, n: int, state: dict[str, Any], emit: Any) -> None:
    """Add ``n`` to the word's count."""
    state["count"] = state.get("count", 0) + n


def add(a: int, b: int) -> int:
    """Combine two partial counts."""
    return a + b


job = Job("wordcount", map=split_words, reduce=count, combine=add)


def count_batch(words: list[Any], counts: list[list[int]], states: list[dict[str, Any]]) -> None:
    """Add each word's counts (one list per word, each word once) to its state."""
    for state, word_counts in zip(states, counts, strict=True):
        state["count"] = state.get("count", 0) + sum(word_counts)


batched = Job("wordcount", map=split_words, reduce_batch=count_batch, combine=add)


def split_lines(lines: list[str]) -> tuple[list[str], list[int]]:
    """The words of many lines at once: keys, and a value per key (ignored by the count)."""
    words = WORD.findall("\n".join(lines).lower())
    return words, [1] * len(words)


fast = Job("wordcount", map_batch=split_lines, reduce=agg.count())


def count_and_emit_n(word: Any, n: int, state: dict[str, Any], emit: Any) -> None:
    """Add ``n`` to the word's count, and emit ``(word, n)``."""
    state["count"] = state.get("count", 0) + n
    emit(word, n)


counted = Job("wordcount-counted", map=split_words, reduce=count_and_emit_n, combine=add)


def count_and_emit_total(word: Any, n: int, state: dict[str, Any], emit: Any) -> None:
    """Add ``n`` to the word's count, and emit ``(word, count)``."""
    state["count"] = state.get("count", 0) + n
    emit(word, state["count"])


published = Job("wordcount-published", map=split_words, reduce=count_and_emit_total, combine=add)
