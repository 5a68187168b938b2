"""Checkpoint deltas and their wire encoding.

A ``Delta`` is what a primary ships to a slot range's secondaries at each checkpoint
(docs/design/architecture.md#state): the fields that changed since the previous checkpoint, deleted
fields as ``TOMBSTONE``, and the hwm vectors of the slots whose hwm moved. A full snapshot of some
slots (for re-replication and handoff) is a ``Delta`` without tombstones.

Wire format, version 3 (msgpack): one array ``[version, states, hwms, retired,
watermarks]``; ``states`` maps slot (int) -> key (str or int) -> field (str) -> value,
``hwms`` maps slot (int) -> mapper id (str) -> seq (int >= 0), ``retired`` maps mapper id
(str) -> the last seq (int >= 0) of a finished mapper whose hwms the sender let go of, and
``watermarks`` maps slot (int) -> a windowed job's slot watermark (``checkpoint.watermarks``,
``records_from_wire``). A delta without watermarks is written as version 2, the array
without them (what an older node wrote and reads); versions 2 and 1 (without ``retired``)
are still read. Field values round-trip exactly, so that a
promoted replica behaves like the primary it replaces: msgpack arrays carry tuples, and the
types msgpack cannot tell apart travel as extension types (the codes are ``_EXT_*`` below).
Decoding never trusts its input: anything malformed raises ``DeltaError``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any, Final, Protocol, cast, final

import msgpack

from smr.checkpoint.ids import Fragment, MapperId, Seq, Slot
from smr.checkpoint.watermarks import WatermarkRecord, records_from_wire

DELTA_FORMAT_VERSION: Final = 3
"""The newest version, written first in every encoded delta that carries watermarks (one
without them is written as version 2); a decoder reads it, version 2 (no watermarks) and
version 1 (no retired mappers either), and refuses any other."""

WITHOUT_WATERMARKS_VERSION: Final = 2
"""The version a delta without watermarks is written as."""

# The array length of each version a decoder reads.
_ITEMS_OF_VERSION: Final = {1: 3, 2: 4, 3: 5}


DELTA_BYTES_MAX_DEFAULT: Final = 64 * 1024 * 1024
"""Default cap on an encoded delta (64 MiB): a full snapshot of 100 k keys is about 1 MB, so
this leaves room for big states while refusing a frame that would exhaust a node's memory."""

# Extension type codes. A list and a tuple are both msgpack arrays, a bytearray is packed like
# bytes, and sets are no msgpack type at all: each needs a code to come back as it left.
# Arrays decode as tuples (use_list=False: lists on a large heap wake the garbage collector,
# PERF-NOTES), which keeps tuples, the recommended shape for state values, on the fast path.
_EXT_TOMBSTONE: Final = 1
_EXT_LIST: Final = 2
_EXT_SET: Final = 3
_EXT_FROZENSET: Final = 4
_EXT_BYTEARRAY: Final = 5

EXT_NESTING_MAX: Final = 32
"""Most extension containers (lists, sets, frozensets) nested inside one another in a field
value. Each level is decoded by a nested msgpack call that puts ~40 KB on the C stack, so an
unbounded depth from a forged frame would overflow it and kill the process, not raise."""

_EXT_CODE_OF_CONTAINER: Final[dict[type, int]] = {
    list: _EXT_LIST,
    set: _EXT_SET,
    frozenset: _EXT_FROZENSET,
}

PLAIN_TYPES: Final[frozenset[type]] = frozenset({int, str, float, bool, bytes, type(None)})
"""Field values of these exact types are immutable: they need no conversion before packing,
no copy when read, and equality tells whether they changed. Checking the exact class first
keeps the common case to one set lookup."""


