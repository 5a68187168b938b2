"""``make demo``: word count over the shipped books, fed by Spark into a 3-node local cluster
with one copy of everything (``r = 1``), while one node is SIGKILLed in the middle.

Runs the same commands a user would type (each is printed first), shows the feed's progress
batch by batch, then checks the result against plain Python and stops the cluster, whatever
happened.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BOOKS = sorted(str(p) for p in (HERE / "data").glob("*.txt.gz"))
JOB = "examples.wordcount:job"
WORD = re.compile(r"[a-z0-9']+")
INPUT_FILES = 16
KILL_AFTER_BATCH = 2
VICTIM = "n1"


def smr(*args: str, ok_codes: tuple[int, ...] = (0,)) -> str:
    """Run one smr command, echoing it; exit with its message if it fails."""
    shown = " ".join(shlex.quote(a) for a in args)
    print(f"$ smr {shown}", flush=True)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "smr", *args], stdout=subprocess.PIPE, text=True, cwd=HERE.parent
    )
    print(result.stdout.rstrip())
    if result.returncode not in ok_codes:
        sys.exit(f"demo: 'smr {shown}' failed with exit code {result.returncode}")
    print(f"  ({time.monotonic() - started:.2f} s)\n")
    return result.stdout


def plain_python_counts(paths: list[str]) -> collections.Counter[str]:
    """The oracle: the same tokenisation, in one process, without smr."""
    counts: collections.Counter[str] = collections.Counter()
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as text:
            for line in text:
                counts.update(WORD.findall(line.rstrip("\r\n").lower()))
    return counts


def split_books(directory: Path, files: int, lines_max: int | None = None) -> list[str]:
    """Write the books' lines (their first ``lines_max``) as ``files`` text files, in order,
    and return their paths: Spark's file source streams a directory, a few files per
    micro-batch."""
    lines: list[str] = []
    for book in BOOKS:
        with gzip.open(book, "rt", encoding="utf-8", errors="replace") as text:
            lines.extend(line.rstrip("\r\n") for line in text)
    lines = lines[:lines_max]
    directory.mkdir(parents=True)
    per_file = len(lines) // files + 1
    paths = []
    for index in range(files):
        chunk = lines[index * per_file : (index + 1) * per_file]
        path = directory / f"part-{index:03d}.txt"
        path.write_text("\n".join(chunk) + "\n")
        paths.append(str(path))
    return paths


def spark_feed_killing_a_node(cluster: str, input_dir: Path) -> None:
    """Run ``smr spark-feed``, echoing its progress; after batch KILL_AFTER_BATCH, SIGKILL
    node VICTIM. The feed must still exit 0 (every tuple acked)."""
    args = ["spark-feed", "--cluster", cluster, "--job", JOB, "--input", str(input_dir)]
    args += ["--once", "--max-files-per-trigger", "2"]
    print(f"$ smr {' '.join(shlex.quote(a) for a in args)}", flush=True)
    started = time.monotonic()
    feed = subprocess.Popen(
        [sys.executable, "-m", "smr", *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=HERE.parent,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # each progress line as it happens
    )
    assert feed.stdout is not None
    killed = False
    for line in feed.stdout:
        print(f"  {line.rstrip()}", flush=True)
        if not killed and line.startswith(f"batch {KILL_AFTER_BATCH}:"):
            print(f"\n  >>> SIGKILL node {VICTIM} in the middle of the stream <<<", flush=True)
            smr("fault", "kill", VICTIM, "--cluster", cluster)
            killed = True
    if feed.wait() != 0:
        sys.exit(f"demo: smr spark-feed failed with exit code {feed.returncode}")
    if not killed:
        sys.exit(f"demo: the feed ended before batch {KILL_AFTER_BATCH}; no node was killed")
    print(f"  ({time.monotonic() - started:.2f} s)\n")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="smr-demo-") as workdir:
        cluster = str(Path(workdir) / "cluster")
        dump = str(Path(workdir) / "dump.jsonl")
        input_dir = Path(workdir) / "input"
        split_books(input_dir, INPUT_FILES)
        smr("cluster", "up", "--dir", cluster, "--nodes", "3", "--replication", "1", "--job", JOB)
        try:
            spark_feed_killing_a_node(cluster, input_dir)
            # The killed node does not answer: status names it and exits 1.
            smr("status", "--cluster", cluster, ok_codes=(0, 1))
            smr("dump", "--cluster", cluster, "--out", dump)
        finally:
            smr("cluster", "down", "--dir", cluster)
        with open(dump, encoding="utf-8") as lines:
            counts = {o["key"]: o["state"]["count"] for o in map(json.loads, lines)}
    print("The 20 most frequent words:")
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:20]:
        print(f"  {word:>10}  {n:>7,}")
    expected = plain_python_counts(BOOKS)
    if counts != dict(expected):
        differing = {k for k in counts.keys() | expected.keys() if counts.get(k) != expected.get(k)}
        sys.exit(f"demo: {len(differing)} words differ from plain Python's counts")
    print(
        f"\nAll {len(counts):,} words equal plain Python's counts "
        f"({sum(counts.values()):,} words in {len(BOOKS)} books), "
        f"though node {VICTIM} was killed mid-stream."
    )


if __name__ == "__main__":
    main()
