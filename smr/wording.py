"""How smr's messages say a count and name a type: ``counted(1, "batch")`` is "1 batch",
``counted(241891, "tuple")`` is "241,891 tuples" (thousands separated, as ``smr status``
prints them), ``a_type(3)`` is "an int"."""

from __future__ import annotations

from typing import Any

# Nouns whose plural is not the noun and an "s".
_PLURALS = {"batch": "batches", "entry": "entries", "index": "indexes"}


def counted(count: int, noun: str) -> str:
    """``count`` with thousands separators and ``noun``, plural unless the count is one."""
    return f"{count:,} {noun if count == 1 else _PLURALS.get(noun, noun + 's')}"


def a_type(value: Any) -> str:
    """The name of ``value``'s type with its article: "an int", "a float"."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