@final
class Tombstone:
    """The type of ``TOMBSTONE``; it has exactly one instance, also across copy and pickle."""

    __slots__ = ()
    _instance: Tombstone | None = None

    def __new__(cls) -> Tombstone:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "TOMBSTONE"

    def __reduce__(self) -> str:
        # Pickle by name, so an unpickled tombstone is the module's singleton.
        return "TOMBSTONE"

    def __copy__(self) -> Tombstone:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Tombstone:
        return self


TOMBSTONE: Final = Tombstone()
"""Marks a deleted field in an unmerged fragment or a delta; compare with ``is``."""


class DeltaError(ValueError):
    """An encoded delta is malformed, of an unknown version, too big, or not encodable."""


@dataclass(frozen=True, slots=True)
class Delta:
    """One checkpoint increment (or a full snapshot) of some slots.

    ``states``: slot -> key -> field -> value, where a value may be ``TOMBSTONE`` (the field
    was deleted). ``hwms``: slot -> mapper id -> the highest seq applied, for the slots the
    delta covers. The store never mutates a delta it has handed out, but a delta may share
    field values with the store: treat it as read-only.
    """

    states: Fragment
    hwms: dict[Slot, dict[MapperId, Seq]]
    retired: dict[MapperId, Seq] = dataclass_field(default_factory=dict)
    """Finished mappers the sender retired (``StateStore.retire``): in a checkpoint, those
    retired since the previous one; in a snapshot, all of them. Not per slot."""
    watermarks: dict[Slot, WatermarkRecord] = dataclass_field(default_factory=dict)
    """A windowed job's slot watermarks (``checkpoint.watermarks``): in a checkpoint, those
    of the slots whose watermark rose since the previous one; in a snapshot, all of the
    slots'."""

    def is_empty(self) -> bool:
        """True when the delta carries neither state, hwm, retirement nor watermark, so
        shipping it changes nothing."""
        return not self.states and not self.hwms and not self.retired and not self.watermarks

    def slots(self) -> set[Slot]:
        """Every slot the delta says something of (state, hwm vector or watermark)."""
        return set(self.states).union(self.hwms, self.watermarks)

    def key_count(self) -> int:
        """Number of (slot, key) entries the delta carries, deletions included."""
        return sum(len(keys) for keys in self.states.values())


def encode_delta(delta: Delta) -> bytes:
    """Encode ``delta`` in wire format version ``DELTA_FORMAT_VERSION`` (version 2 when it
    carries no watermarks).

    ``decode_delta(encode_delta(d))`` equals ``d`` for field values made of None, bool, int
    (64-bit), float, str, bytes, bytearray, and lists, tuples, dicts, sets and frozensets of
    those. Raises ``DeltaError`` naming the slot, key and field of a value it cannot encode.
    """
    items = [_states_to_wire(delta.states), delta.hwms, delta.retired]
    if delta.watermarks:
        items = [DELTA_FORMAT_VERSION, *items, delta.watermarks]
    else:
        items = [WITHOUT_WATERMARKS_VERSION, *items]
    try:
        encoded: bytes = msgpack.packb(items)
    except Exception as error:
        raise DeltaError(_locate_unencodable(delta, error)) from error
    return encoded


def encode_field_value(value: Any) -> bytes:
    """Encode one field value as a delta carries it; raises (``DeltaError``, ``TypeError``,
    ``OverflowError``, ...) if a delta could not carry it. For checking a value before it
    enters the store."""
    encoded: bytes = msgpack.packb(_to_wire(value))
    return encoded


