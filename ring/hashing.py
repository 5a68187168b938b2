"""Keys to slots: the one hash function every mapper and node must agree on.

A key is hashed with 64-bit murmur3 (``mmh3.hash64``, first half, unsigned) of its UTF-8 bytes,
and its slot is the top `slot_bits` bits of that hash. Taking the top bits (rather than a
modulo) keeps slots nested across slot sizes: the slot of a key at ``slot_bits = b`` is its
slot at ``b + 1`` shifted right by one, so the ring is the paper's ``[0, 1)`` interval,
quantised.
"""

from typing import Final

import mmh3

from smr.ring.ids import Slot, Token

HASH_SEED: Final = 0
"""The murmur3 seed. It is 0 because then `hash64` of an ASCII key (or of any key whose length
is a multiple of 16 bytes) equals the token Cassandra's Murmur3Partitioner computes for it,
reinterpreted as unsigned. That makes the hash checkable against published test vectors from
an independent implementation. (Cassandra sign-extends tail bytes >= 0x80, so for other keys
the two differ; ours is the standard murmur3.)"""

SLOT_BITS_DEFAULT: Final = 14
"""16,384 slots: fine enough that a split at the load median is precise to 1/16,384 of the
ring, coarse enough that per-slot tables (roles, hwm vectors) stay a few hundred KiB."""

SLOT_BITS_MIN: Final = 1
"""At least two slots, so that a range can be split at all."""

SLOT_BITS_MAX: Final = 20
"""About a million slots: per-slot tables are O(slot count), and beyond this they cost more
memory and rebuild time than the finer placement is worth."""

_HASH_BITS: Final = 64


def hash64(data: bytes) -> int:
    """The unsigned 64-bit murmur3 hash of `data` (first half of x64_128, seed `HASH_SEED`).

    Guarantees: deterministic across processes, machines and Python versions (it does not
    use Python's randomised ``hash``), and always ``0 <= result < 2**64``.
    """
    high: int = mmh3.hash64(data, HASH_SEED, signed=False)[0]
    return high


def key_bytes(key: str | int) -> bytes:
    """The bytes a key is hashed as: UTF-8 of a str, UTF-8 of an int's decimal text.

    Guarantees: the int 42 and the str ``"42"`` hash alike, so a key that passes through a
    text format (CSV, JSON object keys) lands in the same slot. Raises `TypeError` for any
    other type, bool included (``True`` is an int in Python, but almost always a bug as a
    key).
    """
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key).encode("utf-8")
    raise TypeError(
        f"keys must be str or int, got {type(key).__name__}: {key!r}; "
        "convert the key in your map function (e.g. str(key))"
    )


def check_slot_bits(slot_bits: int) -> int:
    """Return `slot_bits` if it is an int in ``[SLOT_BITS_MIN, SLOT_BITS_MAX]``.

    Raises `ValueError` naming the allowed range otherwise, so a bad configuration fails at
    start-up rather than routing tuples to slots nobody owns.
    """
    if (
        not isinstance(slot_bits, int)
        or isinstance(slot_bits, bool)
        or not SLOT_BITS_MIN <= slot_bits <= SLOT_BITS_MAX
    ):
        raise ValueError(
            f"slot_bits must be an int between {SLOT_BITS_MIN} and {SLOT_BITS_MAX} "
            f"(default {SLOT_BITS_DEFAULT}), got {slot_bits!r}"
        )
    return slot_bits


def slot_count(slot_bits: int) -> int:
    """The number of slots on a ring of `slot_bits` bits: ``2**slot_bits``.

    Raises `ValueError` if `slot_bits` is out of range (see `check_slot_bits`).
    """
    return 1 << check_slot_bits(slot_bits)


def slot_of(key: str | int, slot_bits: int) -> Slot:
    """The slot of `key`: the top `slot_bits` bits of ``hash64(key_bytes(key))``.

    Guarantees: ``0 <= slot < 2**slot_bits``; equal keys (and an int and its decimal str) get
    equal slots everywhere. Raises `TypeError` for a key that is not str or int, and
    `ValueError` for `slot_bits` out of range.
    """
    # The range check is a chained comparison, cheap next to the hash; without it a bad
    # slot_bits would silently put every key in slot 0 (or raise on a negative shift).
    if not SLOT_BITS_MIN <= slot_bits <= SLOT_BITS_MAX:
        check_slot_bits(slot_bits)
    return Slot(hash64(key_bytes(key)) >> (_HASH_BITS - slot_bits))


def even_tokens(n: int, slot_bits: int) -> list[Token]:
    """`n` distinct tokens spaced evenly around the ring: ``i * slot_count // n``.

    Guarantees: ascending, distinct, the first is 0, and every node's range is
    ``slot_count // n`` or one more slots. Raises `ValueError` if ``n < 1`` or there are more
    nodes than slots (two nodes would have to share a token).
    """
    count = slot_count(slot_bits)
    if not 1 <= n <= count:
        raise ValueError(
            f"need between 1 and {count} tokens on a ring of {count} slots "
            f"(slot_bits={slot_bits}), got n={n}; raise slot_bits for more nodes"
        )
    return [Token(i * count // n) for i in range(n)]
