"""A node's state on its local disk, for restarting the whole cluster (``--data-dir``): in
``DATA_DIR/NODE_ID/``, generation ``G`` as ``snapshot-G.smr`` (the full state),
``log-G.smr`` (every checkpoint since) and ``manifest-G.smr`` (what the other two must hold,
written last). The files, the protocol in the checkpoint cycle (``smr.node.checkpoints``),
fenced generations and restore are told in docs/design/node-protocols.md#disk.

Guarantees: every checkpoint is on disk before the next is taken; a crash at any point
leaves one whole generation to restore; a file damaged, missing or holding less than its
manifest says stops the node with one line naming it: a state is never loaded in part.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, NoReturn

from smr.checkpoint.delta import DeltaError, decode_delta, encode_delta
from smr.checkpoint.manifest import (
    FileFacts,
    Manifest,
    ManifestError,
    decode_log_entry,
    encode_log_entry,
    log_shortfall,
    numbering_shortfall,
    snapshot_shortfall,
)
from smr.checkpoint.records import RecordError, decode_records, encode_record
from smr.checkpoint.store import StateStore
from smr.node.files import AppendFile, Files, LocalFiles
from smr.ring.view import View
from smr.wire.codec import pack_body, unpack_body

DISK_FORMAT: Final = 2
"""The format of the header record: 2, a generation with a manifest and numbered log
entries; a snapshot of another format is refused, but for ``LEGACY_DISK_FORMAT``."""

LEGACY_DISK_FORMAT: Final = 1
"""Before manifests: a log of bare deltas, restored unverified (module docstring)."""

LOG_BYTES_MIN: Final = 64 * 1024 * 1024
"""The log is folded into a new snapshot once it is past this and past the snapshot's size."""

_GENERATION_FILE: Final = re.compile(r"(snapshot|log|manifest)-(\d+)\.smr")
# The range written once a fenced generation was kept: equal to no range a node serves by,
# so the next checkpoint writes a new generation.
_NO_RANGE: Final = object()


class DiskError(Exception):
    """A node's state on disk cannot be restored; the message names the file and why."""


@dataclass(frozen=True)
class Restored:
    """What a restore found: the state, the view it was served by, and figures."""

    store: StateStore
    view: View
    generation: int
    checkpoints: int
    keys: int
    seconds: float
    stopped: bool
    """The node stopped cleanly after the checkpoint restored (else it crashed, or no mark)."""


@dataclass(frozen=True)
class _Generation:
    """The newest generation's files, each checked whole (steps 1 and 2 of restore)."""

    number: int
    manifest: Manifest | None
    meta: dict[str, Any]
    snapshot_data: bytes
    snapshot_records: list[bytes]
    log_data: bytes
    log_records: list[bytes]