def decode_delta(data: bytes, max_bytes: int = DELTA_BYTES_MAX_DEFAULT) -> Delta:
    """Decode and validate an encoded delta received from the network.

    Guarantees: returns a ``Delta`` whose slots and seqs are non-negative ints, keys are str
    or int, fields and mapper ids are str, and whose containers are fresh (not shared with
    anything); on any other input, whatever it is, raises ``DeltaError`` and nothing else.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DeltaError(f"a delta must be bytes, got {type(data).__name__}")
    size_bytes = len(data)
    if size_bytes > max_bytes:
        raise DeltaError(
            f"delta of {size_bytes} bytes exceeds the cap of {max_bytes} bytes; "
            "raise max_bytes on the receiver or checkpoint more often"
        )
    try:
        unpacker = msgpack.Unpacker(
            use_list=False,
            strict_map_key=False,
            ext_hook=_ExtDecoder(),
            # Every length inside is bounded by the input, so a forged length cannot make the
            # decoder allocate more than the frame itself.
            max_buffer_size=max(size_bytes, 1),
        )
        unpacker.feed(data)
        # The version comes first and is read alone, so a delta from a newer format is
        # refused for its version, not for whatever its body looks like.
        try:
            header_length = unpacker.read_array_header()
        except ValueError as error:  # Not an array at all.
            raise DeltaError("a delta must be an array [version, states, hwms, retired]") from error
        if header_length == 0:
            raise DeltaError("a delta must be an array [version, states, hwms, retired], got []")
        version = unpacker.unpack()
        if type(version) is not int or version not in _ITEMS_OF_VERSION:
            raise DeltaError(
                f"unsupported delta format version {version!r}; "
                f"this node reads versions {sorted(_ITEMS_OF_VERSION)}"
            )
        if header_length != _ITEMS_OF_VERSION[version]:
            raise DeltaError(
                f"a delta of version {version} must be an array of "
                f"{_ITEMS_OF_VERSION[version]} items, got {header_length}"
            )
        states = unpacker.unpack()
        hwms = unpacker.unpack()
        retired = unpacker.unpack() if version >= 2 else {}
        watermarks = unpacker.unpack() if version >= 3 else {}
        if unpacker.tell() != size_bytes:
            raise DeltaError(f"{size_bytes - unpacker.tell()} trailing bytes after the delta")
    except DeltaError:
        raise
    except msgpack.OutOfData as error:
        raise DeltaError(f"delta truncated: {size_bytes} bytes end mid-value") from error
    except Exception as error:
        # Truncated data, a forged length, nesting too deep, an unknown extension type:
        # msgpack and the extension hooks raise many types, all of which mean "malformed".
        detail = str(error) or "no detail"
        raise DeltaError(f"malformed delta: {type(error).__name__}: {detail}") from error
    _validate_states(states)
    _validate_hwms(hwms)
    _validate_retired(retired)
    try:
        records = records_from_wire(watermarks)
    except ValueError as error:
        raise DeltaError(str(error)) from error
    return Delta(states=states, hwms=hwms, retired=retired, watermarks=records)


def _states_to_wire(states: Fragment) -> dict[Slot, dict[Any, dict[str, Any]]]:
    """Return ``states`` with every field value converted by ``_to_wire``, copying only the
    maps on the way to a value that is not a plain scalar (most deltas hold none)."""
    wire_states: dict[Slot, dict[Any, dict[str, Any]]] = states
    for slot, keys in states.items():
        wire_keys: dict[Any, dict[str, Any]] = keys
        for key, fields in keys.items():
            for value in fields.values():
                if value.__class__ not in PLAIN_TYPES:
                    break
            else:
                continue
            if wire_keys is keys:
                wire_keys = dict(keys)
                if wire_states is states:
                    wire_states = dict(states)
                wire_states[slot] = wire_keys
            wire_keys[key] = {field: _to_wire(value) for field, value in fields.items()}
    return wire_states


def _to_wire(value: Any, depth: int = 0) -> Any:
    """Convert a field value to what msgpack packs so that it decodes back to ``value``.

    ``depth`` counts the extension containers around ``value``; past ``EXT_NESTING_MAX`` the
    value is refused here, as a decoder would refuse it.
    """
    cls = value.__class__
    if cls in PLAIN_TYPES:
        return value
    if value is TOMBSTONE:
        return msgpack.ExtType(_EXT_TOMBSTONE, b"")
    if cls is tuple:
        return tuple(_to_wire(item, depth) for item in value)
    if cls is dict:
        return {_to_wire(k, depth): _to_wire(v, depth) for k, v in value.items()}
    if cls is bytearray:
        return msgpack.ExtType(_EXT_BYTEARRAY, bytes(value))
    code = _EXT_CODE_OF_CONTAINER.get(cls)
    if code is None:
        # Anything else is left to msgpack, which packs what it knows or raises TypeError.
        return value
    if depth >= EXT_NESTING_MAX:
        raise DeltaError(f"value nests lists or sets deeper than {EXT_NESTING_MAX} levels")
    return msgpack.ExtType(code, msgpack.packb([_to_wire(item, depth + 1) for item in value]))


class _ExtDecoder:
    """msgpack ``ext_hook`` that rebuilds values packed as extension types by ``_to_wire``,
    refusing containers nested deeper than ``EXT_NESTING_MAX``. One per decode call."""

    __slots__ = ("depth",)

    def __init__(self) -> None:
        self.depth = 0

    def __call__(self, code: int, data: bytes) -> Any:
        if code == _EXT_TOMBSTONE:
            if data:
                raise DeltaError("a tombstone carries no data")
            return TOMBSTONE
        if code == _EXT_BYTEARRAY:
            return bytearray(data)
        if code not in (_EXT_LIST, _EXT_SET, _EXT_FROZENSET):
            raise DeltaError(f"unknown extension type {code} in delta")
        if self.depth >= EXT_NESTING_MAX:
            raise DeltaError(f"value nests lists or sets deeper than {EXT_NESTING_MAX} levels")
        self.depth += 1
        try:
            items = msgpack.unpackb(data, use_list=False, strict_map_key=False, ext_hook=self)
        finally:
            self.depth -= 1
        if type(items) is not tuple:
            raise DeltaError(f"extension type {code} must hold an array")
        if code == _EXT_LIST:
            return list(items)
        return set(items) if code == _EXT_SET else frozenset(items)


def _validate_states(states: Any) -> None:
    """Raise ``DeltaError`` unless ``states`` is slot -> key -> field -> value."""
    if type(states) is not dict:
        raise DeltaError(f"delta states must be a map, got {type(states).__name__}")
    for slot, keys in states.items():
        _check_non_negative_int(slot, "slot")
        if type(keys) is not dict:
            raise DeltaError(f"state of slot {slot} must be a map, got {type(keys).__name__}")
        for key, fields in keys.items():
            if not isinstance(key, (str, int)):
                raise DeltaError(
                    f"key {key!r} in slot {slot} must be str or int, got {type(key).__name__}"
                )
            if type(fields) is not dict:
                raise DeltaError(
                    f"state of key {key!r} in slot {slot} must be a map, "
                    f"got {type(fields).__name__}"
                )
            for field in fields:
                if type(field) is not str:
                    raise DeltaError(
                        f"field {field!r} of key {key!r} in slot {slot} must be str, "
                        f"got {type(field).__name__}"
                    )


def _validate_hwms(hwms: Any) -> None:
    """Raise ``DeltaError`` unless ``hwms`` is slot -> mapper id -> seq."""
    if type(hwms) is not dict:
        raise DeltaError(f"delta hwms must be a map, got {type(hwms).__name__}")
    for slot, vector in hwms.items():
        _check_non_negative_int(slot, "slot")
        if type(vector) is not dict:
            raise DeltaError(
                f"hwm vector of slot {slot} must be a map, got {type(vector).__name__}"
            )
        for mapper, seq in vector.items():
            if type(mapper) is not str:
                raise DeltaError(
                    f"mapper id {mapper!r} in slot {slot} must be str, got {type(mapper).__name__}"
                )
            _check_non_negative_int(seq, f"seq of mapper {mapper!r} in slot {slot}")


def _validate_retired(retired: Any) -> None:
    """Raise ``DeltaError`` unless ``retired`` is mapper id -> seq."""
    if type(retired) is not dict:
        raise DeltaError(f"delta retired mappers must be a map, got {type(retired).__name__}")
    for mapper, seq in retired.items():
        if type(mapper) is not str:
            raise DeltaError(f"retired mapper id {mapper!r} must be str")
        _check_non_negative_int(seq, f"last seq of retired mapper {mapper!r}")


def _check_non_negative_int(value: Any, what: str) -> None:
    # bool is an int subclass; a slot or seq of True is a forgery, not a number.
    if type(value) is not int or value < 0:
        raise DeltaError(f"{what} must be a non-negative int, got {value!r}")


def _locate_unencodable(delta: Delta, error: Exception) -> str:
    """Explain an encoding failure, naming the first field value that cannot be encoded."""
    for slot, keys in delta.states.items():
        for key, fields in keys.items():
            for field, value in fields.items():
                try:
                    msgpack.packb(_to_wire(value))
                except Exception as field_error:
                    return (
                        f"cannot encode field {field!r} of key {key!r} in slot {slot}: "
                        f"{type(value).__name__} value {value!r:.80}: {field_error}; "
                        "keep state values to None, bool, int (64-bit), float, str, bytes "
                        "and lists, tuples, dicts and sets of those"
                    )
    return f"cannot encode delta: {type(error).__name__}: {error}"


def merge_into(
    master: Fragment,
    fragment: Fragment,
    may_hold_tombstones: bool = True,
    new_slot: SlotTableFactory | None = None,
) -> None:
    """Merge ``fragment`` into ``master`` (which holds no tombstone, empty key or empty slot).

    Copies every key map it adds, so master never shares a dict with the fragment, and
    never mutates the fragment. ``may_hold_tombstones=False`` promises the fragment holds
    none, which allows a faster path. A slot of master held in a table (not a ``dict``:
    :class:`SlotTable`) merges the slot's keys itself; ``new_slot``, when given, makes the
    table of a slot master does not hold yet.
    """
    for slot, keys in fragment.items():
        master_keys = master.get(slot)
        if master_keys is None and new_slot is not None:
            master_keys = master[slot] = new_slot()
        if master_keys is not None and master_keys.__class__ is not dict:
            cast(SlotTable, master_keys).merge(keys)
            if not master_keys:
                del master[slot]
            continue
        if not may_hold_tombstones:
            if master_keys is None:
                copied = {key: fields.copy() for key, fields in keys.items() if fields}
                if copied:
                    master[slot] = copied
                continue
            for key, fields in keys.items():
                master_fields = master_keys.get(key)
                if master_fields is None:
                    if fields:
                        master_keys[key] = fields.copy()
                else:
                    master_fields.update(fields)
            continue
        if master_keys is None:
            master_keys = master[slot] = {}
        for key, fields in keys.items():
            master_fields = master_keys.get(key)
            if master_fields is None:
                live = {name: value for name, value in fields.items() if value is not TOMBSTONE}
                if live:
                    master_keys[key] = live
                continue
            for name, value in fields.items():
                if value is TOMBSTONE:
                    master_fields.pop(name, None)
                else:
                    master_fields[name] = value
            if not master_fields:
                del master_keys[key]
        if not master_keys:
            del master[slot]


class SlotTable(Protocol):
    """A slot's keys in master held other than in a dict (``smr._native.SlotTable``): it
    answers as the dict ``{key: {field: value}}`` it stands for (``get``, ``in``, ``len``,
    iteration, ``items``, ``pop``), each state a dict the caller must not write to, and
    ``merge(keys)`` merges one slot's keys of a fragment by :func:`merge_into`'s rule."""

    def merge(self, keys: Mapping[Any, Mapping[str, Any]]) -> None: ...

    def __len__(self) -> int: ...


SlotTableFactory = Callable[[], Any]
"""Makes an empty :class:`SlotTable` for a slot master starts to hold."""
