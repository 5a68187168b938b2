"""The codec: a message to frames and back (:func:`encode`, :func:`decode`), every decode validated
against the record's schema (a bad frame is a :class:`FrameError`, never a crash), and the
msgpack bodies (:func:`pack_body`, :func:`unpack_body`). docs/design/protocol.md."""

from __future__ import annotations

import dataclasses
import operator
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from smr.wire.kinds import (
    FRAME_BYTES_MAX_DEFAULT,
    PROTOCOL_VERSION,
    FrameError,
    Kind,
)
from smr.wire.messages import Message

_RECORDS: Final[tuple[type[Message], ...]] = typing.get_args(Message)


@dataclass(frozen=True, slots=True)
class _Field:
    """One header field of a record: its attribute, its key on the wire, and the Python
    types its value may have (those of the annotation, ids as their base types)."""

    attribute: str
    wire: str
    types: tuple[type, ...]


@dataclass(frozen=True, slots=True)
class _Schema:
    record: Callable[..., Message]
    fields: tuple[_Field, ...]
    has_body: bool
    # For encode: the header keys, "v" first, and a function that reads the record's
    # values in the same order after the version (attrgetter: no loop in Python).
    wire_keys: tuple[str, ...]
    wire_values: Callable[[Any], tuple[Any, ...]]


def _runtime_types(hint: Any) -> tuple[type, ...]:
    """The types a value of annotation ``hint`` has at run time (a NewType is its base)."""
    supertype = getattr(hint, "__supertype__", None)
    if supertype is not None:
        return _runtime_types(supertype)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _runtime_types(arg))
    return (type(None),) if hint is None else (hint,)


def _schema(record: type[Message]) -> _Schema:
    hints = typing.get_type_hints(record)
    fields = tuple(
        _Field(f.name, f.metadata.get("wire", f.name), _runtime_types(hints[f.name]))
        for f in dataclasses.fields(record)
        if f.name != "body"
    )
    read = operator.attrgetter(*(f.attribute for f in fields))
    wire_values = read if len(fields) > 1 else lambda message: (read(message),)
    wire_keys = ("v", *(f.wire for f in fields))
    return _Schema(record, fields, "body" in hints, wire_keys, wire_values)


# The header fields of each kind, in wire order, read off the records' annotations.
_SCHEMAS: Final[dict[Kind, _Schema]] = {record.kind: _schema(record) for record in _RECORDS}

_HEADER_LENGTH_BYTES: Final = 4


def header_fields(kind: Kind) -> tuple[tuple[tuple[str, tuple[type, ...]], ...], bool]:
    """The header fields of ``kind`` as (wire name, the types its value may have), in wire
    order, and whether the kind carries a body: what a tool that builds messages field by
    field needs (the decoders' fuzzer)."""
    schema = _SCHEMAS[kind]
    return tuple((f.wire, f.types) for f in schema.fields), schema.has_body


def header_of(message: Message) -> dict[str, Any]:
    """The header fields of ``message`` as sent (wire names, without the version)."""
    return {f.wire: getattr(message, f.attribute) for f in _SCHEMAS[message.kind].fields}


def encode(message: Message) -> list[bytes]:
    """Encode a message as its frames (one)."""
    schema = _SCHEMAS[message.kind]
    values = (PROTOCOL_VERSION, *schema.wire_values(message))
    header = dict(zip(schema.wire_keys, values, strict=True))
    body: bytes = message.body if schema.has_body else b""  # type: ignore[union-attr]
    return _frame(message.kind, header, body)


def encode_raw(kind: Kind, header: dict[str, Any], body: bytes = b"") -> list[bytes]:
    """Encode a message from a header map (wire names; the protocol version is added): for
    tests that need a message no record can express (a missing field, a wrong type)."""
    return _frame(kind, {"v": PROTOCOL_VERSION, **header}, body)


def _frame(kind: Kind, header: dict[str, Any], body: bytes) -> list[bytes]:
    header_bytes: bytes = msgpack.packb(header, use_bin_type=True)
    prefix = bytes((kind,)) + len(header_bytes).to_bytes(_HEADER_LENGTH_BYTES, "big")
    return [b"".join((prefix, header_bytes, body))]


def decode(frames: Sequence[bytes], frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> Message:
    """Decode and validate a received message into the record of its kind.

    Guarantees: the kind is known, the header has the protocol version and every field of
    the kind's record with the record's type, and no int field is negative. Raises
    :class:`FrameError` otherwise. Header keys the record does not name are ignored, and so
    is the body of a kind that carries none.
    """
    if len(frames) != 1:
        raise FrameError(f"expected a message of 1 frame, got {len(frames)} frames")
    data = frames[0]
    if len(data) > frame_bytes_max:
        raise FrameError(f"message of {len(data)} bytes exceeds the cap of {frame_bytes_max}")
    header_start = 1 + _HEADER_LENGTH_BYTES
    if len(data) < header_start:
        raise FrameError(f"message of {len(data)} bytes is shorter than its fixed prefix")
    try:
        kind = Kind(data[0])
    except ValueError:
        raise FrameError(f"unknown message kind {data[0]}") from None
    header_end = header_start + int.from_bytes(data[1:header_start], "big")
    if header_end > len(data):
        raise FrameError(f"header runs past the end of the {len(data)}-byte message")
    header = unpack_msgpack(data[header_start:header_end], "header")
    if not isinstance(header, dict):
        raise FrameError(f"header must be a map, got {type(header).__name__}")
    version = header.get("v")
    if version != PROTOCOL_VERSION:
        raise FrameError(f"protocol version {version!r} is not {PROTOCOL_VERSION}")
    schema = _SCHEMAS[kind]
    values: list[Any] = []
    for f in schema.fields:
        value = header.get(f.wire)
        if type(value) not in f.types:
            raise FrameError(f"{kind.name} header field {f.wire!r} is {value!r}, not {f.types}")
        if type(value) is int and value < 0:
            raise FrameError(f"{kind.name} header field {f.wire!r} is negative: {value}")
        values.append(value)
    if schema.has_body:
        values.append(bytes(data[header_end:]))
    return schema.record(*values)


def unpack_msgpack(data: bytes, what: str) -> Any:
    """Decode msgpack (arrays as tuples); FrameError naming ``what`` if it is malformed."""
    try:
        return msgpack.unpackb(data, use_list=False, strict_map_key=False, raw=False)
    except Exception as error:  # msgpack raises several unrelated types on bad input
        raise FrameError(f"malformed {what}: {type(error).__name__}: {error}") from None


def pack_body(obj: Any) -> bytes:
    """Encode a control body (a status map, a view, a dump page) as msgpack."""
    body: bytes = msgpack.packb(obj, use_bin_type=True)
    return body


def unpack_body(data: bytes) -> Any:
    """Decode a control body; raises :class:`FrameError` if it is not valid msgpack."""
    return unpack_msgpack(data, "body")


assert set(_SCHEMAS) == set(Kind), "every kind has a record"
