"""The JSON form of user values (smr.values): one rule for the output files, their readers,
dump and query. What it writes is strict JSON (no NaN or Infinity), and reading it back
gives the value written (tuples as lists), whatever the value: bytes, non-finite floats,
and dicts that look like the rule's own tags."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smr.output.files import OutputSink
from smr.output.records import parse_line
from smr.values import from_json_form, json_form, json_text, state_json

TAG_LIKE_KEYS = st.sampled_from(["base64", "float", "dict", "x"])


def strict_loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses NaN, Infinity and -Infinity, as strict JSON parsers do."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON-shaped values: NaN equals NaN, a tuple equals its list."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.binary(max_size=20),
    st.sampled_from(["NaN", "Infinity", "AAE=", "b'\\x00'"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(TAG_LIKE_KEYS, st.text(max_size=5)), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=500)
@given(values)
def test_every_value_is_written_as_strict_json_and_read_back_as_it_was(value: Any) -> None:
    text = json_text(value)
    assert "\n" not in text
    assert same(from_json_form(strict_loads(text)), value)


@given(values)
def test_the_form_is_plain_json_data(value: Any) -> None:
    form = json_form(value)
    assert strict_loads(json.dumps(form, allow_nan=False)) == form


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (b"\x00\xff", {"base64": "AP8="}),
        (math.nan, {"float": "NaN"}),
        (math.inf, {"float": "Infinity"}),
        (-math.inf, {"float": "-Infinity"}),
        ({"base64": "AP8="}, {"dict": {"base64": "AP8="}}),
        ({"float": "NaN"}, {"dict": {"float": "NaN"}}),
        ({"dict": {}}, {"dict": {"dict": {}}}),
        # What cannot be read as a tag is written as it is.
        ({"float": 2.5}, {"float": 2.5}),
        ({"base64": 1}, {"base64": 1}),
        ({"float": b""}, {"float": {"base64": ""}}),
        ({"float": [1]}, {"float": [1]}),
        ((1, {2: b"\x01"}), [1, {"2": {"base64": "AQ=="}}]),
        ({1, 2}, "{1, 2}"),
    ],
)
def test_the_rule_by_example(value: Any, written: Any) -> None:
    assert json_form(value) == written


def test_an_output_file_line_is_strict_and_reads_back(tmp_path: Any) -> None:
    sink = OutputSink("n0", tmp_path / "n0.jsonl", lambda frames: None)
    odd = [b"\x00\xff", math.nan, -math.inf, {"base64": "AP8="}, [b"\x01", (2.5, math.inf)]]
    sink.extend([(f"k{i}", value, "m", 1, i, 0) for i, value in enumerate(odd)])
    sink.close()
    lines = (tmp_path / "n0.jsonl").read_text().splitlines()
    for line, value in zip(lines, odd, strict=True):
        strict_loads(line)
        record = parse_line(line)
        assert record is not None and same(record["value"], value)


def test_dump_and_query_lines_follow_the_same_rule() -> None:
    line = state_json({"key": "k", "state": {"sketch": b"\x00\xff", "mean": math.nan}})
    assert strict_loads(line) == {
        "key": "k",
        "state": {"sketch": {"base64": "AP8="}, "mean": {"float": "NaN"}},
    }


def test_a_file_an_earlier_version_wrote_with_nan_is_still_read() -> None:
    record = parse_line('{"node": "n0", "key": "k", "value": NaN, "origin": ["m", 1, 2, 0]}')
    assert record is not None and math.isnan(record["value"])
