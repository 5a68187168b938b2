"""A stream identity cannot be reused by mistake: a feed or a program that names a mapper id
which already delivered tuples, and does not say it resumes, is refused before it sends
anything (its tuples would have been taken for resends and dropped). Resuming, by position
or with ``--resume``, a rerun of a default feed and connections without a mapper id keep
working exactly. Every count is compared with plain Python's."""

from __future__ import annotations

import collections
import gzip
import re
import shlex

import pytest

import smr
from smr.ring.hashing import slot_of
from smr.spec.parse import read_spec
from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts
from tests.e2e.test_resume import SLOW_JOB, terminate_once_applying

pytestmark = pytest.mark.e2e


def book_text(path: str) -> str:
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as text:
        return text.read()


def slots_of(cluster: Cluster, keys: list[str]) -> int:
    slot_bits = read_spec(cluster.dir).slot_bits
    return len({slot_of(key, slot_bits) for key in keys})


@pytest.mark.slow
def test_a_second_feed_of_standard_input_under_a_used_mapper_id_is_refused(
    cluster: Cluster,
) -> None:
    cluster.up(3)
    first, second = EXAMPLE_BOOKS[:2]
    cluster.feed("-", extra=["--mapper-id", "ingest"], input_text=book_text(first))
    reused = cluster.feed(
        "-", extra=["--mapper-id", "ingest"], input_text=book_text(second), check=False
    )
    assert reused.returncode == 2, reused
    slots = slots_of(cluster, list(word_counts([first])))
    assert re.fullmatch(
        f"smr: error: mapper id ingest already delivered tuples \\(to {slots:,} slots, seqs up "
        "to [0-9,]+\\); standard input cannot resume it: use a new id \\(or none: a feed of "
        "standard input gets a random one\\)\n",
        reused.stderr,
    ), reused.stderr
    assert reused.stdout == ""
    # Nothing of the second book was sent: the first is counted exactly, and no more.
    assert cluster.counts() == word_counts([first])
    resumed = cluster.feed(
        "-", extra=["--mapper-id", "ingest", "--resume"], input_text="x", check=False
    )
    assert resumed.returncode == 2
    assert resumed.stderr == (
        "smr: error: --resume cannot continue a stream from standard input (it cannot be "
        "read again from its start): feed files, or use a new --mapper-id\n"
    )
    cluster.feed("-", extra=["--mapper-id", "ingest-2"], input_text=book_text(second))
    assert cluster.counts() == word_counts([first, second])


def test_a_second_program_under_a_used_mapper_id_is_refused_before_it_sends(
    cluster: Cluster,
) -> None:
    cluster.up(3)
    firsts = [(f"a{i}", 1) for i in range(3000)]
    seconds = [(f"b{i}", 1) for i in range(3000)]
    with smr.connect(cluster.dir, mapper_id="svc") as program:
        program.emit_many(firsts)
        assert program.flush() == 3000
    refused: Exception | None = None
    with smr.connect(cluster.dir, mapper_id="svc") as program:
        try:
            program.emit_many(seconds)
            program.flush()
        except ValueError as error:
            refused = error
        position = program.flush()
    # Nothing of the second program reached the nodes (before, most of it did, and the
    # tuples whose slot the first had gone further in were dropped as resends).
    assert cluster.counts() == dict.fromkeys((key for key, _ in firsts), 1)
    assert position == 0  # nothing was emitted
    assert isinstance(refused, smr.MapperIdReused)
    slots = slots_of(cluster, [key for key, _ in firsts])
    assert str(refused) == (
        f"mapper id svc already delivered tuples (to {slots:,} slots, seqs up to 3,000); "
        "pass the position flush() returned (position=...) to continue it, or use a new "
        "mapper_id"
    )
    assert refused.history.seq_max == 3000
    # Resuming from the saved position continues the stream: every tuple counts once.
    with smr.connect(cluster.dir, mapper_id="svc", position=3000) as program:
        program.emit_many(seconds)
        assert program.flush() == 6000
    # A connection without a mapper id has a random one, never refused.
    with smr.connect(cluster.dir) as program:
        program.emit("a0", 1)
    expected = collections.Counter(key for key, _ in firsts + seconds + [("a0", 1)])
    assert cluster.counts() == expected


@pytest.mark.slow
def test_a_feed_of_files_under_a_used_mapper_id_resumes_only_when_told(
    cluster: Cluster,
) -> None:
    cluster.up(2)
    book = EXAMPLE_BOOKS[0]
    cluster.feed(book, extra=["--mapper-id", "books"])
    again = cluster.feed(book, extra=["--mapper-id", "books"], check=False)
    assert again.returncode == 2
    assert again.stderr.endswith("; pass --resume to continue it, or use a new id\n")
    resumed = cluster.feed(book, extra=["--mapper-id", "books", "--resume"])
    assert "nothing new: the nodes already had all" in resumed.stdout
    # A default feed's id names its input: run again, it resumes by itself.
    cluster.feed(book)
    rerun = cluster.feed(book)
    assert "nothing new: the nodes already had all" in rerun.stdout
    assert cluster.counts() == {word: 2 * n for word, n in word_counts([book]).items()}


@pytest.mark.slow
def test_a_feed_of_a_given_id_interrupted_resumes_by_the_command_it_prints(
    cluster: Cluster,
) -> None:
    cluster.up(2, SLOW_JOB)
    book = EXAMPLE_BOOKS[0]
    feed = cluster.feed_in_background(book, job=SLOW_JOB, extra=["--mapper-id", "slow"])
    err = terminate_once_applying(cluster, feed)
    assert feed.returncode == 2, err
    command = err.rsplit("run the same command: ", 1)[1].strip()
    words = shlex.split(command)
    assert words[:2] == ["smr", "feed"] and "--resume" in words, command
    cluster.smr(*words[1:])
    assert cluster.counts() == word_counts([book])
