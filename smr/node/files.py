"""The file operations a node's state files need (``smr.node.disk``), behind one small
interface: :class:`LocalFiles` does them on the local disk; the simulation has a twin that
keeps what was written apart from what was synced (``smr.sim.disk``).

Guarantee of every implementation: ``write_synced`` and an ``AppendFile``'s ``sync`` return
only once the bytes would survive a crash; ``replace`` is atomic (the target holds the old
bytes or the new ones, never a mix); ``sync_dir`` makes the names in a directory durable.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO, Protocol


class AppendFile(Protocol):
    """A file open for appending (a log)."""

    def write(self, data: bytes) -> None:
        """Append ``data`` (not yet durable)."""

    def sync(self) -> None:
        """Make every byte written so far durable."""

    def close(self) -> None:
        """Close (what was synced stays)."""


class Files(Protocol):
    """The file operations of ``smr.node.disk``."""

    def names(self, directory: Path) -> list[str]:
        """The names of the files in ``directory`` ([] when it does not exist)."""

    def read_bytes(self, path: Path) -> bytes:
        """The whole file; OSError if it cannot be read."""

    def size(self, path: Path) -> int | None:
        """The file's size in bytes, None when it does not exist."""

    def make_dir(self, directory: Path) -> None:
        """Create ``directory`` and its parents, if missing."""

    def write_synced(self, path: Path, data: bytes) -> None:
        """Create or truncate ``path``, write ``data`` and make it durable."""

    def replace(self, source: Path, target: Path) -> None:
        """Rename ``source`` to ``target`` atomically, replacing it."""

    def append(self, path: Path) -> AppendFile:
        """Open ``path`` for appending (created if missing)."""

    def unlink(self, path: Path) -> None:
        """Remove ``path``; nothing if it does not exist."""

    def sync_dir(self, directory: Path) -> None:
        """Make the names in ``directory`` durable."""

    def link(self, source: Path, target: Path) -> None:
        """Give ``source`` a second name ``target`` (a hard link: no copy); nothing if
        ``target`` exists."""


class _LocalAppend:
    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    def write(self, data: bytes) -> None:
        self._file.write(data)

    def sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


class LocalFiles:
    """:class:`Files` on the local disk (``os``, with ``fsync`` where it says durable)."""

    def names(self, directory: Path) -> list[str]:
        if not directory.is_dir():
            return []
        return [path.name for path in directory.iterdir()]

    def read_bytes(self, path: Path) -> bytes:
        return path.read_bytes()

    def size(self, path: Path) -> int | None:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return None

    def make_dir(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)

    def write_synced(self, path: Path, data: bytes) -> None:
        with open(path, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())

    def replace(self, source: Path, target: Path) -> None:
        os.replace(source, target)

    def append(self, path: Path) -> AppendFile:
        # Kept open: the log is appended to at every checkpoint.
        return _LocalAppend(open(path, "ab"))

    def unlink(self, path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    def sync_dir(self, directory: Path) -> None:
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def link(self, source: Path, target: Path) -> None:
        with contextlib.suppress(FileExistsError):
            os.link(source, target)
