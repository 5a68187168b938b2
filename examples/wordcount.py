"""Word count: the number of occurrences of every word, kept as ``state["count"]``.

A word is a match of ``[a-z0-9']+`` in the lower-cased line.
"""

from __future__ import annotations

import re
from typing import Any

from smr import Job

WORD = re.compile(r"[a-z0-9']+")


def split_words(line: str, emit: Any) -> None:
    """Emit ``(word, 1)`` for every word of the line."""
    for word in WORD.findall(line.lower()):
        emit(word, 1)


def count(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
    """Add ``n`` to the word's count."""
    state["count"] = state.get("count", 0) + n


def add(a: int, b: int) -> int:
    """Combine two partial counts."""
    return a + b


job = Job("wordcount", map=split_words, reduce=count, combine=add)
