"""Jobs used by the end-to-end tests (importable as tests.e2e.jobs:NAME)."""

from __future__ import annotations

import os
import time
from typing import Any

from examples.wordcount import WORD, add, count, count_batch, split_lines, split_words
from smr import Job, agg, windows

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


SLOW_WORD = "the"
SLOW_CALL_S = 3.0
_slow_call_done = False


def count_with_one_slow_call(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
    """Word count whose reduce takes SLOW_CALL_S once per node process: the first time it
    meets SLOW_WORD (a slow lookup, a cold cache). Pure-Python busy work, as user code is."""
    global _slow_call_done
    if word == SLOW_WORD and not _slow_call_done:
        _slow_call_done = True
        until = time.monotonic() + SLOW_CALL_S
        while time.monotonic() < until:
            sum(range(1000))
    count(word, n, state, emit)


# Marker words and what a map emits for them: a key or a value that cannot travel.
BAD_EMITS: dict[str, tuple[Any, Any]] = {
    "zztuplekey": ((1, 2), 1),
    "zznonekey": (None, 1),
    "zzfloatkey": (1.5, 1),
    "zzbyteskey": (b"k", 1),
    "zzboolkey": (True, 1),
    "zzsetvalue": ("the", {1}),
    "zzbigvalue": ("the", 2**64),
    "zzsurrogate": ("the\ud800", 1),
}


def split_words_with_bad_emits(line: str, emit: Any) -> None:
    """Word count whose map emits, after the line's words, one bad tuple per marker word."""
    words = split_words_only(line)
    for word in words:
        emit(word, 1)
    for word in words:
        if word in BAD_EMITS:
            emit(*BAD_EMITS[word])


def split_words_only(line: str) -> list[str]:
    found: list[str] = []
    split_words(line, lambda word, n: found.append(word))
    return found


def count_storing_unencodable(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
    """Word count whose reducer leaves a set in the state of "zzset" and an int of 2**64 in
    that of "zzbig": states that can be neither checkpointed nor read back."""
    if word == "zzset":
        state["seen"] = {n}
    elif word == "zzbig":
        state["count"] = 2**64
    count(word, n, state, emit)


def count_record_bytes(key: str, record: str, state: dict[str, Any], emit: Any) -> None:
    state["count"] = state.get("count", 0) + 1
    state["bytes"] = state.get("bytes", 0) + len(record)


def key_and_record(line: str, emit: Any) -> None:
    """Emits the whole line as the value, under its first word."""
    emit(line.split(" ", 1)[0], line)


poison_reduce = Job("poison-reduce", map=split_words, reduce=count_refusing_poison, combine=add)
failing_map = Job("failing-map", map=split_words_failing_on_marker, reduce=count)
announcing = Job("announcing", map=split_words, reduce=count_and_announce)
one_slow_call = Job("one-slow-call", map=split_words, reduce=count_with_one_slow_call)
bad_emits = Job("bad-emits", map=split_words_with_bad_emits, reduce=count, combine=add)
unencodable_state = Job("unencodable-state", map=split_words, reduce=count_storing_unencodable)
big_records = Job("big-records", map=key_and_record, reduce=count_record_bytes)


# -- for the Spark feeder ---------------------------------------------------------------------

FAIL_MARKER_ENV = "SMR_TEST_FAIL_MARKER"
FAIL_AFTER_RECORDS = 3000
_records_seen = 0


def split_words_failing_once(line: str, emit: Any) -> None:
    """Word count whose map raises once in the whole run: on the FAIL_AFTER_RECORDS-th record
    a worker sees, if the marker file named by $SMR_TEST_FAIL_MARKER does not exist yet. It
    creates the marker first (so the retry passes) and waits a second before raising, so
    that the tuples it emitted so far are acked and applied: the retry must re-send them."""
    global _records_seen
    split_words(line, emit)
    _records_seen += 1
    if _records_seen == FAIL_AFTER_RECORDS:
        try:
            os.close(os.open(os.environ[FAIL_MARKER_ENV], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        time.sleep(1.0)
        raise RuntimeError("injected task failure after emitting")


def split_words_slowly(line: str, emit: Any) -> None:
    """Word count whose map takes 0.5 ms a line, so a Spark batch lasts long enough to be
    killed in the middle."""
    split_words(line, emit)
    time.sleep(0.0005)


failing_once = Job("failing-once", map=split_words_failing_once, reduce=count, combine=add)
slow_wordcount = Job("slow-wordcount", map=split_words_slowly, reduce=count, combine=add)


def _first_letters(line: str, emit: Any) -> None:
    """Per word: its first letter as the key, the word as the value."""
    for word in WORD.findall(line.lower()):
        emit(word[0], word)


# Per first letter: how many words, their letters in all, the shortest and longest length,
# the mean length, the distinct words (exact and estimated), the three longest lengths and
# the latest word: every built-in aggregator over real nodes.
letters = Job(
    "letters",
    map=_first_letters,
    reduce=agg.fields(
        n=agg.count(),
        chars=agg.sum(of=len),
        shortest=agg.min(of=len),
        longest=agg.max(of=len),
        mean=agg.mean(of=len),
        words=agg.distinct(),
        words_approx=agg.approx_distinct(),
        top=agg.top_k(3, of=len),
        latest=agg.last(),
    ),
)


def _count_batch_refusing_poison(
    keys: list[Any], values: list[list[Any]], states: list[dict[str, Any]]
) -> None:
    count_batch(keys, values, states)
    if POISON in keys:
        raise ValueError(f"refusing a batch with {POISON}")


batch_poison = Job("wordcount", map=split_words, reduce_batch=_count_batch_refusing_poison)


_map_batch_calls = 0


def _split_lines_failing_once(lines: list[str]) -> tuple[list[str], list[int]]:
    """The fast word count's map_batch, raising once in the whole run: on a worker's second
    call (its first chunk's tuples already emitted) if the marker file named by
    $SMR_TEST_FAIL_MARKER does not exist yet; it waits a second first, so that those tuples
    are acked and applied: the retry must re-send them."""
    global _map_batch_calls
    _map_batch_calls += 1
    if _map_batch_calls == 2:
        try:
            os.close(os.open(os.environ[FAIL_MARKER_ENV], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return split_lines(lines)
        time.sleep(1.0)
        raise RuntimeError("injected task failure after emitting")
    return split_lines(lines)


failing_once_fast = Job("failing-once", map_batch=_split_lines_failing_once, reduce=agg.count())


# Values JSON has no plain form for (and a dict that looks like the form's own tag), each
# kept in its marker word's state and emitted by `odd_values`.
ODD_VALUES: dict[str, Any] = {
    "zzbytes": b"\x00\xff",
    "zznan": float("nan"),
    "zzinf": float("inf"),
    "zzneginf": float("-inf"),
    "zztaglike": {"base64": "AP8="},
    "zznested": [b"\x01", {"float": "NaN"}, 2.5],
}


def keep_and_emit_odd(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
    value = ODD_VALUES[word]
    state["value"] = value
    emit(word, value)


odd_values = Job("odd-values", map=split_words, reduce=keep_and_emit_odd)


# A windowed word count over lines "EVENT_TIME_MS<TAB>TEXT" (tests/e2e/test_windows.py writes
# them from a book, out of order by less than WINDOWED_DISORDER_MS): words per tumbling window.
WINDOWED_SIZE_MS = 10_000
WINDOWED_DISORDER_MS = 1_000


def event_line_time(line: str) -> int:
    """The event time of an event line: its first field."""
    return int(line.split("\t", 1)[0])


def split_event_line(line: str, emit: Any) -> None:
    """The words of an event line's text, each counted once."""
    split_words(line.split("\t", 1)[1], emit)


windowed_count = Job(
    "windowed-count",
    map=split_event_line,
    reduce=agg.count(),
    event_time=event_line_time,
    window=windows.tumbling(WINDOWED_SIZE_MS, out_of_orderness_ms=WINDOWED_DISORDER_MS),
)

# The same count per session of each word: its runs of event times less than SESSION_GAP_MS
# apart.
SESSION_GAP_MS = 3_000

session_count = Job(
    "session-count",
    map=split_event_line,
    reduce=agg.count(),
    event_time=event_line_time,
    window=windows.session(SESSION_GAP_MS, out_of_orderness_ms=WINDOWED_DISORDER_MS),
)
