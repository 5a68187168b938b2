"""A node's state files (``smr.node.disk``): a snapshot and its checkpoints restore the store
exactly (fields, deletions, hwms, retired mappers) with the view; a new generation replaces
the old one whole; a damaged file is refused with the file named."""

from __future__ import annotations

from pathlib import Path

import pytest

from smr.checkpoint.delta import encode_delta
from smr.checkpoint.ids import MapperId, Seq
from smr.checkpoint.store import StateStore
from smr.node.disk import DiskError, DiskState
from smr.ring.ids import NodeId, Slot, Token
from smr.ring.placement import SlotRange
from smr.ring.view import Member, Status, View

VIEW = View([Member(NodeId("a"), 1, "tcp://a", Token(0), "", Status.UP, 1)])
RANGE = SlotRange(Slot(0), 256, 256)
M = MapperId("m")


def add(store: StateStore, slot: int, seq: int, key: str, value: int) -> None:
    def count(key: object, value: int, state: dict[str, int]) -> None:
        state["n"] = state.get("n", 0) + value

    store.apply_batch(M, [slot], [seq], [key], [value], count)


def checkpoint(disk: DiskState, store: StateStore, own_range: object = RANGE) -> None:
    delta = store.swap()
    store.merge_inactive()
    disk.on_checkpoint(store, VIEW, own_range, [encode_delta(delta)])


def contents(store: StateStore) -> tuple[object, ...]:
    slots = sorted(store.slots())
    return (
        sorted((s, k, tuple(sorted(v.items()))) for s, k, v in store.items()),
        {slot: store.hwm_vector(Slot(slot)) for slot in slots},
        dict(store.retired),
    )


def test_a_snapshot_and_its_checkpoints_restore_the_store_exactly(tmp_path: Path) -> None:
    disk = DiskState(tmp_path / "a")
    store = StateStore()
    add(store, 1, 1, "x", 2)
    checkpoint(disk, store)  # the first is a snapshot
    add(store, 1, 2, "x", 3)
    add(store, 2, 3, "y", 1)
    checkpoint(disk, store)
    store.delete(Slot(2), "y")
    store.retire(MapperId("done"), Seq(9), forget_hwms=False)
    checkpoint(disk, store)
    disk.close()
    restored = DiskState(tmp_path / "a").restore()
    assert restored is not None
    assert (restored.generation, restored.checkpoints, restored.keys) == (1, 2, 1)
    assert contents(restored.store) == contents(store)
    assert restored.view == VIEW


def test_a_new_range_writes_a_new_generation_and_removes_the_old(tmp_path: Path) -> None:
    disk = DiskState(tmp_path / "a")
    store = StateStore()
    add(store, 1, 1, "x", 1)
    checkpoint(disk, store)
    checkpoint(disk, store)
    store.drop_slots([Slot(1)])
    add(store, 3, 2, "z", 1)
    checkpoint(disk, store, SlotRange(Slot(0), 128, 256))
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["log-2.smr", "snapshot-2.smr"]
    restored = DiskState(tmp_path / "a").restore()
    assert restored is not None and contents(restored.store) == contents(store)


def test_nothing_on_disk_restores_nothing(tmp_path: Path) -> None:
    assert DiskState(tmp_path / "none").restore() is None
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "snapshot-3.tmp").write_bytes(b"a write cut by a crash")
    assert DiskState(tmp_path / "a").restore() is None


@pytest.mark.parametrize("which", ["snapshot", "log"])
def test_a_damaged_file_is_refused_and_named(tmp_path: Path, which: str) -> None:
    disk = DiskState(tmp_path / "a")
    store = StateStore()
    add(store, 1, 1, "x", 1)
    checkpoint(disk, store)
    add(store, 1, 2, "x", 1)
    checkpoint(disk, store)
    disk.close()
    (path,) = (tmp_path / "a").glob(f"{which}-*.smr")
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DiskError, match=f"{path} is damaged at byte .*checksum mismatch"):
        DiskState(tmp_path / "a").restore()


def test_the_state_of_another_cluster_is_refused(tmp_path: Path) -> None:
    disk = DiskState(tmp_path / "a", incarnation="first-life")
    store = StateStore()
    add(store, 1, 1, "x", 1)
    checkpoint(disk, store)
    disk.close()
    assert DiskState(tmp_path / "a", incarnation="first-life").restore() is not None
    with pytest.raises(DiskError, match=r"another cluster .*'first-life', this one is 'other'"):
        DiskState(tmp_path / "a", incarnation="other").restore()


def test_after_a_failed_write_the_next_checkpoint_is_a_whole_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = DiskState(tmp_path / "a")
    store = StateStore()
    add(store, 1, 1, "x", 1)
    checkpoint(disk, store)
    add(store, 2, 2, "y", 1)
    real_open_log = DiskState._open_log

    class FullDisk:
        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(DiskState, "_open_log", lambda self: FullDisk())
    with pytest.raises(OSError, match="No space"):
        checkpoint(disk, store)  # y's checkpoint never reached the log
    monkeypatch.setattr(DiskState, "_open_log", real_open_log)
    add(store, 1, 3, "x", 1)
    checkpoint(disk, store)
    assert disk.generation == 2
    disk.close()
    restored = DiskState(tmp_path / "a").restore()
    assert restored is not None and contents(restored.store) == contents(store)
