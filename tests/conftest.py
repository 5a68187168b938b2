"""Fixtures shared by every test directory."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from tests.postgres_server import PostgresMissing, postgres_server


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """The connection string of a real PostgreSQL server this test session started (and
    stops at its end); tests keep apart by table name. Skips, saying why, where the server
    is not installed, unless SMR_REQUIRE_POSTGRES is set (CI): then it fails."""
    with contextlib.ExitStack() as stack:
        try:
            dsn = stack.enter_context(postgres_server())
        except PostgresMissing as missing:
            if os.environ.get("SMR_REQUIRE_POSTGRES"):
                pytest.fail(f"{missing}, and SMR_REQUIRE_POSTGRES is set")
            pytest.skip(f"{missing}: .ci/run installs them")
        yield dsn
