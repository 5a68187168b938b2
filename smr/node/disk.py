"""A node's state on its local disk, for restarting the whole cluster (``--data-dir``).

A node writes, in ``DATA_DIR/NODE_ID/``:

- ``snapshot-G.smr``: generation ``G`` of its full state, three checksummed records
  (``checkpoint.records``): a header (JSON: format, generation, node, keys), the view it
  served by (the ranges), and the state itself as a snapshot delta (fields, hwms, retired
  mappers; ``checkpoint.delta``);
- ``log-G.smr``: every checkpoint taken since that snapshot, one record each, the same bytes
  a checkpoint ships to the secondaries.

Protocol, in the node's checkpoint cycle (``smr.node.replication``), after the merge:

1. If this node's range changed since the snapshot (a takeover, a move, a join, a fence:
   those bring or take whole slots, which no checkpoint carries), or the log has grown past
   the snapshot's size and ``LOG_BYTES_MIN``, write generation ``G + 1``: to a temporary
   file, fsync, rename, fsync the directory; start ``log-(G+1)`` empty; remove generation
   ``G``'s files. A crash at any point leaves one whole generation to restore.
2. Otherwise append the checkpoint to ``log-G`` and fsync.

So the fsync policy is: every checkpoint (once per checkpoint interval, 1 s by default) is on
disk before the next one is taken. ``smr cluster down`` stops nodes with SIGTERM, and a node
takes one last checkpoint before it exits: every tuple it acked is then on disk. A node that
crashes loses what it applied since its last checkpoint, which a mapper that resends (a rerun
of the same feed) delivers again: the hwms on disk are those of the state on disk.

Restore (``DiskState.restore``) reads the newest generation and replays its log. A file that
is damaged (cut short, or a checksum that does not match) stops the node with one line naming
the file and the byte: it is never loaded in part.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from smr.checkpoint.delta import DeltaError, decode_delta, encode_delta
from smr.checkpoint.records import RecordError, decode_records, encode_record
from smr.checkpoint.store import StateStore
from smr.protocol import pack_body, unpack_body
from smr.ring.view import View

DISK_FORMAT: Final = 1
"""The format of the header record; a snapshot of another format is refused."""

LOG_BYTES_MIN: Final = 64 * 1024 * 1024
"""The log is folded into a new snapshot once it is past this and past the snapshot's size."""

_SNAPSHOT: Final = re.compile(r"snapshot-(\d+)\.smr")


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


