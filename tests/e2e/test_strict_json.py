"""Values JSON has no plain form for (bytes, NaN, the infinities, a dict that looks like the
form's own tag), emitted and kept by a real node: every reader gives strict JSON (a parser
that refuses NaN reads it) by one rule, and the readers that decode it give the values
back: the output files, ``smr output``, ``smr tail``, ``subscribe()``, ``smr dump``,
``smr query`` and the PostgreSQL table."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest

import smr
from smr.values import from_json_form, json_form
from tests.e2e.conftest import REPO, Cluster
from tests.e2e.jobs import ODD_VALUES

pytestmark = pytest.mark.e2e

JOB = "tests.e2e.jobs:odd_values"
MARKERS = " ".join(ODD_VALUES) + "\n"


def strict_loads(text: str) -> Any:
    """``json.loads`` that refuses NaN, Infinity and -Infinity, as strict JSON parsers do."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant} in {text!r}")

    return json.loads(text, parse_constant=refuse)


def same(a: Any, b: Any) -> bool:
    """Equal, with NaN equal to NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def assert_odd_values(found: dict[str, Any], where: str) -> None:
    assert found.keys() == ODD_VALUES.keys(), where
    for word, value in ODD_VALUES.items():
        assert same(found[word], value), f"{where}: {word} is {found[word]!r}, not {value!r}"


def test_every_reader_gives_strict_json_and_the_values_back(cluster: Cluster) -> None:
    cluster.up(2, JOB)
    tail = subprocess.Popen(
        [sys.executable, "-m", "smr", "tail", "--cluster", str(cluster.dir), "--count",
         str(len(ODD_VALUES)), "--timeout-s", "10"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    time.sleep(0.5)  # the publishers' subscriptions are made before the records come
    cluster.feed("-", job=JOB, input_text=MARKERS)
    # The output files and smr tail: strict lines, decoded to the values.
    files = {}
    for path in sorted((cluster.dir / "output").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = strict_loads(line)
            files[record["key"]] = from_json_form(record["value"])
    assert_odd_values(files, "the output files")
    tailed, _ = tail.communicate(timeout=30)
    tail_lines = [strict_loads(line) for line in tailed.splitlines()]
    assert_odd_values({r["key"]: from_json_form(r["value"]) for r in tail_lines}, "smr tail")
    # smr output.
    output = cluster.smr("output", "--cluster", str(cluster.dir)).stdout.splitlines()
    records = [strict_loads(line) for line in output]
    assert_odd_values({r["key"]: from_json_form(r["value"]) for r in records}, "smr output")
    # subscribe(): the values as they were emitted.
    with smr.connect(cluster.dir) as connection:
        subscribed = {r.key: r.value for r in connection.subscribe("start", idle_timeout_s=0.5)}
    assert_odd_values(subscribed, "subscribe()")
    # smr dump and smr query: the states, by the same rule.
    states = {key: from_json_form(state["value"]) for key, state in cluster.dump().items()}
    assert_odd_values(states, "smr dump")
    for line in (cluster.dir / "dump.jsonl").read_text().splitlines():
        strict_loads(line)
    queried = strict_loads(cluster.smr("query", "--cluster", str(cluster.dir), "zznan").stdout)
    assert queried["state"] == {"value": {"float": "NaN"}}


def test_the_output_table_keeps_odd_values_in_their_json_form(
    cluster: Cluster, postgres_dsn: str
) -> None:
    cluster.up(
        2, JOB, "--output-postgres", postgres_dsn, "--output-table", "odd", "--output-merge",
        "replace",
    )  # fmt: skip
    cluster.feed("-", job=JOB, input_text=MARKERS)
    expected = {word: json_form(value) for word, value in ODD_VALUES.items()}
    deadline = time.monotonic() + 20
    rows: dict[str, Any] = {}
    while rows != expected and time.monotonic() < deadline:
        time.sleep(0.3)
        with psycopg.connect(postgres_dsn) as connection:
            rows = dict(connection.execute("SELECT key, value FROM odd").fetchall())
    assert rows == expected
    assert all(row["output_table_errors"] == 0 for row in cluster.status().values())
