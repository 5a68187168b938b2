"""The batcher: the mapper's hot path (step 1 of :mod:`smr.mapper.emitter`).

:class:`Batcher` owns the open batches (one per destination), the seqs, the slot cache and
the linger deadline. A tuple joins the open batch of its slot's primary; a batch closes at
``batch_size`` tuples, and before a tuple that would take its estimated encoded size past
``batch_bytes``; without combine, every open batch closes at an emit ``linger_ms`` or more
after the first tuple opened. A closed batch goes to the ``send`` function it was given.

The emit functions are closures that bind what they touch to locals once; the batcher
mutates those very lists in place (:meth:`Batcher.regroup`), so they stay valid across view
changes. Per-tuple work stays inline in them; only a closing batch calls out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from smr.mapper.channels import Row, slot_and_seq
from smr.ring.hashing import slot_of
from smr.values import (
    HEADER_BYTES_MAX,
    ROW_FIXED_BYTES,
    SCALAR_BYTES_MAX,
    EmitError,
    row_bytes,
)

# Keys whose slot is remembered; past it the cache starts over (a word stream's vocabulary
# fits; an unbounded key space must not grow the mapper without bound).
SLOT_CACHE_KEYS_MAX: Final = 1_000_000


EmitPair = tuple[Callable[[Any, Any], None], Callable[[Any, Any, int], None]]
"""``(emit(key, value), emit_sized(key, value, size))``: ``emit`` checks the tuple
(:func:`smr.values.row_bytes`; :class:`smr.values.EmitError` with nothing emitted if it
cannot travel); ``emit_sized`` takes a tuple already checked, with the size the check gave."""


# Keys of at most this many characters have their slot cached (Batcher._slot), so a key
# found in the cache makes, with an int value, a row of at most FAST_ROW_BYTES_MAX bytes.
CACHED_KEY_CHARS_MAX: Final = 64
FAST_ROW_BYTES_MAX: Final = (
    ROW_FIXED_BYTES + HEADER_BYTES_MAX + 4 * CACHED_KEY_CHARS_MAX + SCALAR_BYTES_MAX
)


class Batcher:
    """The open batches, the seqs and the slot cache of one emitter.

    Without combine, a tuple's seq is its position in the mapper's stream (1 for the first
    after :meth:`begin`'s base): seqs rise per slot, with gaps, and a tuple's identity
    depends on the tuples emitted before it alone, not on batching. With combine, each
    combined row takes the next seq of its slot when its batch closes.

    Guarantees: a closed batch's rows go to ``send(dest, rows)`` in seq order per slot; no
    tuple is left behind by :meth:`close_all`; rows handed back by :meth:`reopen` keep their
    seqs and are sent again in seq order per slot.
    """

    def __init__(
        self,
        slot_bits: int,
        batch_size: int,
        batch_bytes: int,
        combine: Callable[[Any, Any], Any] | None,
        linger_ms: float | None,
        send: Callable[[int, list[Row]], None],
    ) -> None:
        self.slot_bits = slot_bits
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self._combine = combine
        self._send = send
        # When open batches must go (wall-clock time, as the rows' emit times; infinity while
        # none is open): one item, shared with the emit closures.
        self._linger_s = math.inf if linger_ms is None else linger_ms / 1000
        self._flush_due = [math.inf]
        # The last seq given: without combine, the position of the last tuple emitted (one
        # item, shared with the emit closures); with combine, the last seq of each slot.
        self._position = [0]
        self._seqs = [0] * (1 << slot_bits)
        self._slot_cache: dict[Any, int] = {}
        # Open batches per destination index; rows, or key -> [slot, value, ts] with combine.
        self._open_rows: list[list[Row]] = []
        self._open_combined: list[dict[Any, list[Any]]] = []
        # Estimated encoded bytes of each open batch (see smr.values.row_bytes).
        self._open_bytes: list[int] = []
        self._dest_of_slot: list[int] = []
        # With combine: how many times emit was called (rows merge, so seqs count fewer).
        self._combined_emits = 0
        # Set by begin: the seq base of the current mapper, and what earlier ones emitted.
        self._seq_base = 0
        self._emitted_before = 0
        # emit(key, value) checks the tuple (EmitError, nothing emitted, if it cannot
        # travel); emit_sized(key, value, size) takes one checked by row_bytes; emit_many
        # and emit_record: every tuple checked, then all emitted, or none.
        self.emit: Callable[[Any, Any], None]
        self.emit_sized: Callable[[Any, Any, int], None]
        self.emit, self.emit_sized = self._make_combining_emit() if combine else self._make_emit()
        self.emit_many = self._make_emit_many(self.emit_sized)
        self.emit_record = make_emit_record(self.emit_many)

    # -- routing of open tuples ---------------------------------------------------------------

    def regroup(self, dest_of_slot: list[int], destinations: int) -> None:
        """Route by ``dest_of_slot`` (of ``destinations`` destinations) from now on; open
        tuples move with their slots, in seq order per slot."""
        old_rows = [row for rows in self._open_rows for row in rows]
        old_combined = [item for batch in self._open_combined for item in batch.items()]
        # Mutated in place: the emit closures hold these very lists.
        self._dest_of_slot[:] = dest_of_slot
        self._open_rows[:] = [[] for _ in range(destinations)]
        self._open_combined[:] = [{} for _ in range(destinations)]
        # Moved tuples are not counted: a batch they make too big is split when encoded.
        self._open_bytes[:] = [0] * destinations
        for row in old_rows:
            self._open_rows[self._dest_of_slot[row[0]]].append(row)
        # Rows of one slot all sat in one list, so this keeps their seq order as it was; the
        # sort makes sure (a list left unsorted would send a seq after a higher one, which
        # the node's hwm would then drop as a duplicate).
        for rows in self._open_rows:
            rows.sort(key=slot_and_seq)
        for key, entry in old_combined:
            self._open_combined[self._dest_of_slot[entry[0]]][key] = entry

    def reopen(self, rows: list[Row]) -> None:
        """Put rows already given seqs (re-routed, or held back) among the open ones, by the
        current routing; :meth:`send_open_rows` sends them."""
        open_rows = self._open_rows
        dest_of_slot = self._dest_of_slot
        for row in rows:
            open_rows[dest_of_slot[row[0]]].append(row)

    def send_open_rows(self, hold_back: bool = False) -> None:
        """Send every open row now (re-routed and released ones among them); with
        ``hold_back`` (re-routes nested too deep), leave them open for the next flush."""
        # Re-routed and released rows went in after newer open rows of their slots: restore
        # seq order per slot, which the nodes rely on (the primary's hwm dedup drops a seq
        # below one already applied; a secondary summarises a batch by the last seq of each
        # slot). Every destination first: sending one may wait for window room, and a view
        # change meanwhile moves the others' rows to destinations this loop has passed.
        for rows in self._open_rows:
            rows.sort(key=slot_and_seq)
        if hold_back:
            return
        for dest, rows in enumerate(self._open_rows):
            if rows:
                self._open_rows[dest] = []
                self._send(dest, rows)

    def open_rows(self, dest: int) -> list[Row]:
        """A copy of the open rows of destination ``dest``."""
        return list(self._open_rows[dest])

    # -- closing batches ------------------------------------------------------------------------

    def _slot(self, key: Any) -> int:
        """The key's slot, remembered if the key is short: a key found in the cache is
        known to be a good key that makes a small row."""
        slot = slot_of(key, self.slot_bits)
        if key.__class__ is str and len(key) > CACHED_KEY_CHARS_MAX:
            return slot
        if len(self._slot_cache) >= SLOT_CACHE_KEYS_MAX:
            self._slot_cache.clear()
        self._slot_cache[key] = slot
        return slot

    def _dispatch_combined(self, dest: int) -> None:
        combined = self._open_combined[dest]
        self._open_bytes[dest] = 0
        if not combined:
            return
        # Re-routed or released rows still open for this destination (left for the next
        # send by a re-route deep in nested pumps) hold older seqs of these slots: they go
        # first, in this batch. Sent after it, the node's hwm would drop them as duplicates.
        rows: list[Row] = self._open_rows[dest]
        self._open_rows[dest] = []
        seqs = self._seqs
        for key, (slot, value, ts) in combined.items():
            seq = seqs[slot] + 1
            seqs[slot] = seq
            rows.append((slot, seq, key, value, ts))
        combined.clear()
        self._send(dest, rows)

    def _dispatch_rows(self, dest: int) -> None:
        rows = self._open_rows[dest]
        self._open_bytes[dest] = 0
        if not rows:
            return
        self._open_rows[dest] = []
        self._send(dest, rows)

    def close_all(self) -> None:
        """Close and send every open batch, until no tuple is left open.

        Sending may wait for window room, and a view change while waiting re-sorts the
        open tuples by the new view (:meth:`regroup`), possibly to destinations already
        passed and with fewer destinations than before: so look for open tuples afresh
        after each send instead of walking the destinations once.
        """
        self._flush_due[0] = math.inf
        while True:
            dest = self._first_open_dest()
            if dest is None:
                return
            if self._open_rows[dest]:
                self._dispatch_rows(dest)
            else:
                self._dispatch_combined(dest)

    def _first_open_dest(self) -> int | None:
        """The first destination with open tuples (rows, or combined entries), if any."""
        for dest in range(len(self._open_rows)):
            if self._open_rows[dest] or self._open_combined[dest]:
                return dest
        return None

    def has_open(self) -> bool:
        """Whether any tuple is open (not yet sent)."""
        return self._first_open_dest() is not None

    def clear(self) -> None:
        """Forget every open tuple (an aborted mapper)."""
        for rows in self._open_rows:
            rows.clear()
        for combined in self._open_combined:
            combined.clear()

    # -- positions ------------------------------------------------------------------------------

    def begin(self, seq_base: int) -> None:
        """Give the following tuples seqs from ``seq_base + 1`` (positions without combine,
        per slot with it); what was emitted so far stays counted in ``tuples_emitted``."""
        self._emitted_before = self.tuples_emitted
        self._seq_base = seq_base
        self._position[0] = seq_base
        self._seqs[:] = [seq_base] * len(self._seqs)
        self._combined_emits = 0

    @property
    def combines(self) -> bool:
        """Whether tuples of a key are folded together in their open batch (``combine``)."""
        return self._combine is not None

    @property
    def position(self) -> int:
        """Without combine, the seq of the last tuple emitted."""
        return self._position[0]

    def last_seq(self) -> int:
        """The highest seq given a tuple since :meth:`begin` (its seq base if none): the
        position without combine, the highest per-slot seq with it."""
        if self._combine is None:
            return self._position[0]
        return max(self._seqs, default=self._seq_base)

    @property
    def tuples_emitted(self) -> int:
        """Tuples passed to ``emit`` so far (without combine, read off the position, one
        per tuple, so no path that sends rows can miss or repeat one)."""
        if self._combine is None:
            return self._emitted_before + self._position[0] - self._seq_base
        return self._emitted_before + self._combined_emits

    # -- the emit closures (bound once, at construction) ------------------------------

    def _byte_bounds(self) -> tuple[int, int, bool]:
        """``(small_row_bytes, big_rows_bytes_max, fast)``.

        Rows of at most ``small_row_bytes`` are not added up: a full batch of them takes at most
        half the budget. The others are, and a batch closes before they would pass the other
        half; so a body stays within the budget plus one row (at most twice the budget, which
        the encoder checks: ``smr.mapper.channels.encode_within``). ``fast``: a cached key with a
        non-negative int value makes a small row (not so with a tiny budget per row).
        """
        small_row_bytes = self.batch_bytes // (2 * self.batch_size)
        big_rows_bytes_max = self.batch_bytes - small_row_bytes * self.batch_size
        return small_row_bytes, big_rows_bytes_max, small_row_bytes >= FAST_ROW_BYTES_MAX

    def _make_room_maker(self, dispatch: Callable[[int], None]) -> Callable[[int, int], None]:
        """``make_room(dest, size_bytes)`` for a row over ``small_row_bytes``: its bytes are
        added up for its destination's open batch, which ``dispatch`` closes first if this row
        would take it past ``big_rows_bytes_max`` (:meth:`_byte_bounds`)."""
        open_bytes = self._open_bytes
        big_rows_bytes_max = self._byte_bounds()[1]

        def make_room(dest: int, size_bytes: int) -> None:
            held = open_bytes[dest] + size_bytes
            if held > big_rows_bytes_max:
                dispatch(dest)  # close the batch before this row would take it over
                held = size_bytes
            open_bytes[dest] = held

        return make_room

    def _make_linger(self) -> Callable[[float], None]:
        """``linger(emitted_at)`` after a tuple is added: the first tuple opened since the last
        flush sets when the open batches must go (``linger_ms`` later); the first emit at or past
        that time flushes them all, full or not."""
        flush_due = self._flush_due
        flush = self.close_all
        linger_s = self._linger_s
        never = math.inf

        def linger(emitted_at: float) -> None:
            due = flush_due[0]
            if emitted_at >= due:
                flush()
            elif due == never:
                flush_due[0] = emitted_at + linger_s

        return linger

    def _make_emit(self) -> EmitPair:
        """The emit closures without combine: a tuple joins the open rows of its primary, with
        its position in the mapper's stream as its seq.

        The common tuple (a key already in the slot cache, hence checked once and short, with a
        non-negative int value under 2**63) is checked inline with a few type tests; any other
        goes through :func:`smr.values.row_bytes`."""
        slot_cache_get = self._slot_cache.get
        find_slot = self._slot
        position = self._position
        dest_of_slot = self._dest_of_slot
        open_rows = self._open_rows
        batch_size = self.batch_size
        batch_bytes = self.batch_bytes
        small_row_bytes, _, fast = self._byte_bounds()
        dispatch = self._dispatch_rows
        make_room = self._make_room_maker(dispatch)
        now = time.time
        linger = self._make_linger()

        def emit_sized(key: Any, value: Any, size: int) -> None:
            slot = slot_cache_get(key)
            if slot is None:
                slot = find_slot(key)
            dest = dest_of_slot[slot]
            if size > small_row_bytes:
                make_room(dest, size)
            seq = position[0] + 1
            position[0] = seq
            rows = open_rows[dest]
            emitted_at = now()
            rows.append((slot, seq, key, value, emitted_at))
            if len(rows) >= batch_size:
                dispatch(dest)
            else:
                linger(emitted_at)

        def emit(key: Any, value: Any) -> None:
            # A cached key was checked when cached; the class test comes first, since an
            # unhashable key cannot be looked up and True or 1.0 would find 1's entry.
            if (
                value.__class__ is int
                and not value >> 63
                and fast
                and (key.__class__ is str or key.__class__ is int)
            ):
                slot = slot_cache_get(key)
                if slot is not None:
                    dest = dest_of_slot[slot]
                    seq = position[0] + 1
                    position[0] = seq
                    rows = open_rows[dest]
                    emitted_at = now()
                    rows.append((slot, seq, key, value, emitted_at))
                    if len(rows) >= batch_size:
                        dispatch(dest)
                    else:
                        linger(emitted_at)
                    return
            emit_sized(key, value, row_bytes(key, value, batch_bytes))

        return emit, emit_sized

    def _make_combining_emit(self) -> EmitPair:
        """The emit closures with combine: a key already open in its batch is folded into it
        (only a new key adds a row, and only rows are added up by bytes). No ``linger_ms``:
        combined rows get their seqs when their batch closes, so where batches close must
        depend on the tuples only, never on time, for a rerun to give them the same identities."""
        slot_cache_get = self._slot_cache.get
        find_slot = self._slot
        dest_of_slot = self._dest_of_slot
        open_combined = self._open_combined
        batch_size = self.batch_size
        batch_bytes = self.batch_bytes
        small_row_bytes, _, fast = self._byte_bounds()
        dispatch = self._dispatch_combined
        make_room = self._make_room_maker(dispatch)
        combine = self._combine
        assert combine is not None
        now = time.time

        def emit_sized(key: Any, value: Any, size: int) -> None:
            slot = slot_cache_get(key)
            if slot is None:
                slot = find_slot(key)
            dest = dest_of_slot[slot]
            combined = open_combined[dest]
            entry = combined.get(key)
            if entry is None:
                self._combined_emits += 1
                if size > small_row_bytes:
                    make_room(dest, size)
                combined[key] = [slot, value, now()]
                if len(combined) >= batch_size:
                    dispatch(dest)
            else:
                try:
                    entry[1] = combine(entry[1], value)
                except Exception as error:
                    # Said as a bad emit, not a crash: the feeder reports the record and goes on
                    # (its earlier tuples already folded in stay: combine had taken them).
                    raise EmitError(
                        f"combine raised {type(error).__name__}: {error} for key {key!r}"
                    ) from error
                self._combined_emits += 1

        def emit(key: Any, value: Any) -> None:
            if (
                value.__class__ is int
                and not value >> 63
                and fast
                and (key.__class__ is str or key.__class__ is int)
                and slot_cache_get(key) is not None
            ):
                emit_sized(key, value, 0)
            else:
                emit_sized(key, value, row_bytes(key, value, batch_bytes))

        return emit, emit_sized

    def _make_emit_many(
        self, emit_sized: Callable[[Any, Any, int], None]
    ) -> Callable[[Sequence[Any], Sequence[Any]], None]:
        """``emit_many(keys, values)``: check every tuple (the common one inline, as in ``emit``;
        the others by :func:`smr.values.row_bytes`), then emit them all through ``emit_sized``
        without a second look: a bad one raises :class:`smr.values.EmitError` before any is
        emitted, so they go out all or none."""
        slot_cache_get = self._slot_cache.get
        batch_bytes = self.batch_bytes
        fast = self._byte_bounds()[2]

        def emit_many(keys: Sequence[Any], values: Sequence[Any]) -> None:
            if len(keys) != len(values):
                raise ValueError(f"emit_many got {len(keys)} keys and {len(values)} values")
            sizes = [
                0
                if (
                    value.__class__ is int
                    and not value >> 63
                    and fast
                    and (key.__class__ is str or key.__class__ is int)
                    and slot_cache_get(key) is not None
                )
                else row_bytes(key, value, batch_bytes)
                for key, value in zip(keys, values, strict=True)
            ]
            for key, value, size in zip(keys, values, sizes, strict=True):
                emit_sized(key, value, size)

        return emit_many


def make_emit_record(
    emit_many: Callable[[Sequence[Any], Sequence[Any]], None],
) -> Callable[[Sequence[tuple[Any, Any]]], None]:
    """``emit_record(pairs)``: the pairs of one record through ``emit_many``, so they go out
    all or none (a bad one raises :class:`smr.values.EmitError` before any is emitted)."""

    def emit_record(pairs: Sequence[tuple[Any, Any]]) -> None:
        if pairs:
            keys, values = zip(*pairs, strict=True)
            emit_many(keys, values)

    return emit_record
