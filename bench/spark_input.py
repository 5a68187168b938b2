"""What the Spark baselines read and what they leave on disk: the input text files, published
whole (at once, or by a ``Dripper`` at a words/s rate), plain Python's counts of them, and the
query's checkpoint read as a record of its micro-batches (``CheckpointLog``).

Every file is written under a hidden name (``.x.tmp``, which the file source ignores) and
renamed into place, so Spark never sees half a file. Every latency and recovery figure comes
from the checkpoint's file mtimes (``offsets/<batch>``, ``commits/<batch>``), never from a poll.
"""

from __future__ import annotations

import bisect
import collections
import gzip
import json
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import REPO, SHARED_TEXT, WORD

# How often the harness looks at the checkpoint. Figures come from file mtimes, so this only
# bounds how late the harness notices a commit, not the precision of a figure.
POLL_S = 0.05
# A bound on waits for a batch to commit; past it the run fails with an error that says what
# it waited for, instead of hanging.
BATCH_TIMEOUT_S = 300.0

__all__ = [
    "BATCH_TIMEOUT_S",
    "POLL_S",
    "Batch",
    "CheckpointLog",
    "Dripper",
    "book_lines",
    "book_paths",
    "directory_counts",
    "drip_files",
    "publish",
    "python_counts",
    "raw_lines",
    "split_lines",
    "synthetic_lines",
    "visible_files",
    "write_input_files",
]


# -- input files -----------------------------------------------------------------------------


def book_paths() -> list[Path]:
    """The shared books when present, else the two shipped ones (as ``book_words`` does)."""
    return sorted(SHARED_TEXT.glob("pg*.txt")) or sorted((REPO / "examples" / "data").glob("*.gz"))


def raw_lines(path: Path) -> Generator[str, None, None]:
    """A book's lines as they are on disk: BOM and CRLF endings kept (``newline=""``),
    undecodable bytes replaced as ``book_words`` replaces them."""
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as text:
        yield from text


def book_lines(words_n: int, paths: Sequence[Path] | None = None) -> list[str]:
    """Lines of the books, in order and wrapping around, until they hold at least ``words_n``
    words; every line ends with a line break (so files can be concatenated safely)."""
    paths = list(paths) if paths is not None else book_paths()
    lines: list[str] = []
    words = 0
    while words < words_n:
        before = words
        for path in paths:
            for line in raw_lines(path):
                lines.append(line if line.endswith(("\n", "\r")) else line + "\n")
                words += len(WORD.findall(line.lower()))
                if words >= words_n:
                    return lines
        if words == before:
            raise RuntimeError(f"no words in the books {[str(p) for p in paths]}")
    return lines


def synthetic_lines(keys_n: int, words_per_line: int = 10, prefix: str = "k") -> list[str]:
    """``keys_n`` distinct keys (``k0000000``, ...), each once, ``words_per_line`` to a line:
    a state of exactly ``keys_n`` keys for the recovery benchmark."""
    width = max(7, len(str(keys_n - 1)))
    keys = [f"{prefix}{i:0{width}d}" for i in range(keys_n)]
    return [" ".join(keys[i : i + words_per_line]) + "\n" for i in range(0, keys_n, words_per_line)]


def python_counts(lines: Iterable[str]) -> collections.Counter[str]:
    """Plain Python's word count: ``WORD.findall(line.lower())`` over every line."""
    counts: collections.Counter[str] = collections.Counter()
    for line in lines:
        counts.update(WORD.findall(line.lower()))
    return counts


def directory_counts(directory: Path, names: Iterable[str] | None = None) -> dict[str, int]:
    """Plain Python's word count of the visible files of ``directory`` (or only ``names``),
    decoded as the books are."""
    counts: collections.Counter[str] = collections.Counter()
    chosen = sorted(names) if names is not None else visible_files(directory)
    for name in chosen:
        with open(directory / name, encoding="utf-8", errors="replace") as text:
            counts.update(python_counts(text))
    return dict(counts)


def visible_files(directory: Path) -> list[str]:
    """The files the file source sees: not hidden (``.``) nor private (``_``)."""
    return sorted(
        entry.name
        for entry in os.scandir(directory)
        if entry.is_file() and not entry.name.startswith((".", "_"))
    )


def publish(directory: Path, name: str, lines: Sequence[str], mtime_ns: int | None = None) -> None:
    """Write ``lines`` to ``directory/name`` atomically: a hidden temporary file renamed
    into place, so the file source never lists a partial file."""
    temporary = directory / f".{name}.tmp"
    with open(temporary, "w", encoding="utf-8", newline="") as out:
        out.writelines(lines)
    if mtime_ns is not None:
        os.utime(temporary, ns=(mtime_ns, mtime_ns))
    os.rename(temporary, directory / name)


