"""Output records: what a reducer emits (:data:`Emitted`, named by its origin), one JSON line
per record (:func:`record_line`, :func:`parse_line`), and the readers' rule for repeats
(:class:`Repeats`): a record seen before, by origin, is skipped."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from smr.values import form_text, from_json_form, is_plain_json, json_form

Emitted = tuple[Any, Any, str, int, int, int]

Origin = tuple[str, int, int, int]


def record_line(record: dict[str, Any]) -> str:
    """An output record (``{"node", "key", "value", "origin"}``, or some of them) as one line
    of strict JSON, its key and value in their JSON form (:func:`smr.values.json_form`): how
    the output files and ``smr output`` write records alike."""
    if is_plain_json(record.get("key")) and is_plain_json(record.get("value")):
        return form_text(record)
    return form_text(json_form(record))


class Repeats:
    """Which output records a reader has seen, by origin: the first record of an origin is
    new, every later one (a takeover's replay) a repeat. Exact: one entry per origin read,
    so memory grows with the records read; records without an origin are always new."""

    def __init__(self) -> None:
        self._seen: set[Origin] = set()
        self.repeats = 0

    def is_repeat(self, origin: Sequence[Any] | None) -> bool:
        """Whether a record of ``origin`` was seen before (and remember it if not)."""
        if origin is None:
            return False
        name = (str(origin[0]), int(origin[1]), int(origin[2]), int(origin[3]))
        if name in self._seen:
            self.repeats += 1
            return True
        self._seen.add(name)
        return False


def parse_line(line: str | bytes) -> dict[str, Any] | None:
    """The record ``{"node", "key", "value", "origin"}`` a line of an output file holds, its
    key and value as they were emitted (:func:`smr.values.from_json_form`), or None if it
    holds none (blank, or torn by a kill mid-write). A file an earlier version wrote may
    hold ``NaN``: it is read as the float."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or "key" not in record:
        return None
    record["key"] = from_json_form(record["key"])
    record["value"] = from_json_form(record.get("value"))
    return record
