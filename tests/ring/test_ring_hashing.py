"""Keys to slots: known answers against Cassandra's Murmur3Partitioner, and spread."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from smr.ring.hashing import (
    HASH_SEED,
    SLOT_BITS_DEFAULT,
    SLOT_BITS_MAX,
    SLOT_BITS_MIN,
    check_slot_bits,
    even_tokens,
    hash64,
    key_bytes,
    slot_count,
    slot_of,
)

# Cassandra Murmur3Partitioner tokens (signed int64) whose keys standard murmur3 hashes alike:
# ASCII keys and keys of a multiple of 16 bytes. From datastax/ruby-driver
# spec/cassandra/murmur3_spec.rb and datastax/python-driver tests/unit/test_metadata.py
# (Apache-2.0), the vectors marked "std_mmh3_hash64_h1_matches": true in
# shared/data/vectors/murmur3/cassandra_murmur3_tokens.json. Embedded because a clone of this
# repository does not have that file.
CASSANDRA_TOKENS = [
    ("313233", -7468325962851647638),  # b"123"
    ("1010101010101010", 1446172840243228796),
    ("39323233333732303336383534373735383037", 7162290910810015547),  # b"9223372036854775807"
    ("0102030405060708090a0b0c0d0e0f10", -5563837382979743776),
    ("0405060708090a0b0c0d0e0f10111213", 1734091135765407943),
    ("0708090a0b0c0d0e0f10111213141516", 8228893370679682632),
    ("00000000000000000000000000000000", 5457549051747178710),
    ("ffffffffffffffffffffffffffffffff", -2824192546314762522),
    ("00010203ffffffffffffffffffffffff", 6463632673159404390),
    ("00000000", -3485513579396041028),
    ("00017f7f", 6573459401642635627),
]


@pytest.mark.parametrize(("key_hex", "cassandra_token"), CASSANDRA_TOKENS)
def test_hash64_equals_cassandra_murmur3_token_reinterpreted_unsigned(
    key_hex: str, cassandra_token: int
) -> None:
    assert hash64(bytes.fromhex(key_hex)) == cassandra_token % 2**64


def test_hash_seed_is_zero_so_that_cassandra_vectors_apply() -> None:
    assert HASH_SEED == 0


def test_str_key_123_hashes_as_its_ascii_bytes() -> None:
    assert hash64(key_bytes("123")) == -7468325962851647638 % 2**64
    assert hash64(key_bytes(123)) == hash64(b"123")


@given(st.binary(max_size=64))
def test_hash64_is_an_unsigned_64_bit_int(data: bytes) -> None:
    assert 0 <= hash64(data) < 2**64


def test_key_bytes_of_str_is_utf8_and_of_int_is_its_decimal_text() -> None:
    assert key_bytes("héllo") == "héllo".encode()
    assert key_bytes(42) == b"42"
    assert key_bytes(-7) == b"-7"
    assert key_bytes(0) == b"0"


@pytest.mark.parametrize("bad_key", [True, False, 1.5, b"bytes", None, ("a",), ["a"]])
def test_key_bytes_rejects_anything_but_str_and_int_naming_the_type(bad_key: object) -> None:
    with pytest.raises(TypeError, match="str or int") as raised:
        key_bytes(bad_key)  # type: ignore[arg-type]
    assert type(bad_key).__name__ in str(raised.value)


@given(st.integers(), st.integers(SLOT_BITS_MIN, SLOT_BITS_MAX))
def test_an_int_key_and_its_decimal_text_share_a_slot(key: int, slot_bits: int) -> None:
    assert slot_of(key, slot_bits) == slot_of(str(key), slot_bits)


@given(st.text() | st.integers(), st.integers(SLOT_BITS_MIN, SLOT_BITS_MAX))
def test_slot_is_the_top_bits_of_the_hash(key: str | int, slot_bits: int) -> None:
    slot = slot_of(key, slot_bits)
    assert 0 <= slot < slot_count(slot_bits)
    assert slot == hash64(key_bytes(key)) >> (64 - slot_bits)


@given(st.text() | st.integers(), st.integers(SLOT_BITS_MIN, SLOT_BITS_MAX - 1))
def test_slots_nest_across_slot_bits(key: str | int, slot_bits: int) -> None:
    assert slot_of(key, slot_bits + 1) >> 1 == slot_of(key, slot_bits)


@pytest.mark.parametrize("bad", [0, -1, SLOT_BITS_MAX + 1, 64, True, "14", 14.0, None])
def test_slot_bits_outside_the_allowed_range_is_a_clear_value_error(bad: object) -> None:
    with pytest.raises(ValueError, match=f"between {SLOT_BITS_MIN} and {SLOT_BITS_MAX}"):
        check_slot_bits(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -3, SLOT_BITS_MAX + 1])
def test_slot_of_and_slot_count_refuse_bad_slot_bits(bad: int) -> None:
    with pytest.raises(ValueError, match="slot_bits"):
        slot_of("key", bad)
    with pytest.raises(ValueError, match="slot_bits"):
        slot_count(bad)


def test_default_slot_bits_gives_16384_slots() -> None:
    assert check_slot_bits(SLOT_BITS_DEFAULT) == 14
    assert slot_count(SLOT_BITS_DEFAULT) == 16_384


@given(st.data(), st.integers(SLOT_BITS_MIN, SLOT_BITS_MAX))
def test_even_tokens_are_distinct_ascending_and_evenly_spaced(
    data: st.DataObject, slot_bits: int
) -> None:
    count = slot_count(slot_bits)
    n = data.draw(st.integers(1, min(count, 300)))
    tokens = even_tokens(n, slot_bits)
    assert len(tokens) == n
    assert tokens[0] == 0
    assert tokens == sorted(set(tokens))
    gaps = [b - a for a, b in zip(tokens, [*tokens[1:], count], strict=True)]
    assert set(gaps) <= {count // n, count // n + 1}


@pytest.mark.parametrize(("n", "slot_bits"), [(0, 4), (-1, 4), (17, 4), (3, 1)])
def test_even_tokens_refuses_no_nodes_or_more_nodes_than_slots(n: int, slot_bits: int) -> None:
    with pytest.raises(ValueError, match="tokens"):
        even_tokens(n, slot_bits)


def test_100k_random_keys_spread_evenly_over_256_slots() -> None:
    slot_bits = 8
    count = slot_count(slot_bits)
    keys = 100_000
    generator = random.Random(20240611)
    histogram = [0] * count
    for _ in range(keys):
        key = "".join(generator.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=12))
        histogram[slot_of(key, slot_bits)] += 1
    expected = keys / count
    # 255 degrees of freedom: mean 255, standard deviation ~22.6. 400 is ~6.4 standard
    # deviations out, so a correct hash fails this about never, a skewed one at once.
    chi_square = sum((observed - expected) ** 2 / expected for observed in histogram)
    assert chi_square < 400, chi_square
    # Per slot ~19.8 keys of standard deviation around 390.6: +-20% is ~4 of them.
    assert all(0.8 * expected <= observed <= 1.2 * expected for observed in histogram)


def test_sequential_int_keys_spread_evenly_too() -> None:
    # Counters and ids are common keys; murmur3 must not map neighbours to neighbours.
    slot_bits = 8
    count = slot_count(slot_bits)
    histogram = [0] * count
    for key in range(100_000):
        histogram[slot_of(key, slot_bits)] += 1
    expected = 100_000 / count
    chi_square = sum((observed - expected) ** 2 / expected for observed in histogram)
    assert chi_square < 400, chi_square