def split_lines(lines: Sequence[str], words_per_file: int) -> list[list[str]]:
    """Consecutive groups of lines holding ``words_per_file`` words each (the last group
    what is left); a line is never split."""
    if words_per_file < 1:
        raise ValueError(f"words_per_file must be >= 1, got {words_per_file}")
    groups: list[list[str]] = []
    group: list[str] = []
    words = 0
    for line in lines:
        group.append(line)
        words += len(WORD.findall(line.lower()))
        if words >= words_per_file:
            groups.append(group)
            group, words = [], 0
    if group:
        groups.append(group)
    return groups


def write_input_files(
    lines: Sequence[str], directory: Path, files_n: int, prefix: str = "part-"
) -> dict[str, Any]:
    """Split ``lines`` into ``files_n`` numbered files of about equal word counts in
    ``directory`` (created if needed): ``part-000000.txt``, ... Each file is published
    atomically and its modification time is 1 ms after the previous one, so a file source
    with ``maxFilesPerTrigger`` takes them in number order. Returns the files' names, words
    and lines, and the totals."""
    if files_n < 1:
        raise ValueError(f"files_n must be >= 1, got {files_n}")
    directory.mkdir(parents=True, exist_ok=True)
    words_per_line = [len(WORD.findall(line.lower())) for line in lines]
    total = sum(words_per_line)
    files: list[dict[str, Any]] = []
    start = 0
    done_words = 0
    base_ns = time.time_ns() - files_n * 1_000_000
    for index in range(files_n):
        target = total * (index + 1) / files_n
        end = start
        words = 0
        while end < len(lines) and (done_words + words < target or index == files_n - 1):
            words += words_per_line[end]
            end += 1
        name = f"{prefix}{index:06d}.txt"
        publish(directory, name, lines[start:end], mtime_ns=base_ns + index * 1_000_000)
        files.append({"name": name, "words": words, "lines": end - start})
        done_words += words
        start = end
    return {
        "directory": str(directory),
        "files_n": files_n,
        "words": total,
        "lines": len(lines),
        "files": files,
    }


class Dripper:
    """Publishes files into a directory at ``words_per_s``, in a thread: file ``i`` appears
    when the words of files ``0..i`` are due (``start + words_so_far / words_per_s``), like a
    log rolled whenever it holds a file's worth. Each file is renamed into place atomically;
    ``published`` records its name, words and publication time (``time.time()`` right after
    the rename). Stops after the last file or at ``stop()``; behind schedule, it publishes
    the files that are due at once (an open-loop source)."""

    def __init__(
        self,
        files: Sequence[Sequence[str]],
        directory: Path,
        words_per_s: float,
        prefix: str = "drip-",
    ) -> None:
        if words_per_s <= 0:
            raise ValueError(f"words_per_s must be > 0, got {words_per_s}")
        self.files = files
        self.directory = directory
        self.words_per_s = words_per_s
        self.prefix = prefix
        self.published: list[dict[str, Any]] = []
        self.started_at_unix_s: float | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dripper", daemon=True)

    def start(self) -> Dripper:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the last file; True if the dripper is done."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            start = time.time()
            self.started_at_unix_s = start
            words_due = 0
            for index, lines in enumerate(self.files):
                words = sum(len(WORD.findall(line.lower())) for line in lines)
                words_due += words
                delay = start + words_due / self.words_per_s - time.time()
                if delay > 0 and self._stop.wait(delay):
                    return
                if self._stop.is_set():
                    return
                name = f"{self.prefix}{index:06d}.txt"
                publish(self.directory, name, lines)
                self.published.append(
                    {"name": name, "words": words, "published_at_unix_s": time.time()}
                )
        except BaseException as error:  # reported by whoever reads the records
            self.error = error


def drip_files(
    files: Sequence[Sequence[str]], directory: Path, words_per_s: float, prefix: str = "drip-"
) -> list[dict[str, Any]]:
    """Publish ``files`` into ``directory`` at ``words_per_s`` (see ``Dripper``), blocking
    until the last one; returns each file's name, words and publication time."""
    dripper = Dripper(files, directory, words_per_s, prefix).start()
    dripper.join()
    if dripper.error is not None:
        raise dripper.error
    return dripper.published


# -- the checkpoint as a record of the batches -----------------------------------------------


@dataclass
class Batch:
    """One micro-batch as the checkpoint records it."""

    batch_id: int
    files: list[str]
    planned_at_unix_s: float | None  # offsets/<batch> written (the batch's input is fixed)
    committed_at_unix_s: float | None  # commits/<batch> written


