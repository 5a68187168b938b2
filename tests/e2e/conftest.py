"""End-to-end fixtures: real node processes on 127.0.0.1, driven through the smr CLI.

Every node a test starts is stopped by its PID when the test ends, whatever happened.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from smr.client.control import Client, NodeUnreachable
from smr.transport.security import load_keys
from smr.transport.zeromq import use_keys_of

REPO = Path(__file__).resolve().parents[2]
SHARED_TEXT = REPO.parent / "shared" / "data" / "text"
EXAMPLE_BOOKS = sorted(str(p) for p in (REPO / "examples" / "data").glob("*.txt.gz"))
WORD = re.compile(r"[a-z0-9']+")
JOB = "examples.wordcount:job"


def word_counts(paths: Sequence[str]) -> dict[str, int]:
    """Plain Python's word count, tokenising exactly as smr feed and the example job do."""
    counts: collections.Counter[str] = collections.Counter()
    for path in paths:
        opener: Any = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as text:
            for line in text:
                counts.update(WORD.findall(line.rstrip("\r\n").lower()))
    return dict(counts)


def feed_books() -> list[str]:
    """Enough text for a feed that is still running while faults or moves happen: two books
    from ../shared/data/text when it is there, else the shipped ones."""
    shared = [SHARED_TEXT / "pg2701_moby_dick.txt", SHARED_TEXT / "pg1342_pride_and_prejudice.txt"]
    if all(p.is_file() for p in shared):
        return [str(p) for p in shared]
    return EXAMPLE_BOOKS


# Small batches and a short window keep the feed running while faults or moves happen.
FEED_FLAGS = ["--batch-size", "200", "--window", "8"]


def shared_books(*names: str) -> list[str]:
    """Books from ../shared/data/text, or a skip saying that directory is needed."""
    paths = [SHARED_TEXT / name for name in names]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"needs {SHARED_TEXT} (the shared data beside the repository)")
    return [str(p) for p in paths]


class Cluster:
    """A local cluster in a temporary directory, driven by the smr command line."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def smr(
        self, *args: str, check: bool = True, input_text: str | None = None, timeout_s: float = 120
    ) -> subprocess.CompletedProcess[str]:
        # A command given the cluster by its seeds finds the keys as a user's does.
        keys = self.dir / "keys"
        env = {**os.environ, "SMR_KEYS": str(keys)} if keys.is_dir() else None
        result = subprocess.run(
            [sys.executable, "-m", "smr", *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            input=input_text,
            timeout=timeout_s,
            env=env,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"smr {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def up(self, nodes: int = 3, job: str = JOB, *extra: str) -> None:
        self.smr(
            "cluster", "up", "--dir", str(self.dir), "--nodes", str(nodes), "--job", job, *extra
        )
        # This test process talks to the nodes too (Client, smr.connect): with their keys.
        use_keys_of(self.dir)

    def raw_dealer(self, addr: str) -> zmq.Socket[bytes]:
        """A bare DEALER to a node, holding the cluster's client keys (if it has keys): for
        sending frames no client would. Close it."""
        dealer = zmq.Context.instance().socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 5000)
        if (self.dir / "keys").is_dir():
            keys = load_keys(self.dir / "keys")
            dealer.curve_serverkey = keys.cluster_public
            dealer.curve_publickey = keys.client_public
            dealer.curve_secretkey = keys.client_secret
        dealer.connect(addr)
        return dealer

    def feed(
        self,
        *files: str,
        job: str = JOB,
        extra: Sequence[str] = (),
        check: bool = True,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return self.smr(
            "feed",
            "--cluster",
            str(self.dir),
            "--job",
            job,
            *extra,
            *files,
            check=check,
            input_text=input_text,
        )

    def feed_in_background(
        self, *files: str, job: str = JOB, combine: bool = False, extra: Sequence[str] = ()
    ) -> subprocess.Popen[str]:
        """Start ``smr feed`` of ``job`` (the word count, without its combine unless asked)
        without waiting for it."""
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "smr",
                "feed",
                "--cluster",
                str(self.dir),
                "--job",
                job,
                *([] if combine else ["--no-combine"]),
                *extra,
                *files,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @staticmethod
    def wait_feed(feed: subprocess.Popen[str], timeout_s: float = 180) -> None:
        """Wait for a background feed; it must exit 0. It is killed if it overruns."""
        try:
            out, err = feed.communicate(timeout=timeout_s)
        finally:
            if feed.poll() is None:
                feed.kill()
                feed.wait()
        assert feed.returncode == 0, f"feed exited {feed.returncode}:\n{out}\n{err}"

    def dump(self) -> dict[Any, dict[str, Any]]:
        out = self.dir / "dump.jsonl"
        self.smr("dump", "--cluster", str(self.dir), "--out", str(out))
        states: dict[Any, dict[str, Any]] = {}
        for line in out.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            assert record["key"] not in states, f"key {record['key']!r} dumped twice"
            states[record["key"]] = record["state"]
        return states

    def counts(self) -> dict[str, int]:
        return {key: state["count"] for key, state in self.dump().items()}

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = json.loads((self.dir / "cluster.json").read_text())
        return spec

    def pids(self) -> list[int]:
        if not (self.dir / "cluster.json").exists():
            return []
        return [n["pid"] for n in self.spec()["nodes"] if n.get("pid")]

    def applied(self) -> int:
        """Tuples applied so far, summed over the nodes that answer (asked directly, not
        through the CLI, so that a test can poll it while a feed runs)."""
        client = Client(timeout_ms=1000)
        total = 0
        try:
            for node in self.spec()["nodes"]:
                with contextlib.suppress(NodeUnreachable):
                    total += client.status(node["addr"]).get("tuples_applied", 0)
        finally:
            client.close()
        return total

    def status(self) -> dict[str, dict[str, Any]]:
        """Every node's status row; exit code 1 (some node unreachable) is expected here."""
        result = self.smr("status", "--cluster", str(self.dir), "--json", check=False)
        assert result.returncode in (0, 1), f"smr status exited {result.returncode}:\n{result}"
        return {row["node"]: row for row in json.loads(result.stdout)["nodes"]}

    def stop(self) -> None:
        """Stop every node this cluster started, by PID, even if the CLI cannot."""
        if (self.dir / "cluster.json").exists():
            self.smr("cluster", "down", "--dir", str(self.dir), "--grace-s", "3", check=False)
        for pid in self.pids():
            if psutil.pid_exists(pid):
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "cluster")
    try:
        yield c
    finally:
        c.stop()
