"""``smr feed`` tells input that does not look like text (and refuses it without --binary-ok)."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

from smr.feed.text_check import not_text_reason, sample_reason


def test_random_bytes_do_not_look_like_text(tmp_path: Path) -> None:
    path = tmp_path / "random.bin"
    path.write_bytes(random.Random(7).randbytes(70_000))
    reason = not_text_reason(str(path))
    assert reason is not None and "NUL" in reason


def test_undecodable_bytes_without_nul_do_not_look_like_text() -> None:
    rng = random.Random(8)
    sample = bytes(rng.randrange(1, 256) for _ in range(10_000))
    reason = sample_reason(sample)
    assert reason is not None and "not UTF-8" in reason


def test_utf8_and_latin1_text_look_like_text(tmp_path: Path) -> None:
    text = "Ça ira, naïve café: the quick brown fox jumps over the lazy dog.\n" * 2000
    assert sample_reason(text.encode("utf-8")) is None
    assert sample_reason(text.encode("latin-1")) is None
    assert sample_reason(b"") is None
    # A multi-byte character cut at the sample's end is not counted.
    assert sample_reason("é".encode() * 10 + "é".encode()[:1]) is None


def test_a_gzipped_text_file_is_looked_at_decompressed(tmp_path: Path) -> None:
    path = tmp_path / "book.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("call me ishmael\n" * 10_000)
    assert not_text_reason(str(path)) is None


def test_a_missing_file_is_left_to_the_feed_to_report(tmp_path: Path) -> None:
    assert not_text_reason(str(tmp_path / "nope")) is None
