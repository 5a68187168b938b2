"""What every benchmark measures against and records with: the word stream and its oracle,
the exact-count check, the machine, source and version record, and the median/min/max and
percentile summaries. How a benchmark drives a cluster (start it, feed it, signal its nodes,
dump its counts, write the results) is ``bench.harness``.

A benchmark script runs as ``python bench/NAME.py`` from anywhere: importing this module puts
the repository first on ``sys.path`` (so ``checkpoint`` is the package, not
``bench/checkpoint.py``) and on the ``PYTHONPATH`` of the node processes (so they can import
``examples.wordcount``).
"""

from __future__ import annotations

import collections
import gzip
import math
import os
import platform
import re
import signal
import statistics
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if sys.path[0] != str(REPO):
    sys.path.insert(0, str(REPO))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))

# A benchmark stopped with SIGTERM unwinds like one stopped with Ctrl-C: its `finally` blocks
# stop the node processes and Spark drivers it started instead of leaving them running.
if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))

RESULTS = REPO / "bench" / "results"
SHARED_TEXT = REPO.parent / "shared" / "data" / "text"
WORD = re.compile(r"[a-z0-9']+")
JOB = "examples.wordcount:job"
FAST_JOB = "examples.wordcount:fast"

__all__ = [
    "FAST_JOB",
    "JOB",
    "REPO",
    "RESULTS",
    "check_counts",
    "corpus_words",
    "load_words",
    "machine",
    "percentile",
    "source",
    "spread",
    "stream_counts",
    "versions",
]


def book_words() -> Iterator[str]:
    """The books' words once through, in order: the shared books when present, else the
    shipped ones, tokenised as the word-count job does."""
    paths = sorted(SHARED_TEXT.glob("pg*.txt")) or sorted((REPO / "examples" / "data").glob("*.gz"))
    for path in paths:
        opener: Any = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as text:
            for line in text:
                yield from WORD.findall(line.lower())


def corpus_words() -> list[str]:
    """The books' words once through (``book_words`` as a list)."""
    return list(book_words())


def load_words(limit: int) -> list[str]:
    """``limit`` words of real text: the books' words, wrapping around as often as needed."""
    words: list[str] = []
    while len(words) < limit:
        before = len(words)
        for word in book_words():
            words.append(word)
            if len(words) >= limit:
                return words
        if len(words) == before:
            raise RuntimeError("no book text found to benchmark with")
    return words


def machine() -> dict[str, Any]:
    """The machine the figures were taken on, with its load average (1, 5, 15 min) now."""
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def source() -> dict[str, Any]:
    """The commit the figures were taken at, and the files that differed from it then."""
    import subprocess

    def git(*args: str) -> str:
        result = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=False
        )
        return result.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "uncommitted": git("status", "--porcelain", "--untracked-files=no").splitlines(),
    }


def versions() -> dict[str, str]:
    """The versions that shape the figures."""
    import matplotlib
    import msgpack
    import zmq

    return {
        "python": platform.python_version(),
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
        "msgpack": ".".join(map(str, msgpack.version)),
        "matplotlib": matplotlib.__version__,
    }


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The ``fraction`` quantile (0..1) of ``values`` by linear interpolation between the
    closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def spread(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """Median, min and max of the values that are not None, and how many there were."""
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "count": 0}
    return {
        "median": statistics.median(present),
        "min": min(present),
        "max": max(present),
        "count": len(present),
    }


def stream_counts(words: Sequence[str], emitted: int) -> collections.Counter[str]:
    """Plain Python's word count of the first ``emitted`` words of ``words`` repeated
    end to end: exactly what a feeder cycling over ``words`` fed."""
    full_passes, rest = divmod(emitted, len(words))
    counts: collections.Counter[str] = collections.Counter()
    if full_passes:
        once = collections.Counter(words)
        for word, count in once.items():
            counts[word] = count * full_passes
    counts.update(words[:rest])
    return counts


def check_counts(dumped: dict[Any, int], expected: dict[Any, int]) -> dict[str, Any]:
    """Compare a dump with the oracle: ``exact`` and, if not, how and where they differ."""
    missing = [k for k in expected if k not in dumped]
    extra = [k for k in dumped if k not in expected]
    wrong = [k for k in expected if k in dumped and dumped[k] != expected[k]]
    return {
        "exact": dumped == expected,
        "keys_expected": len(expected),
        "keys_dumped": len(dumped),
        "keys_missing": len(missing),
        "keys_extra": len(extra),
        "keys_wrong": len(wrong),
        "examples": [
            {"key": k, "expected": expected.get(k), "dumped": dumped.get(k)}
            for k in (missing + extra + wrong)[:5]
        ],
    }


def write_words_text(words: Sequence[str], path: Path, words_per_line: int = 10) -> None:
    """``words`` as a text file of ``words_per_line`` words to a line: an input ``smr feed``
    and a job's map read back as the same words."""
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, len(words), words_per_line):
            out.write(" ".join(words[start : start + words_per_line]) + "\n")
