"""Does an input file look like text? ``smr feed`` warns, once per file, when it does not.

A feed reads every file as lines of UTF-8 (undecodable bytes replaced), so a binary file
given by mistake would be fed as junk words without a word said. This looks at the start of
the file (decompressed, for ``.gz``) and names what gave it away; the feed goes on either way.
"""

from __future__ import annotations

import codecs
import gzip
from typing import Final

# How much of a file is looked at.
SAMPLE_BYTES: Final = 64 * 1024
# Above this share of the sample's bytes undecodable as UTF-8, the file is not UTF-8 text.
# Text in a single-byte encoding (Latin-1 and the like) stays well below it: only its
# accented letters are undecodable; random bytes are about half undecodable.
UNDECODABLE_SHARE_MAX: Final = 0.10


def not_text_reason(path: str) -> str | None:
    """Why the file at ``path`` does not look like UTF-8 text, or None if it does (or cannot
    be read here: the feed itself reports that)."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as unpacked:
                sample = unpacked.read(SAMPLE_BYTES)
        else:
            with open(path, "rb") as raw:
                sample = raw.read(SAMPLE_BYTES)
    except (OSError, EOFError):
        return None
    return sample_reason(sample)


def sample_reason(sample: bytes) -> str | None:
    """Why ``sample`` (the start of a file) does not look like UTF-8 text, or None."""
    if b"\0" in sample:
        return "it has NUL bytes in its first 64 KiB"
    # One U+FFFD per undecodable sequence (a character cut at the sample's end is not one).
    decoded = codecs.getincrementaldecoder("utf-8")("replace").decode(sample, final=False)
    share = decoded.count("\ufffd") / len(sample) if sample else 0.0
    if share > UNDECODABLE_SHARE_MAX:
        return f"{share:.0%} of its first 64 KiB is not UTF-8"
    return None
