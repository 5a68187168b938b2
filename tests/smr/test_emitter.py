"""The emitter's mapper switching: seqs restart from a base, and only when drained."""

from __future__ import annotations

import pytest

from checkpoint.ids import MapperId
from ring.hashing import slot_of
from ring.ids import NodeId, Token
from ring.view import Member, Status, View
from smr.emitter import SEQ_MAX, Emitter

SLOT_BITS = 8


def _emitter() -> Emitter:
    view = View([Member(NodeId("a"), 1, "tcp://127.0.0.1:1", Token(0), "", Status.UP, 1)])
    # A batch size no test reaches: tuples stay open, so no socket is ever used.
    return Emitter(view, SLOT_BITS, MapperId("first"), batch_size=1_000_000)


def test_begin_mapper_gives_seqs_from_the_base_and_the_new_mapper_id() -> None:
    emitter = _emitter()
    emitter.begin_mapper(MapperId("q/3"), seq_base=7 << 32)
    emitter.emit("w", 1)
    emitter.emit("w", 1)
    (row_1, row_2) = emitter._open_rows[0]
    assert (row_1[0], row_1[1]) == (slot_of("w", SLOT_BITS), (7 << 32) + 1)
    assert row_2[1] == (7 << 32) + 2
    assert emitter.mapper_id == "q/3"


def test_begin_mapper_refuses_while_tuples_are_open() -> None:
    emitter = _emitter()
    emitter.emit("w", 1)
    with pytest.raises(RuntimeError, match="drain"):
        emitter.begin_mapper(MapperId("q/4"))
    assert emitter.mapper_id == "first"


@pytest.mark.parametrize("base", [-1, SEQ_MAX])
def test_begin_mapper_refuses_a_base_outside_the_seq_range(base: int) -> None:
    with pytest.raises(ValueError, match="seq_base"):
        _emitter().begin_mapper(MapperId("q/5"), seq_base=base)


def test_every_emitter_has_its_own_stream() -> None:
    assert _emitter().stream_id != _emitter().stream_id
