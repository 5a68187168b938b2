"""A client that knows a cluster only by a seed address (``--cluster host:port``), with no
``cluster.json``: it feeds, queries, dumps and shows the status of the ring, exactly as with
the directory; a feed run again is recognised as done; a bad or silent seed fails with one
line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smr.client.seeds import parse_seeds
from tests.e2e.conftest import EXAMPLE_BOOKS, Cluster, word_counts

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_a_client_with_only_a_seed_address_feeds_reads_and_resumes(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the feeds' records
    cluster.up(3, "examples.wordcount:job", "--replication", "1")
    seed = cluster.spec()["nodes"][1]["addr"].removeprefix("tcp://")
    dead_then_live = f"127.0.0.1:1,{seed}"
    fed = cluster.smr("feed", "--cluster", dead_then_live, EXAMPLE_BOOKS[0]).stdout
    assert "fed" in fed, fed
    again = cluster.smr("feed", "--cluster", seed, EXAMPLE_BOOKS[0]).stdout
    assert "nothing new" in again, again
    out = tmp_path / "dump.jsonl"
    cluster.smr("dump", "--cluster", seed, "--out", str(out))
    dumped = {
        (record := json.loads(line))["key"]: record["state"]["count"]
        for line in out.read_text().splitlines()
    }
    assert dumped == word_counts(EXAMPLE_BOOKS[:1])
    answer = json.loads(cluster.smr("query", "--cluster", seed, "the").stdout)
    assert answer["state"]["count"] == dumped["the"]
    status = cluster.smr("status", "--cluster", seed, "--json").stdout
    assert sorted(row["node"] for row in json.loads(status)["nodes"]) == ["n0", "n1", "n2"]

    silent = cluster.smr("status", "--cluster", "127.0.0.1:1", check=False)
    assert silent.returncode == 2 and "no seed of tcp://127.0.0.1:1 answers" in silent.stderr
    bad = cluster.smr("status", "--cluster", f"{seed},nohost:99999", check=False)
    assert bad.returncode == 2 and "not a seed address" in bad.stderr, bad.stderr


def test_seed_lists_parse_and_anything_else_is_a_directory() -> None:
    assert parse_seeds("n0:7000,tcp://10.0.0.3:7001") == ["tcp://n0:7000", "tcp://10.0.0.3:7001"]
    assert parse_seeds("/tmp/cluster") is None and parse_seeds("cluster-dir") is None
    with pytest.raises(ValueError, match="not a seed address"):
        parse_seeds("n0:7000,n1")