class DiskState:
    """The state files of one node in ``directory`` (module docstring), through ``files``
    (default: the local disk; ``smr.node.files``)."""

    def __init__(
        self, directory: Path, incarnation: str | None = None, files: Files | None = None
    ) -> None:
        self.directory = directory
        self.files: Files = LocalFiles() if files is None else files
        self.incarnation = incarnation
        """The cluster life the state belongs to: a snapshot of another is refused."""
        self.generation = 0
        """The generation of the snapshot the log follows (0: none written yet)."""
        self.snapshot_bytes = 0
        self.log_bytes = 0
        self.snapshots_written = 0
        self.checkpoints_written = 0
        self.snapshot_seconds_max = 0.0
        """The longest a snapshot write held the node's loop."""
        # What the restore found (keys, seconds), for status; never the store itself, which
        # the node may replace (a fence) and this must not keep alive.
        self._restored_figures: tuple[int, float] | None = None
        self.checkpoint_number = 0
        """The number of the last checkpoint on disk (module docstring)."""
        self.manifest: Manifest | None = None
        """What the generation being written holds (None: none written by this format)."""
        self.unverified = False
        """The restored state had no manifest (format 1): it could not be checked."""
        # A write failed (the log may lack a checkpoint), or the restored generation is of
        # format 1: the next checkpoint writes a new snapshot.
        self._renew_pending = False
        self._log: AppendFile | None = None
        self._range_written: Any = None

    # -- restore ------------------------------------------------------------------------------

    def has_state(self) -> bool:
        """True when the directory holds a file of some generation (a snapshot, its log or
        its manifest): a restart restores it, or refuses to if it is not whole."""
        return bool(self._generations())

    def check(self) -> None:
        """Steps 1 and 2 of restore alone (DiskError naming the file and why), nothing loaded:
        ``smr cluster up`` asks it of every node before it starts any (no disk changes)."""
        self._whole_generation()

    def restore(self) -> Restored | None:
        """The state and view of the newest whole generation, its log replayed; None when
        the directory holds none. DiskError (nothing loaded) if a file is damaged, missing
        or shorter than its manifest says (steps in the module docstring, Restore)."""
        started = time.monotonic()
        whole = self._whole_generation()
        if whole is None:
            return None
        generation = whole.number
        # 3. The snapshot, then the log's checkpoints; the view is the newer of the
        # snapshot's and the manifest's (the view held at the last checkpoint).
        view, store = self._decode_snapshot(
            self._path("snapshot", generation), whole.snapshot_records
        )
        manifest = whole.manifest
        if manifest is not None and manifest.view:
            try:
                view = view.merge(View.from_wire(unpack_body(manifest.view)))
            except (ValueError, KeyError, TypeError) as error:
                self._refuse(self._path("manifest", generation), f"holds no view: {error}")
        checkpoints = self._replay(store, whole)
        self.generation = generation
        self.log_bytes = len(whole.log_data)
        self.snapshot_bytes = len(whole.snapshot_data)
        seconds = time.monotonic() - started
        stopped = manifest is not None and manifest.stopped
        restored = Restored(
            store, view, generation, checkpoints, store.key_count(), seconds, stopped
        )
        self._restored_figures = (restored.keys, restored.seconds)
        return restored

    def _whole_generation(self) -> _Generation | None:
        """Steps 1 and 2 of restore: the newest generation, each of its files whole and as
        its manifest describes, its snapshot of this cluster and of a format this node
        reads (else DiskError); None when the directory holds no generation."""
        generations = self._generations()
        if not generations:
            return None
        # 1. The newest generation with a manifest; a newer one without was never finished.
        finished = [generation for generation, kinds in generations.items() if "manifest" in kinds]
        generation = max(finished) if finished else max(generations)
        manifest = self._read_manifest(generation) if finished else None
        snapshot_path = self._path("snapshot", generation)
        log_path = self._path("log", generation)
        snapshot_data = self._read(snapshot_path)
        log_data = self._read(log_path) or b""
        # 2. Each file reads as whole records (else the byte where it does not is named),
        # and holds what the manifest describes.
        if snapshot_data is None:
            self._refuse(
                snapshot_path,
                f"is missing (its log {log_path.name} is there)"
                if manifest is None
                else f"is missing (its manifest describes {manifest.snapshot.length_bytes} bytes)",
            )
        snapshot_records = self._records(snapshot_path, snapshot_data, expected=3)
        log_records = self._records(log_path, log_data)
        meta = self._header(snapshot_path, snapshot_records[0])
        if manifest is None and meta["format"] != LEGACY_DISK_FORMAT:
            self._refuse(
                self._path("manifest", generation),
                f"is missing: what generation {generation} must hold is unknown",
            )
        if manifest is not None:
            if meta["format"] != DISK_FORMAT:
                self._refuse(snapshot_path, f"is of format {meta['format']}, yet has a manifest")
            self._refuse_if(snapshot_path, snapshot_shortfall(manifest.snapshot, snapshot_data))
            self._refuse_if(
                log_path,
                log_shortfall(
                    manifest, log_data if self.files.size(log_path) is not None else None
                ),
            )
        return _Generation(
            generation, manifest, meta, snapshot_data, snapshot_records, log_data, log_records
        )

    def _replay(self, store: StateStore, whole: _Generation) -> int:
        """Step 3 of restore after the snapshot: the log's checkpoints applied to
        ``store`` (checked against the generation's manifest); how many."""
        snapshot_path = self._path("snapshot", whole.number)
        log_path = self._path("log", whole.number)
        manifest, log_data = whole.manifest, whole.log_data
        if manifest is None:  # format 1 (step 2 refused a newer format without a manifest)
            self.unverified = True
            self._renew_pending = True  # written again at once, with a manifest
            return self._replay_legacy_log(store, log_path, whole.log_records)
        meta = whole.meta
        first = _count_field(meta, "checkpoint", snapshot_path) + 1
        checkpoints = self._replay_log(store, manifest, first, log_path, whole.log_records)
        self.checkpoint_number = first - 1 + checkpoints
        self.manifest = Manifest(
            whole.number,
            checkpoints,
            self.checkpoint_number,
            manifest.snapshot,
            FileFacts.of(log_data),
            manifest.view,
        )
        return checkpoints

    def _decode_snapshot(self, path: Path, records: list[bytes]) -> tuple[View, StateStore]:
        _, view_body, snapshot_body = records
        try:
            view = View.from_wire(unpack_body(view_body))
            snapshot = decode_delta(snapshot_body, max_bytes=len(snapshot_body))
        except (ValueError, KeyError, TypeError, DeltaError) as error:
            raise DiskError(f"{path}: unreadable: {error}") from error
        store = StateStore()
        store.apply_delta(snapshot)
        return view, store

    def _header(self, path: Path, header: bytes) -> dict[str, Any]:
        """The snapshot's header record (format, incarnation, checkpoint number), of a
        format this node reads and of this cluster (else DiskError)."""
        try:
            meta = json.loads(header)
        except ValueError as error:
            raise DiskError(f"{path}: unreadable: {error}") from error
        if not isinstance(meta, dict):
            raise DiskError(f"{path}: unreadable: the header is not an object: {meta!r:.80}")
        if meta.get("format") not in (DISK_FORMAT, LEGACY_DISK_FORMAT):
            raise DiskError(f"{path}: format {meta.get('format')!r}, this node reads {DISK_FORMAT}")
        if meta.get("incarnation") != self.incarnation:
            raise DiskError(
                f"{path} holds the state of another cluster (incarnation "
                f"{meta.get('incarnation')!r}, this one is {self.incarnation!r}): remove it, "
                "or point --data-dir elsewhere"
            )
        return meta

    def _replay_log(
        self, store: StateStore, manifest: Manifest, first: int, path: Path, records: list[bytes]
    ) -> int:
        """Apply the log's checkpoints to ``store``, numbered from ``first``; how many."""
        numbers = []
        for index, payload in enumerate(records):
            try:
                number, parts = decode_log_entry(payload)
                for body in parts:
                    # Checksummed, and written here: no cap beyond its own size.
                    store.apply_delta(decode_delta(body, max_bytes=len(body)))
            except (ManifestError, DeltaError) as error:
                raise DiskError(f"{path}: record {index + 1}: {error}") from error
            numbers.append(number)
        self._refuse_if(path, numbering_shortfall(manifest, first, numbers))
        return len(numbers)

    def _replay_legacy_log(self, store: StateStore, path: Path, records: list[bytes]) -> int:
        """A log of format 1 (before manifests): one delta a record; how many records."""
        for index, body in enumerate(records):
            try:
                store.apply_delta(decode_delta(body, max_bytes=len(body)))
            except DeltaError as error:
                raise DiskError(f"{path}: record {index + 1}: {error}") from error
        return len(records)

    def _read_manifest(self, generation: int) -> Manifest:
        path = self._path("manifest", generation)
        data = self._read(path)
        if data is None:
            raise DiskError(f"{self.directory.name}: {path}: gone while reading it")
        (payload,) = self._records(path, data, expected=1)
        try:
            manifest = Manifest.decode(payload)
        except ManifestError as error:
            raise DiskError(f"{path}: unreadable: {error}") from error
        if manifest.generation != generation:
            raise DiskError(f"{path}: describes generation {manifest.generation}")
        return manifest

    def _refuse_if(self, path: Path, shortfall: str | None) -> None:
        if shortfall is not None:
            self._refuse(path, shortfall)

    def _refuse(self, path: Path, shortfall: str) -> NoReturn:
        raise DiskError(f"{self.directory.name}: {path} {shortfall}; refusing to restore in part")

    def serving(self, own_range: Any) -> None:
        """The restored state is served with ``own_range``: checkpoints go on in the log
        (the snapshot need not be written again) until the range changes."""
        self._range_written = own_range

    def report(self) -> dict[str, Any]:
        """For ``status``: where the state goes, how big it is, what the restore found."""
        restored = self._restored_figures
        return {
            "disk_dir": str(self.directory),
            "disk_generation": self.generation,
            "disk_snapshot_bytes": self.snapshot_bytes,
            "disk_log_bytes": self.log_bytes,
            "disk_snapshots_written": self.snapshots_written,
            "disk_checkpoints_written": self.checkpoints_written,
            "disk_snapshot_s_max": self.snapshot_seconds_max,
            "disk_checkpoint": self.checkpoint_number,
            "disk_unverified": self.unverified,
            "restored_keys": None if restored is None else restored[0],
            "restore_s": None if restored is None else restored[1],
            # Generations kept when this node was fenced (keep_fenced), never deleted.
            "disk_fenced_kept": sorted(
                path.name for path in self.directory.glob("fenced-*") if path.is_dir()
            ),
        }

    def _generations(self) -> dict[int, set[str]]:
        """The generations the directory holds files of, and which files."""
        found: dict[int, set[str]] = {}
        for name in self.files.names(self.directory):
            if match := _GENERATION_FILE.fullmatch(name):
                found.setdefault(int(match.group(2)), set()).add(match.group(1))
        return found

    def _path(self, kind: str, generation: int) -> Path:
        return self.directory / f"{kind}-{generation}.smr"

    def _read(self, path: Path) -> bytes | None:
        """The file's bytes; None when it does not exist."""
        try:
            return self.files.read_bytes(path)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise DiskError(f"{path}: {error.strerror}") from error

    def _records(self, path: Path, data: bytes, expected: int | None = None) -> list[bytes]:
        try:
            records = decode_records(data)
        except RecordError as error:
            self._refuse(path, f"is damaged {error}")
        if expected is not None and len(records) != expected:
            self._refuse(path, f"holds {len(records)} records, not {expected}")
        return records

    # -- write ----------------------------------------------------------------------------------

    def on_checkpoint(
        self, store: StateStore, view: View, own_range: Any, bodies: Sequence[bytes]
    ) -> None:
        """Step 1 or 2 of the protocol for one checkpoint (``bodies``: its encoded parts,
        one log entry, written and synced together), after the store merged it. An OSError
        (a full disk) propagates, and the checkpoint after it writes a whole new snapshot: a
        log with a checkpoint missing is never appended to, since replaying it would lose
        that checkpoint's changes in silence."""
        grown = self.log_bytes > max(LOG_BYTES_MIN, self.snapshot_bytes)
        renew = self.generation == 0 or own_range != self._range_written or grown
        try:
            if renew or self._renew_pending or self.manifest is None:
                self.checkpoint_number += 1
                self.write_snapshot(store, view, own_range)
                self._renew_pending = False
                return
            # 2.
            number = self.checkpoint_number + 1
            record = encode_record(encode_log_entry(number, bodies))
            log = self._open_log()
            log.write(record)
            log.sync()
            self.checkpoint_number = number
            self.log_bytes += len(record)
            self.checkpoints_written += 1
            self.manifest = self.manifest.with_checkpoint(record, number, _packed(view))
            # No directory sync: if the rename is lost in a crash, the manifest before it
            # describes a prefix of this log, which restores as well.
            self._write_manifest(self.manifest, sync_directory=False)
        except OSError:
            self._renew_pending = True
            raise

    def write_snapshot(self, store: StateStore, view: View, own_range: Any) -> None:
        """Step 1: generation ``G + 1`` of the whole store, an empty log after it, then its
        manifest; then generation ``G``'s files go."""
        started = time.monotonic()
        self.files.make_dir(self.directory)
        generation = self.generation + 1
        header = json.dumps(
            {
                "format": DISK_FORMAT,
                "generation": generation,
                "incarnation": self.incarnation,
                "keys": store.key_count(),
                "checkpoint": self.checkpoint_number,
            }
        ).encode()
        snapshot = encode_delta(store.snapshot(store.slots()))
        data = b"".join(
            encode_record(part) for part in (header, pack_body(view.to_wire()), snapshot)
        )
        self._write_whole(self._path("snapshot", generation), data)
        self.files.write_synced(self._path("log", generation), b"")
        self.files.sync_dir(self.directory)
        facts = FileFacts.of(data), FileFacts.of(b"")
        manifest = Manifest(generation, 0, self.checkpoint_number, *facts, _packed(view))
        self._write_manifest(manifest)
        self.close()
        self.manifest = manifest
        self.generation = generation
        self.unverified = False
        self.snapshot_bytes = len(data)
        self.log_bytes = 0
        self.snapshots_written += 1
        self._range_written = own_range
        for older, kinds in self._generations().items():
            for kind in kinds if older < generation else ():
                self.files.unlink(self._path(kind, older))
        self.snapshot_seconds_max = max(self.snapshot_seconds_max, time.monotonic() - started)

    def _write_manifest(self, manifest: Manifest, sync_directory: bool = True) -> None:
        """The manifest, written whole (after the files it describes are on disk)."""
        self._write_whole(
            self._path("manifest", manifest.generation), encode_record(manifest.encode())
        )
        if sync_directory:
            self.files.sync_dir(self.directory)

    def _write_whole(self, path: Path, data: bytes) -> None:
        """``data`` as ``path``, whole or not at all: a temporary file, synced, renamed (the
        caller syncs the directory)."""
        temporary = path.with_suffix(".tmp")
        self.files.write_synced(temporary, data)
        self.files.replace(temporary, path)

    def mark_stopped(self) -> None:
        """The node stops cleanly after its last checkpoint: its manifest says so (the next
        checkpoint's clears it): no taker served past it (``smr.node.restart``)."""
        if self.manifest is not None:
            self._write_manifest(replace(self.manifest, stopped=True))

    def keep_fenced(self, incarnation: int) -> Path | None:
        """The node was fenced as ``incarnation``: keep the files of the generation it
        served, as hard links (no copy, no window without them) in ``fenced-INCARNATION/``,
        and make the next checkpoint start a new generation, so that the kept log is never
        appended to. The directory kept, or None if no generation was written."""
        if self.generation == 0:
            return None
        self.close()
        kept = self.directory / f"fenced-{incarnation}"
        self.files.make_dir(kept)
        suffix = f"-{self.generation}.smr"
        for name in self.files.names(self.directory):
            if name.endswith(suffix):
                self.files.link(self.directory / name, kept / name)
        self.files.sync_dir(kept)
        self.files.sync_dir(self.directory)
        self._range_written = _NO_RANGE
        return kept

    def close(self) -> None:
        """Close the log (every record written is already on disk)."""
        if self._log is not None:
            self._log.close()
            self._log = None

    def _open_log(self) -> AppendFile:
        if self._log is None:
            self._log = self.files.append(self.directory / f"log-{self.generation}.smr")
        return self._log


def _packed(view: View) -> bytes:
    """``view`` as a manifest records it (a few dozen bytes a member)."""
    return pack_body(view.to_wire())


def _count_field(meta: dict[str, Any], name: str, path: Path) -> int:
    value = meta.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DiskError(f"{path}: unreadable: its header's {name} is {value!r}")
    return value