class DiskState:
    """The state files of one node in ``directory`` (module docstring)."""

    def __init__(self, directory: Path, incarnation: str | None = None) -> None:
        self.directory = directory
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
        # A write failed: the log may lack a checkpoint, so the next one is a new snapshot.
        self._log_broken = False
        self._log: BinaryIO | None = None
        self._range_written: Any = None

    # -- restore ------------------------------------------------------------------------------

    def has_state(self) -> bool:
        """True when the directory holds a snapshot to restore."""
        return self._newest() is not None

    def restore(self) -> Restored | None:
        """The state and view of the newest snapshot with its log replayed; None when there
        is no snapshot. DiskError (nothing loaded) if a file is damaged or unreadable."""
        started = time.monotonic()
        newest = self._newest()
        if newest is None:
            return None
        generation, path = newest
        header, view_body, snapshot_body = self._records(path, expected=3)
        try:
            meta = json.loads(header)
            if not isinstance(meta, dict):
                raise ValueError(f"the header is not an object: {meta!r:.80}")
            view = View.from_wire(unpack_body(view_body))
            snapshot = decode_delta(snapshot_body, max_bytes=len(snapshot_body))
        except (ValueError, KeyError, TypeError, DeltaError) as error:
            raise DiskError(f"{path}: unreadable: {error}") from error
        if meta.get("format") != DISK_FORMAT:
            raise DiskError(f"{path}: format {meta.get('format')!r}, this node reads {DISK_FORMAT}")
        if meta.get("incarnation") != self.incarnation:
            raise DiskError(
                f"{path} holds the state of another cluster (incarnation "
                f"{meta.get('incarnation')!r}, this one is {self.incarnation!r}): remove it, "
                "or point --data-dir elsewhere"
            )
        store = StateStore()
        store.apply_delta(snapshot)
        log_path = self.directory / f"log-{generation}.smr"
        checkpoints = 0
        if log_path.exists():
            for index, body in enumerate(self._records(log_path)):
                try:
                    # Checksummed, and written here: no cap beyond its own size.
                    store.apply_delta(decode_delta(body, max_bytes=len(body)))
                except DeltaError as error:
                    raise DiskError(f"{log_path}: record {index + 1}: {error}") from error
                checkpoints += 1
        self.generation = generation
        self.log_bytes = log_path.stat().st_size if log_path.exists() else 0
        self.snapshot_bytes = path.stat().st_size
        restored = Restored(
            store, view, generation, checkpoints, store.key_count(), time.monotonic() - started
        )
        self._restored_figures = (restored.keys, restored.seconds)
        return restored

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
            "restored_keys": None if restored is None else restored[0],
            "restore_s": None if restored is None else restored[1],
        }

    def _newest(self) -> tuple[int, Path] | None:
        if not self.directory.is_dir():
            return None
        found = [
            (int(match.group(1)), path)
            for path in self.directory.iterdir()
            if (match := _SNAPSHOT.fullmatch(path.name))
        ]
        return max(found) if found else None

    def _records(self, path: Path, expected: int | None = None) -> list[bytes]:
        try:
            records = decode_records(path.read_bytes())
        except RecordError as error:
            raise DiskError(f"{path} is damaged {error}; move it aside to start empty") from error
        except OSError as error:
            raise DiskError(f"{path}: {error.strerror}") from error
        if expected is not None and len(records) != expected:
            raise DiskError(f"{path}: {len(records)} records, a snapshot has {expected}")
        return records

    # -- write ----------------------------------------------------------------------------------

    def on_checkpoint(
        self, store: StateStore, view: View, own_range: Any, bodies: Sequence[bytes]
    ) -> None:
        """Step 1 or 2 of the protocol for one checkpoint (``bodies``: its encoded parts, a
        record each, written and synced together), after the store merged it. An OSError
        (a full disk) propagates, and the checkpoint after it writes a whole new snapshot: a
        log with a checkpoint missing is never appended to, since replaying it would lose
        that checkpoint's changes in silence."""
        grown = self.log_bytes > max(LOG_BYTES_MIN, self.snapshot_bytes)
        renew = self.generation == 0 or own_range != self._range_written or grown
        try:
            if renew or self._log_broken:
                self.write_snapshot(store, view, own_range)
                self._log_broken = False
                return
            record = b"".join(encode_record(body) for body in bodies)
            log = self._open_log()
            log.write(record)
            log.flush()
            os.fsync(log.fileno())
        except OSError:
            self._log_broken = True
            raise
        self.log_bytes += len(record)
        self.checkpoints_written += 1

    def write_snapshot(self, store: StateStore, view: View, own_range: Any) -> None:
        """Step 1: generation ``G + 1`` of the whole store, then an empty log after it."""
        started = time.monotonic()
        self.directory.mkdir(parents=True, exist_ok=True)
        generation = self.generation + 1
        header = json.dumps(
            {
                "format": DISK_FORMAT,
                "generation": generation,
                "incarnation": self.incarnation,
                "keys": store.key_count(),
            }
        ).encode()
        snapshot = encode_delta(store.snapshot(store.slots()))
        data = b"".join(
            encode_record(part) for part in (header, pack_body(view.to_wire()), snapshot)
        )
        path = self.directory / f"snapshot-{generation}.smr"
        temporary = path.with_suffix(".tmp")
        with open(temporary, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        log_path = self.directory / f"log-{generation}.smr"
        with open(log_path, "wb") as log:
            os.fsync(log.fileno())
        self._fsync_directory()
        old = self.generation
        self.close()
        self.generation = generation
        self.snapshot_bytes = len(data)
        self.log_bytes = 0
        self.snapshots_written += 1
        self._range_written = own_range
        for name in (f"snapshot-{old}.smr", f"log-{old}.smr"):
            with contextlib.suppress(FileNotFoundError):
                (self.directory / name).unlink()
        self.snapshot_seconds_max = max(self.snapshot_seconds_max, time.monotonic() - started)

    def close(self) -> None:
        """Close the log (every record written is already on disk)."""
        if self._log is not None:
            self._log.close()
            self._log = None

    def _open_log(self) -> BinaryIO:
        if self._log is None:
            self._log = open(self.directory / f"log-{self.generation}.smr", "ab")  # noqa: SIM115
        return self._log

    def _fsync_directory(self) -> None:
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