class CheckpointLog:
    """Reads a query's checkpoint: which files each batch took, when it was planned and when
    it committed (the mtimes of ``offsets/<batch>`` and ``commits/<batch>``, which Spark writes
    to a temporary file and renames).

    The file source numbers its own log (``sources/0``, with the ``.compact`` files it rolls
    up every 10 entries) apart from the query's batches: it writes an entry when it lists new
    files, before the query writes ``offsets/<batch>``. A driver killed between the two
    leaves an entry no batch planned, and after a restart the source's numbers run ahead of
    the batches'. So a file belongs to the first batch whose planned ``logOffset`` (the
    offset's line in ``offsets/<batch>``) reaches its entry; an entry past every planned
    offset belongs to no batch yet. Source log and offset files never change once written, so
    each is parsed once."""

    def __init__(self, checkpoint_dir: Path) -> None:
        self.checkpoint_dir = checkpoint_dir
        self._parsed: dict[str, list[tuple[str, int]]] = {}
        self._log_offsets: dict[int, int | None] = {}

    def _mtimes(self, sub: str) -> dict[int, float]:
        directory = self.checkpoint_dir / sub
        if not directory.is_dir():
            return {}
        return {
            int(entry.name): entry.stat().st_mtime
            for entry in os.scandir(directory)
            if entry.name.isdigit()
        }

    def committed(self) -> dict[int, float]:
        """Commit time of every committed batch."""
        return self._mtimes("commits")

    def batches(self) -> dict[int, Batch]:
        """Every batch the checkpoint knows of, by id."""
        planned = self._mtimes("offsets")
        for batch_id in planned:
            if batch_id not in self._log_offsets:
                self._log_offsets[batch_id] = _parse_log_offset(
                    self.checkpoint_dir / "offsets" / str(batch_id)
                )
        # (log offset, batch) of every planned batch, in batch order; offsets never go back
        reaches = [
            (offset, batch_id)
            for batch_id, offset in sorted(self._log_offsets.items())
            if offset is not None
        ]
        files: dict[int, set[str]] = collections.defaultdict(set)
        log_dir = self.checkpoint_dir / "sources" / "0"
        if log_dir.is_dir():
            for entry in os.scandir(log_dir):
                if entry.name.startswith("."):
                    continue
                if entry.name not in self._parsed:
                    self._parsed[entry.name] = _parse_source_log(Path(entry.path))
                for name, log_id in self._parsed[entry.name]:
                    at = bisect.bisect_left(reaches, (log_id, -1))
                    if at < len(reaches):
                        files[reaches[at][1]].add(name)
        committed = self.committed()
        return {
            batch_id: Batch(
                batch_id,
                sorted(files.get(batch_id, ())),
                planned.get(batch_id),
                committed.get(batch_id),
            )
            for batch_id in sorted(set(files) | set(planned) | set(committed))
        }

    def file_commits(self) -> dict[str, tuple[int, float | None]]:
        """Each file the source took: its batch and that batch's commit time (None if not yet
        committed)."""
        return {
            name: (batch.batch_id, batch.committed_at_unix_s)
            for batch in self.batches().values()
            for name in batch.files
        }

    def wait_committed(
        self,
        names: Iterable[str],
        timeout_s: float,
        what: str,
        check: Callable[[], None] | None = None,
    ) -> None:
        """Wait until every file of ``names`` is in a committed batch; TimeoutError naming
        the missing ones otherwise. ``check`` (say, that the driver still runs) is called on
        every poll and ends the wait with its error."""
        wanted = set(names)
        deadline = time.monotonic() + timeout_s
        while True:
            done = {n for n, (_, at) in self.file_commits().items() if at is not None}
            if wanted <= done:
                return
            if check is not None:
                check()
            if time.monotonic() > deadline:
                missing = sorted(wanted - done)
                raise TimeoutError(
                    f"{what}: {len(missing)} of {len(wanted)} files not committed after "
                    f"{timeout_s:.0f} s, first {missing[:5]} (checkpoint {self.checkpoint_dir})"
                )
            time.sleep(POLL_S)


def _parse_log_offset(path: Path) -> int | None:
    """The file source's ``logOffset`` in an ``offsets/<batch>`` file (``v1``, the batch's
    metadata, then one offset line per source), None if it has none."""
    lines = path.read_text().splitlines()
    if len(lines) < 3 or not lines[2].strip() or lines[2].strip() == "-":
        return None
    offset = json.loads(lines[2])
    return int(offset["logOffset"]) if isinstance(offset, dict) else int(offset)


def _parse_source_log(path: Path) -> list[tuple[str, int]]:
    """``(file name, batch id)`` of each entry of a file source log file (``v1`` then one
    JSON object per line with ``path`` as a URI and ``batchId``)."""
    entries = []
    for line in path.read_text().splitlines()[1:]:
        if line.strip():
            record = json.loads(line)
            name = Path(urllib.parse.unquote(urllib.parse.urlparse(record["path"]).path)).name
            entries.append((name, int(record["batchId"])))
    return entries
