"""The simulated disk: :class:`SimFiles`, one node's disk in memory, a twin of
:class:`smr.node.files.LocalFiles` that keeps, per file, the bytes written apart from the
bytes synced (a crash keeps only what was synced), and the disk faults a whole-cluster
restart plays on it (:func:`apply_fault`; the restart is :mod:`smr.sim.restart`,
docs/design/simulation.md#disk).

Guarantee: a crash keeps exactly what was synced; a fault damages only the newest files of
the disk it is given.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from smr.checkpoint.records import RecordError, decode_records, encode_record
from smr.node.disk import DiskState
from smr.node.files import AppendFile
from smr.ring.ids import NodeId

log = logging.getLogger("smr.sim")

DISK_FAULTS: Final = ("none", "crash", "lost-tail", "lost-file", "torn-write")
# The faults the state files cannot tell from a whole generation (none: each generation has
# a manifest, which a restore checks).
SILENT_TODAY: Final = frozenset[str]()
DATA_DIR: Final = Path("/sim-data")
INCARNATION: Final = "sim"


@dataclass
class SimFile:
    """One file: the bytes written, and the prefix of them a crash keeps."""

    data: bytearray
    synced: bytes


class _SimAppend:
    def __init__(self, file: SimFile) -> None:
        self._file = file

    def write(self, data: bytes) -> None:
        self._file.data += data

    def sync(self) -> None:
        self._file.synced = bytes(self._file.data)

    def close(self) -> None:
        """Nothing to release."""


class SimFiles:
    """One node's disk in memory (:class:`smr.node.files.Files`): written apart from synced."""

    def __init__(self) -> None:
        self.files: dict[Path, SimFile] = {}

    def names(self, directory: Path) -> list[str]:
        return sorted(path.name for path in self.files if path.parent == directory)

    def read_bytes(self, path: Path) -> bytes:
        found = self.files.get(path)
        if found is None:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return bytes(found.data)

    def size(self, path: Path) -> int | None:
        found = self.files.get(path)
        return None if found is None else len(found.data)

    def make_dir(self, directory: Path) -> None:
        """Directories are implied by the files' paths."""

    def write_synced(self, path: Path, data: bytes) -> None:
        self.files[path] = SimFile(bytearray(data), bytes(data))

    def replace(self, source: Path, target: Path) -> None:
        self.files[target] = self.files.pop(source)

    def append(self, path: Path) -> AppendFile:
        found = self.files.get(path)
        if found is None:
            found = self.files[path] = SimFile(bytearray(), b"")
        return _SimAppend(found)

    def unlink(self, path: Path) -> None:
        self.files.pop(path, None)

    def sync_dir(self, directory: Path) -> None:
        """Names are durable at once."""

    def link(self, source: Path, target: Path) -> None:
        """The same file under a second name."""
        self.files.setdefault(target, self.files[source])

    def crash(self) -> None:
        """What a power cut leaves: each file's synced bytes."""
        for file in self.files.values():
            file.data = bytearray(file.synced)

    def damage(self, path: Path, data: bytes) -> None:
        """Replace a file's bytes, synced ones too (a fault of the disk itself)."""
        self.files[path] = SimFile(bytearray(data), bytes(data))


def disk_of(node: NodeId, files: SimFiles) -> DiskState:
    """The state files of ``node`` on its simulated disk."""
    return DiskState(DATA_DIR / node, INCARNATION, files)


def _newest(files: SimFiles, node: NodeId) -> tuple[Path, Path] | None:
    """The node's newest snapshot and its log."""
    snapshots = [n for n in files.names(DATA_DIR / node) if n.startswith("snapshot-")]
    if not snapshots:
        return None
    newest = max(snapshots, key=lambda name: int(name.split("-")[1].split(".")[0]))
    generation = newest.split("-")[1].split(".")[0]
    return DATA_DIR / node / newest, DATA_DIR / node / f"log-{generation}.smr"


def apply_fault(rng: random.Random, fault: str, node: NodeId, files: SimFiles) -> str:
    """Step 2 of docs/design/simulation.md#disk on ``node``'s disk, its choices drawn from
    ``rng``; what was done, in words."""
    newest = _newest(files, node)
    if newest is None or fault in ("none", "crash"):
        return f"{fault} on {node}" + ("" if newest else " (no state files)")
    snapshot, log_path = newest
    log_bytes = files.read_bytes(log_path) if files.size(log_path) is not None else b""
    try:
        records = decode_records(log_bytes)
    except RecordError:
        records = []
    if fault == "lost-tail":
        if not records:
            return f"lost-tail on {node}: its log is empty, nothing lost"
        keep = rng.randrange(len(records))
        files.damage(log_path, b"".join(encode_record(r) for r in records[:keep]))
        return f"lost-tail on {node}: {log_path.name} keeps {keep} of {len(records)} records"
    if fault == "lost-file":
        lost = log_path if records and rng.random() < 0.5 else snapshot
        files.unlink(lost)
        return f"lost-file on {node}: {lost.name} removed"
    # torn-write: the newest file with a record.
    target = log_path if records else snapshot
    data = files.read_bytes(target)
    last = len(encode_record(records[-1])) if records else len(data)
    start = len(data) - last
    if rng.random() < 0.5:
        cut = start + rng.randrange(1, last)
        files.damage(target, data[:cut])
        return f"torn-write on {node}: {target.name} cut to {cut} of {len(data)} bytes"
    at = start + rng.randrange(last)
    flipped = bytearray(data)
    flipped[at] ^= 1 << rng.randrange(8)
    files.damage(target, bytes(flipped))
    return f"torn-write on {node}: {target.name} byte {at} of {len(data)} flipped"
