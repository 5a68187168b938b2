"""Checksummed records (``checkpoint.records``): what is written reads back, and a file cut
short or with any byte changed is refused, naming where, never read in part."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smr.checkpoint.records import HEADER_BYTES, RecordError, decode_records, encode_record

payloads = st.lists(st.binary(max_size=200), max_size=5)


@given(payloads)
def test_records_read_back_as_written(parts: list[bytes]) -> None:
    assert decode_records(b"".join(encode_record(part) for part in parts)) == parts


@given(payloads.filter(bool), st.data())
def test_every_cut_is_refused(parts: list[bytes], data: st.DataObject) -> None:
    encoded = b"".join(encode_record(part) for part in parts)
    boundaries = {0}
    for part in parts:
        boundaries.add(max(boundaries) + HEADER_BYTES + len(part))
    cut = data.draw(st.integers(0, len(encoded) - 1).filter(lambda n: n not in boundaries))
    with pytest.raises(RecordError, match="cut short"):
        decode_records(encoded[:cut])


@given(st.binary(min_size=1, max_size=200), st.data())
def test_any_changed_byte_is_refused(payload: bytes, data: st.DataObject) -> None:
    encoded = bytearray(encode_record(payload))
    where = data.draw(st.integers(0, len(encoded) - 1))
    encoded[where] ^= data.draw(st.integers(1, 255))
    with pytest.raises(RecordError) as refused:
        decode_records(bytes(encoded))
    assert refused.value.offset == 0


def test_the_error_says_where_the_damage_is() -> None:
    good = encode_record(b"first")
    bad = bytearray(encode_record(b"second"))
    bad[-1] ^= 1
    with pytest.raises(RecordError, match=f"at byte {len(good)}: checksum mismatch"):
        decode_records(good + bytes(bad))
