"""``make demo``: word count over the shipped books on a 3-node local cluster.

Runs the same commands a user would type (each is printed first), then checks the result
against plain Python and stops the cluster, whatever happened.
"""

from __future__ import annotations

import collections
import gzip
import json
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


def smr(*args: str) -> str:
    """Run one smr command, echoing it; exit with its message if it fails."""
    shown = " ".join(shlex.quote(a) for a in args)
    print(f"$ smr {shown}", flush=True)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "smr", *args], stdout=subprocess.PIPE, text=True, cwd=HERE.parent
    )
    print(result.stdout.rstrip())
    if result.returncode != 0:
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


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="smr-demo-") as workdir:
        cluster = str(Path(workdir) / "cluster")
        dump = str(Path(workdir) / "dump.jsonl")
        smr("cluster", "up", "--dir", cluster, "--nodes", "3", "--job", JOB)
        try:
            smr("feed", "--cluster", cluster, "--job", JOB, *BOOKS)
            smr("status", "--cluster", cluster)
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
        f"({sum(counts.values()):,} words in {len(BOOKS)} books)."
    )


if __name__ == "__main__":
    main()
