"""A node's state files (``smr.node.disk``): a snapshot and its checkpoints restore the store
exactly (fields, deletions, hwms, retired mappers) with the view; a new generation replaces
the old one whole; a damaged file is refused with the file named, and so is a file that
holds less than its manifest says (a log cut at a record boundary, emptied or removed, a
snapshot removed); a directory written before manifests restores unchecked, and says so."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from smr.checkpoint.delta import encode_delta
from smr.checkpoint.ids import MapperId, Seq
from smr.checkpoint.records import decode_records, encode_record
from smr.checkpoint.store import StateStore
from smr.node.disk import LEGACY_DISK_FORMAT, DiskError, DiskState
from smr.ring.ids import NodeId, Slot, Token
from smr.ring.placement import SlotRange
from smr.ring.view import Member, Status, View
from smr.wire.codec import pack_body

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


def a_checkpoint_then_a_write(directory: Path) -> tuple[DiskState, StateStore]:
    """A disk with one checkpoint (of "x"), and its store with a write ("y") since."""
    disk = DiskState(directory)
    store = StateStore()
    add(store, 1, 1, "x", 1)
    checkpoint(disk, store)
    add(store, 2, 2, "y", 1)
    return disk, store


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
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "log-2.smr",
        "manifest-2.smr",
        "snapshot-2.smr",
    ]
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
    disk, store = a_checkpoint_then_a_write(tmp_path / "a")
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


def three_checkpoints(directory: Path) -> StateStore:
    """A generation of a snapshot and a log of three checkpoints; the store it holds."""
    disk = DiskState(directory)
    store = StateStore()
    add(store, 1, 1, "x", 1)
    checkpoint(disk, store)
    for seq in range(2, 5):
        add(store, seq, seq, f"k{seq}", seq)
        checkpoint(disk, store)
    disk.close()
    return store


def cut_at_records(path: Path, keep: int) -> None:
    records = decode_records(path.read_bytes())
    path.write_bytes(b"".join(encode_record(record) for record in records[:keep]))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("log cut at a record boundary", r"log-1.smr holds 1 of 3 checkpoints \(cut after byte"),
        ("log cut to 0 bytes", r"log-1.smr holds 0 of 3 checkpoints \(cut after byte 0 of"),
        ("log removed", r"log-1.smr is missing: it held 3 checkpoints \(\d+ bytes\)"),
        ("snapshot removed", r"snapshot-1.smr is missing \(its manifest describes \d+ bytes\)"),
        ("manifest removed", r"manifest-1.smr is missing: what generation 1 must hold is unknown"),
    ],
)
def test_a_file_holding_less_than_its_manifest_says_is_refused_and_named(
    tmp_path: Path, damage: str, said: str
) -> None:
    three_checkpoints(tmp_path / "a")
    log, snapshot = tmp_path / "a" / "log-1.smr", tmp_path / "a" / "snapshot-1.smr"
    if damage == "log cut at a record boundary":
        cut_at_records(log, 1)
    elif damage == "log cut to 0 bytes":
        log.write_bytes(b"")
    elif damage == "log removed":
        log.unlink()
    elif damage == "snapshot removed":
        snapshot.unlink()
    else:
        (tmp_path / "a" / "manifest-1.smr").unlink()
    assert DiskState(tmp_path / "a").has_state()
    refusal = f"^a: {tmp_path}/a/{said}.*; refusing to restore in part$"
    with pytest.raises(DiskError, match=refusal):
        DiskState(tmp_path / "a").restore()
    # The check `up` asks of every node before it starts any says the same.
    with pytest.raises(DiskError, match=refusal):
        DiskState(tmp_path / "a").check()


def test_a_whole_generation_passes_the_check(tmp_path: Path) -> None:
    three_checkpoints(tmp_path / "a")
    DiskState(tmp_path / "a").check()
    DiskState(tmp_path / "empty").check()  # nothing on disk: nothing to refuse
    with pytest.raises(DiskError, match="holds the state of another cluster"):
        DiskState(tmp_path / "a", incarnation="another").check()


def test_a_log_without_snapshot_or_manifest_is_refused(tmp_path: Path) -> None:
    three_checkpoints(tmp_path / "a")
    (tmp_path / "a" / "snapshot-1.smr").unlink()
    (tmp_path / "a" / "manifest-1.smr").unlink()
    with pytest.raises(
        DiskError, match=r"snapshot-1.smr is missing \(its log log-1.smr is there\)"
    ):
        DiskState(tmp_path / "a").restore()


def test_a_checkpoint_appended_before_a_crash_kept_its_manifest_is_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk, store = a_checkpoint_then_a_write(tmp_path / "a")
    monkeypatch.setattr(DiskState, "_write_manifest", lambda self, manifest, **_: None)
    checkpoint(disk, store)  # in the log, synced; the manifest still says the log is empty
    disk.close()
    restored = DiskState(tmp_path / "a").restore()
    assert restored is not None and restored.checkpoints == 1
    assert contents(restored.store) == contents(store)


def test_a_generation_never_finished_gives_way_to_the_one_before(tmp_path: Path) -> None:
    store = three_checkpoints(tmp_path / "a")
    # A crash while generation 2 was written: its snapshot is there, its manifest is not.
    (tmp_path / "a" / "snapshot-2.smr").write_bytes(b"half a snapshot")
    disk = DiskState(tmp_path / "a")
    restored = disk.restore()
    assert restored is not None and restored.generation == 1
    assert contents(restored.store) == contents(store)
    # The next generation is written whole over it.
    add(restored.store, 9, 9, "z", 1)
    checkpoint(disk, restored.store, SlotRange(Slot(0), 128, 256))
    disk.close()
    again = DiskState(tmp_path / "a").restore()
    assert again is not None and again.generation == 2
    assert contents(again.store) == contents(restored.store)


def test_a_directory_written_before_manifests_restores_unchecked_then_gets_one(
    tmp_path: Path,
) -> None:
    store = StateStore()
    add(store, 1, 1, "x", 1)
    header = b'{"format": %d, "generation": 4, "incarnation": null, "keys": 1}' % LEGACY_DISK_FORMAT
    snapshot = encode_delta(store.snapshot(store.slots()))
    directory = tmp_path / "a"
    directory.mkdir()
    (directory / "snapshot-4.smr").write_bytes(
        b"".join(encode_record(part) for part in (header, pack_body(VIEW.to_wire()), snapshot))
    )
    add(store, 2, 2, "y", 1)
    delta = store.swap()
    store.merge_inactive()
    (directory / "log-4.smr").write_bytes(encode_record(encode_delta(delta)))
    disk = DiskState(directory)
    restored = disk.restore()
    assert restored is not None and (restored.generation, restored.checkpoints) == (4, 1)
    assert contents(restored.store) == contents(store)
    assert disk.unverified and disk.report()["disk_unverified"] is True
    checkpoint(disk, restored.store)  # the same range: still a new generation, with a manifest
    disk.close()
    assert not disk.unverified
    assert sorted(p.name for p in directory.iterdir()) == [
        "log-5.smr",
        "manifest-5.smr",
        "snapshot-5.smr",
    ]
    again = DiskState(directory)
    assert again.restore() is not None and not again.unverified


def test_a_fenced_generation_is_kept_whole_and_restores_the_state_it_served(
    tmp_path: Path,
) -> None:
    disk = DiskState(tmp_path / "a")
    served = StateStore()
    add(served, 1, 1, "x", 2)
    checkpoint(disk, served)
    add(served, 2, 2, "y", 1)
    checkpoint(disk, served)  # in the log of generation 1
    kept = disk.keep_fenced(1)
    assert kept == tmp_path / "a" / "fenced-1"
    assert disk.report()["disk_fenced_kept"] == ["fenced-1"]
    # Fenced, the node serves an empty store by the same range: the next checkpoint still
    # starts a new generation (the kept log is never appended to), and removes the old names.
    empty = StateStore()
    checkpoint(disk, empty)
    checkpoint(disk, empty)
    assert disk.generation == 2
    assert sorted(p.name for p in kept.iterdir()) == [
        "log-1.smr",
        "manifest-1.smr",
        "snapshot-1.smr",
    ]
    restored = DiskState(kept).restore()
    assert restored is not None and contents(restored.store) == contents(served)
    # The node's own restore finds the new generation, not the kept one.
    own = DiskState(tmp_path / "a").restore()
    assert own is not None and own.generation == 2 and own.keys == 0


def test_nothing_is_kept_before_a_generation_was_written(tmp_path: Path) -> None:
    assert DiskState(tmp_path / "a").keep_fenced(1) is None


def test_a_restore_gives_the_view_of_the_last_checkpoint_not_only_of_the_snapshot(
    tmp_path: Path,
) -> None:
    # The snapshot is written when the node's own range changes; a peer taken over since
    # (b marked dead, c on its token) shows only in the view the next checkpoints held.
    disk = DiskState(tmp_path / "a")
    store = StateStore()
    add(store, 1, 1, "x", 1)
    b = Member(NodeId("b"), 1, "tcp://b", Token(100), "", Status.UP, 1)
    c = Member(NodeId("c"), 1, "tcp://c", Token(200), "", Status.UP, 1)
    before = VIEW.with_member(b).with_member(c)
    disk.on_checkpoint(store, before, RANGE, [encode_delta(store.swap())])
    store.merge_inactive()
    after = before.with_member(replace(b, status=Status.DEAD, version=2)).with_member(
        replace(c, token=Token(100), version=2)
    )
    add(store, 1, 2, "x", 1)
    disk.on_checkpoint(store, after, RANGE, [encode_delta(store.swap())])
    store.merge_inactive()
    disk.close()
    restored = DiskState(tmp_path / "a").restore()
    assert restored is not None and restored.generation == 1 and restored.checkpoints == 1
    assert restored.view == after
    assert restored.view.members[NodeId("b")].status is Status.DEAD


def test_a_clean_stop_is_restored_as_such_and_the_next_checkpoint_clears_it(
    tmp_path: Path,
) -> None:
    three_checkpoints(tmp_path / "a")
    restored = DiskState(tmp_path / "a").restore()
    assert restored is not None and not restored.stopped  # no clean stop: a crash
    disk = DiskState(tmp_path / "a")
    restored = disk.restore()
    assert restored is not None
    disk.serving(RANGE)
    disk.mark_stopped()
    again = DiskState(tmp_path / "a").restore()
    assert again is not None and again.stopped
    assert contents(again.store) == contents(restored.store)
    # Served again after the restart, then crashed: no longer a clean stop.
    disk = DiskState(tmp_path / "a")
    store = disk.restore()
    assert store is not None
    disk.serving(RANGE)
    add(store.store, 9, 9, "k9", 9)
    checkpoint(disk, store.store)
    after = DiskState(tmp_path / "a").restore()
    assert after is not None and not after.stopped
