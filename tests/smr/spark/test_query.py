"""The Spark feeder's pure parts: Java version parsing, error extraction, and the fold that
must give a re-run the same tuples in the same order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from examples.wordcount import job as wordcount
from smr.spark import java_major_version, partitions, root_cause
from smr.spark import query as smr_spark


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "11.0.2"', 11),
        ("no version here", None),
    ],
)
def test_java_major_version(output: str, major: int | None) -> None:
    assert java_major_version(output) == major


def test_root_cause_prefers_the_last_python_exception_line() -> None:
    message = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: Job aborted.\n"
        '  File "/x/worker.py", line 3, in process\n'
        "TypeError: wrapped\n"
        "RuntimeError: injected task failure after emitting\n"
        "\tat org.apache.spark.api.python.BasePythonRunner..."
    )
    assert root_cause(message) == "RuntimeError: injected task failure after emitting"
    assert root_cause("Only a JVM line\nand more") == "Only a JVM line"


def _emitted(lines: list[str], chunk: int, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(partitions, "COMBINE_RECORDS", chunk)
    out: list[Any] = []
    records, tuples = partitions.map_combined(
        wordcount, iter(lines), lambda k, v: out.append((k, v))
    )
    assert records == len(lines)
    assert tuples == sum(len(wordcount_words(line)) for line in lines)
    return out


def wordcount_words(line: str) -> list[str]:
    words: list[str] = []
    wordcount.map(line, lambda key, _value: words.append(key))
    return words


lines_strategy = st.lists(
    st.lists(st.sampled_from(["a", "b", "see", "dee", "e'f", "42"]), max_size=6).map(" ".join),
    max_size=40,
)


@given(lines=lines_strategy, chunk=st.integers(1, 8))
def test_the_fold_is_a_function_of_the_records_and_loses_nothing(
    lines: list[str], chunk: int
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        first = _emitted(lines, chunk, patch)
        again = _emitted(lines, chunk, patch)
    # A re-run emits the same tuples in the same order: the same seqs.
    assert first == again
    totals: dict[str, int] = {}
    for key, value in first:
        totals[key] = totals.get(key, 0) + value
    expected: dict[str, int] = {}
    for line in lines:
        for word in wordcount_words(line):
            expected[word] = expected.get(word, 0) + 1
    assert totals == expected
    # Each key is emitted once per chunk of records it appears in: folded, not repeated.
    chunks = [lines[i : i + chunk] for i in range(0, len(lines), chunk)]
    assert len(first) == sum(
        len({w for ln in part for w in wordcount_words(ln)}) for part in chunks
    )


def test_socket_inputs_are_parsed_and_paths_are_left_alone() -> None:
    assert smr_spark.parse_socket_ref("socket://127.0.0.1:9999") == ("127.0.0.1", 9999)
    assert smr_spark.parse_socket_ref("data/in") is None
    for bad in ("socket://nohost", "socket://:80", "socket://h:0", "socket://h:port"):
        with pytest.raises(smr_spark.SparkFeedError, match="socket://HOST:PORT"):
            smr_spark.parse_socket_ref(bad)


def test_a_file_given_as_the_input_directory_is_called_a_file(tmp_path: Path) -> None:
    book = tmp_path / "book.txt"
    book.write_text("call me ishmael\n")
    with pytest.raises(smr_spark.SparkFeedError) as error:
        smr_spark.check_input_dir(book)
    message = str(error.value)
    assert f"{str(book)!r} is a file; --input takes a directory of text files" in message
    assert "does not exist" not in message
