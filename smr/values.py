"""What a user value may be, checked where it enters (DESIGN section 9).

Two doors, each with a cheap exact-type path for the common case and a full check for the
rest:

- :func:`row_bytes`, at ``emit``: the key is an exact ``str`` or ``int`` (not bool, int in
  msgpack's range), the value packs as the batch body packs it and unpacks as a node
  unpacks it, and the tuple's encoded size is at most the batch byte budget. Returns that
  size (an upper bound), which the emitter adds up to cut batches by bytes. Raises
  :class:`EmitError`, naming the value, otherwise.
- :func:`check_state`, after ``reduce``: every field name is a ``str`` and every field value
  encodes both as a checkpoint carries it (:func:`checkpoint.delta.encode_field_value`) and
  as dump and query answer it (plain msgpack, :func:`smr.protocol.pack_body`): so a set,
  which a reply cannot carry, an int of 2**64 or more, or a str with a lone surrogate never
  reaches the store. Raises :class:`StateValueError` otherwise; the node treats it as a
  failed ``reduce`` (rolled back, logged, counted).
"""

from __future__ import annotations

import base64
import json
from typing import Any, Final

import msgpack

from checkpoint.delta import encode_field_value
from smr.protocol import pack_body

# msgpack ints are int64 or uint64.
INT_MIN: Final = -(1 << 63)
INT_END: Final = 1 << 64
# Per tuple in a batch body: a uint32 slot, a uint64 seq, a float64 timestamp.
ROW_FIXED_BYTES: Final = 20
# The largest msgpack header of a str, bin, array or map (type byte and a 32-bit length); an
# int or float packs in at most 9 bytes.
HEADER_BYTES_MAX: Final = 5
SCALAR_BYTES_MAX: Final = 9
# How much of a bad value an error message shows.
SHOWN_CHARS_MAX: Final = 60

_CONVERT_HINT: Final = "convert it in your map function (e.g. str(key))"


class EmitError(ValueError):
    """An ``emit`` whose key or value cannot travel: the message names it and what to do."""


class StateValueError(ValueError):
    """A state a ``reduce`` left that cannot be checkpointed or read back."""


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as error:  # a user __repr__ may raise
        text = f"<{type(value).__name__} whose repr raised {type(error).__name__}>"
    return text if len(text) <= SHOWN_CHARS_MAX else text[: SHOWN_CHARS_MAX - 3] + "..."


def row_bytes(key: Any, value: Any, bytes_max: int) -> int:
    """Check one emitted tuple; return its encoded size in a batch body (an upper bound).

    Raises :class:`EmitError` for a key that is not an exact str or int (bool excluded) or
    does not encode, a value that does not encode or decode as a batch carries it, or a
    tuple larger than ``bytes_max``. The exact-type checks come first: a str key with a
    small int, float or ASCII str value costs a few type tests and no encoding.
    """
    if key.__class__ is str and key.isascii():
        size = ROW_FIXED_BYTES + HEADER_BYTES_MAX + len(key)
    else:
        size = ROW_FIXED_BYTES + _key_bytes(key)
    cls = value.__class__
    if cls is int:
        if not INT_MIN <= value < INT_END:
            raise EmitError(
                f"value {_shown(value)} is outside the 64-bit range msgpack encodes "
                f"([-2**63, 2**64)); emit it as a str"
            )
        size += SCALAR_BYTES_MAX
    elif cls is str:
        size += HEADER_BYTES_MAX + (len(value) if value.isascii() else _utf8_bytes(value))
    elif cls is float or cls is bool or value is None:
        size += SCALAR_BYTES_MAX
    elif cls is bytes:
        size += HEADER_BYTES_MAX + len(value)
    else:
        size += _value_bytes(value)
    if size > bytes_max:
        raise EmitError(
            f"tuple of key {_shown(key)} encodes to about {size} bytes, over the "
            f"{bytes_max}-byte batch budget (--batch-bytes); split the value or raise the budget"
        )
    return size


def _key_bytes(key: Any) -> int:
    """The encoded size of a key that is not an ASCII str; EmitError if it is no key."""
    cls = key.__class__
    if cls is str:
        return HEADER_BYTES_MAX + _utf8_bytes(key, "key")
    if cls is int:
        if not INT_MIN <= key < INT_END:
            raise EmitError(
                f"key {_shown(key)} is outside the 64-bit range keys may take; emit it as a str"
            )
        return SCALAR_BYTES_MAX
    raise EmitError(
        f"key {_shown(key)} is a {cls.__name__}; keys must be str or int: {_CONVERT_HINT}"
    )


def _utf8_bytes(text: str, what: str = "value") -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        raise EmitError(
            f"{what} {_shown(text)} is not valid UTF-8 ({error.reason} at index {error.start}); "
            "it cannot be encoded: clean the text in your map function"
        ) from None


def _value_bytes(value: Any) -> int:
    """The encoded size of any other value: packed and unpacked exactly as a batch is."""
    try:
        packed = msgpack.packb(value, use_bin_type=True)
        msgpack.unpackb(packed, use_list=False, strict_map_key=False, raw=False)
    except Exception as error:  # msgpack raises several unrelated types
        raise EmitError(
            f"value {_shown(value)} of type {type(value).__name__} cannot be encoded "
            f"({type(error).__name__}: {error}); values may be None, bool, int (64-bit), float, "
            "str, bytes, and lists, tuples and dicts of those"
        ) from None
    return len(packed)


def check_state(state: dict[str, Any]) -> None:
    """Raise :class:`StateValueError` unless every field of ``state`` can be checkpointed
    and read back (see the module doc). Plain fields (an ASCII str name with an int in range,
    a float, a bool, None or an ASCII str) cost a few type tests."""
    for name, value in state.items():
        if name.__class__ is not str or not name.isascii():
            _check_field_name(name)
        cls = value.__class__
        if cls is int:
            if not INT_MIN <= value < INT_END:
                raise StateValueError(
                    f"field {name!r} holds {_shown(value)}, outside the 64-bit range a "
                    "checkpoint encodes; keep it as a str"
                )
        elif cls is float or cls is bool or value is None or cls is bytes:
            continue
        elif cls is str:
            if not value.isascii():
                _check_field_value(name, value)
        else:
            _check_field_value(name, value)


def _check_field_name(name: Any) -> None:
    if name.__class__ is not str:
        raise StateValueError(
            f"field name {_shown(name)} is a {type(name).__name__}; field names must be str"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise StateValueError(f"field name {_shown(name)} is not valid UTF-8") from None


def _check_field_value(name: str, value: Any) -> None:
    try:
        encode_field_value(value)
        pack_body(value)
    except Exception as error:  # msgpack and the delta encoder raise several types
        raise StateValueError(
            f"field {name!r} holds {type(value).__name__} {_shown(value)}, which cannot be "
            f"checkpointed or read back ({type(error).__name__}: {error}); keep state values "
            "to None, bool, int (64-bit), float, str, bytes, and lists, tuples and dicts of "
            "those (a set: store a sorted list)"
        ) from None


def state_json(record: Any) -> str:
    """``record`` (states read from nodes) as one line of JSON. A state may hold what JSON has
    no form for: bytes become ``{"base64": "..."}`` (the aggregators' sketches are bytes)."""
    return json.dumps(record, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {"base64": base64.b64encode(value).decode("ascii")}
    raise TypeError(f"{type(value).__name__} has no JSON form")
