"""A real PostgreSQL server for the output table's tests: made in a temporary directory with
Debian's binaries, listening on a free loopback port, stopped by its pid.

Without the binaries :class:`PostgresMissing` is raised: the tests' fixture turns it into a
skip that says so, unless ``SMR_REQUIRE_POSTGRES`` is set (CI sets it after installing the
package): then they fail, so CI never passes by skipping them. The benchmarks use it too.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT_S = 30.0


class PostgresMissing(Exception):
    """PostgreSQL's server binaries are not installed here."""


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def postgres_server(durable: bool = False) -> Iterator[str]:
    """A server whose data lives in a new temporary directory (one the server's user can
    reach: pytest's own are private to root); yields its connection string, then stops it
    (SIGTERM, then SIGKILL after 10 s) and removes the directory. By default it runs
    without fsync (a test's server: its durability is not under test); a benchmark asks for
    a ``durable`` one."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        raise PostgresMissing(
            "PostgreSQL's server binaries (Debian's postgresql package) are not installed"
        )
    # The server refuses to run as root: run it as the package's user then.
    user = "postgres" if os.geteuid() == 0 else None
    directory = Path(tempfile.mkdtemp(prefix="smr-postgres-"))
    data = directory / "data"
    if user is not None:
        shutil.chown(directory, user)
    initdb = subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "smr", "--auth=trust", "-E", "UTF8"],
        capture_output=True,
        user=user,
    )
    if initdb.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {initdb.stderr.decode(errors='replace')}")
    port = _free_port()
    log = open(directory / "server.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [
            str(bin_dir / "postgres"),
            "-D",
            str(data),
            "-p",
            str(port),
            "-k",
            str(directory),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"fsync={'on' if durable else 'off'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        user=user,
    )
    dsn = f"host=127.0.0.1 port={port} user=smr dbname=postgres"
    try:
        _wait_ready(dsn, server, directory)
        yield dsn
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_ready(dsn: str, server: subprocess.Popen[bytes], directory: Path) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if server.poll() is not None:
            raise RuntimeError(
                "PostgreSQL exited: " + (directory / "server.log").read_text(errors="replace")
            )
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
