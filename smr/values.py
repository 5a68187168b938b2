"""What a user value may be, checked where it enters (docs/design/architecture.md#mappers).

Two doors, each with a cheap exact-type path for the common case and a full check for the
rest:

- :func:`row_bytes`, at ``emit``: the key is an exact ``str`` or ``int`` (not bool, int in
  msgpack's range), the value packs as the batch body packs it and unpacks as a node
  unpacks it, and the tuple's encoded size is at most the batch byte budget. Returns that
  size (an upper bound), which the emitter adds up to cut batches by bytes. Raises
  :class:`EmitError`, naming the value, otherwise.
- :func:`check_state`, after ``reduce``: every field name is a ``str`` and every field value
  encodes both as a checkpoint carries it (:func:`checkpoint.delta.encode_field_value`) and
  as dump and query answer it (plain msgpack, :func:`smr.wire.codec.pack_body`): so a set,
  which a reply cannot carry, an int of 2**64 or more, or a str with a lone surrogate never
  reaches the store. Raises :class:`StateValueError` otherwise; the node treats it as a
  failed ``reduce`` (rolled back, logged, counted).

And the one way a user value leaves as JSON (:func:`json_text`, :func:`json_form`, reversed by
:func:`from_json_form`): strict JSON, bytes as ``{"base64": ...}``, a non-finite float as
``{"float": "NaN"}``, for the output files and every reader of them, dump and query alike.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any, Final

import msgpack

from smr.checkpoint.delta import encode_field_value
from smr.wire.codec import pack_body
from smr.wording import a_type

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
    raise EmitError(f"key {_shown(key)} is {a_type(key)}; keys must be str or int: {_CONVERT_HINT}")


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
            f"field name {_shown(name)} is {a_type(name)}; field names must be str"
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


# The JSON form of user values: one rule for every JSON the engine writes (the output files,
# so smr output, smr tail and subscribe; dump and query; the output table's jsonb). Tags are
# one-key objects; a user's dict that would read as a tag is wrapped in JSON_TAG_DICT.
JSON_TAG_BYTES: Final = "base64"
JSON_TAG_FLOAT: Final = "float"
JSON_TAG_DICT: Final = "dict"
_NON_FINITE: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# Values that are their own JSON form (a float only when finite).
_PLAIN_TYPES: Final = (str, int, bool, type(None))
# One encoder made once (json.dumps with options makes one per call).
_STRICT_JSON: Final = json.JSONEncoder(allow_nan=False)


def json_form(value: Any) -> Any:
    """``value`` as strict JSON data, by one rule that :func:`from_json_form` reverses:

    - ``bytes`` become ``{"base64": "..."}`` (the aggregators' sketches are bytes);
    - a float that is not finite becomes ``{"float": "NaN"}`` (or ``"Infinity"``,
      ``"-Infinity"``): JSON has no such numbers;
    - a dict that would read as one of these tags (``{"base64": str}``, ``{"float": "NaN"}``
      ...) or as this wrapping (``{"dict": {...}}``) becomes ``{"dict": {...}}``;
    - tuples become lists, dict keys strings as ``json`` makes them (``1`` is ``"1"``), and
      anything else JSON has no form for (a set, an object) its ``str()``.
    """
    cls = value.__class__
    if cls in _PLAIN_TYPES:
        return value
    if cls is float:
        return value if math.isfinite(value) else {JSON_TAG_FLOAT: _float_name(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {JSON_TAG_BYTES: base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        form = {_json_key(key): json_form(item) for key, item in value.items()}
        return {JSON_TAG_DICT: form} if _reads_as_tag(form) else form
    if isinstance(value, list | tuple):
        return [json_form(item) for item in value]
    # Subclasses of the plain types (an IntEnum, a StrEnum) as their plain values.
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, float):
        return json_form(float(value))
    return str(value)


def is_plain_json(value: Any) -> bool:
    """Whether ``value`` is its own JSON form (a str, an int, a finite float, a bool, None):
    the common case, written without walking :func:`json_form`."""
    cls = value.__class__
    return cls in _PLAIN_TYPES or (cls is float and math.isfinite(value))


def from_json_form(data: Any) -> Any:
    """The value :func:`json_form` made ``data`` of (parsed JSON): tags back to bytes,
    non-finite floats and dicts. What no tag names is returned as it is (lists stay lists)."""
    if isinstance(data, dict):
        if len(data) == 1:
            ((tag, inner),) = data.items()
            if tag == JSON_TAG_BYTES and isinstance(inner, str):
                try:
                    return base64.b64decode(inner, validate=True)
                except ValueError:
                    pass
            elif tag == JSON_TAG_FLOAT and isinstance(inner, str) and inner in _NON_FINITE:
                return _NON_FINITE[inner]
            elif tag == JSON_TAG_DICT and isinstance(inner, dict):
                return {key: from_json_form(item) for key, item in inner.items()}
        return {key: from_json_form(item) for key, item in data.items()}
    if isinstance(data, list):
        return [from_json_form(item) for item in data]
    return data


def json_text(value: Any) -> str:
    """``value`` as one line of strict JSON (:func:`json_form`): no ``NaN`` or ``Infinity``,
    bytes as base64, the same for every reader."""
    return form_text(value if is_plain_json(value) else json_form(value))


def form_text(form: Any) -> str:
    """Data already in its JSON form (what :func:`json_form` returns, or a container of
    plain values) as one line of strict JSON; ValueError for a NaN left in it."""
    return _STRICT_JSON.encode(form)


def state_json(record: Any) -> str:
    """``record`` (states read from nodes, for ``smr dump`` and ``smr query``) as one line of
    JSON, by :func:`json_text`'s rule."""
    return json_text(record)


def _float_name(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _json_key(key: Any) -> str:
    """A dict key as JSON writes it: a str as it is, a number, bool or None as ``json``
    spells it (``1`` as ``"1"``, ``True`` as ``"true"``), anything else as its ``str()``."""
    if key.__class__ is str:
        return key
    if isinstance(key, bool | int | float) or key is None:
        return json.dumps(key)
    return str(key)


def _reads_as_tag(form: dict[str, Any]) -> bool:
    """Whether a dict's JSON form would be read back by :func:`from_json_form` as a tag."""
    if len(form) != 1:
        return False
    ((tag, inner),) = form.items()
    if tag == JSON_TAG_BYTES:
        return isinstance(inner, str)
    if tag == JSON_TAG_FLOAT:
        return isinstance(inner, str) and inner in _NON_FINITE
    return tag == JSON_TAG_DICT and isinstance(inner, dict)
