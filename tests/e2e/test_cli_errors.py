"""User errors: one line naming the problem, exit code 2, no traceback."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.e2e.conftest import EXAMPLE_BOOKS, JOB, Cluster

pytestmark = pytest.mark.e2e


def _assert_one_line_error(result: object, *fragments: str) -> None:
    assert result.returncode == 2, result  # type: ignore[attr-defined]
    lines = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, result.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith("smr: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_unknown_flag(cluster: Cluster) -> None:
    result = cluster.smr("cluster", "up", "--dir", str(cluster.dir), "--colour", "red", check=False)
    _assert_one_line_error(result, "--colour")


def test_missing_job_module(cluster: Cluster) -> None:
    result = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--job", "nosuch.mod:job", check=False
    )
    _assert_one_line_error(result, "nosuch.mod", "not found")
    assert cluster.pids() == []


def test_job_attribute_that_is_not_a_job(cluster: Cluster) -> None:
    result = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--job", "examples.wordcount:add", check=False
    )
    _assert_one_line_error(result, "not an smr.Job")


def test_no_cluster_in_directory(cluster: Cluster) -> None:
    result = cluster.smr("status", "--cluster", str(cluster.dir), check=False)
    _assert_one_line_error(result, "no cluster at", "smr cluster up")


def test_unreachable_cluster(cluster: Cluster, tmp_path: Path) -> None:
    cluster.dir.mkdir(parents=True)
    spec = {
        "format": 1,
        "slot_bits": 8,
        "replication": 0,
        "job": "examples.wordcount:job",
        "nodes": [
            {
                "id": "n0",
                "addr": "tcp://127.0.0.1:9",
                "pub_addr": "tcp://127.0.0.1:9",
                "token": 0,
                "pid": None,
            }
        ],
    }
    (cluster.dir / "cluster.json").write_text(json.dumps(spec))
    result = cluster.smr(
        "feed",
        "--cluster",
        str(cluster.dir),
        "--job",
        "examples.wordcount:job",
        EXAMPLE_BOOKS[0],
        check=False,
    )
    _assert_one_line_error(result, "no node of the cluster answers", "127.0.0.1:9")


def test_missing_input_file(cluster: Cluster) -> None:
    cluster.up(1)
    result = cluster.feed("/nonexistent/book.txt", check=False)
    _assert_one_line_error(result, "/nonexistent/book.txt", "does not exist")


def test_second_cluster_in_the_same_directory_is_refused(cluster: Cluster) -> None:
    cluster.up(1)
    result = cluster.smr(
        "cluster", "up", "--dir", str(cluster.dir), "--job", "examples.wordcount:job", check=False
    )
    _assert_one_line_error(result, "already running")


def test_fault_on_unknown_node(cluster: Cluster) -> None:
    cluster.up(1)
    result = cluster.smr("fault", "kill", "n9", "--cluster", str(cluster.dir), check=False)
    _assert_one_line_error(result, "no node 'n9'", "n0")


def test_status_fits_80_columns_and_exits_1_naming_an_unreachable_node(cluster: Cluster) -> None:
    cluster.up(3)
    cluster.smr("fault", "kill", "n1", "--cluster", str(cluster.dir))
    result = cluster.smr("status", "--cluster", str(cluster.dir), check=False)
    assert result.returncode == 1, result
    assert max(len(line) for line in result.stdout.splitlines()) <= 80, result.stdout
    assert "…" not in result.stdout, result.stdout
    n1_addr = next(n["addr"] for n in cluster.spec()["nodes"] if n["id"] == "n1")
    assert f"1 of 3 nodes unreachable: n1 ({n1_addr})" in result.stderr


def test_feed_refuses_a_file_that_is_not_text_unless_binary_ok_is_given(
    cluster: Cluster, tmp_path: Path
) -> None:
    binary = tmp_path / "random.bin"
    binary.write_bytes(random.Random(3).randbytes(100_000))
    text = tmp_path / "words.txt"
    text.write_text("call me ishmael\n", encoding="utf-8")
    cluster.up(1)
    refused = cluster.feed(str(binary), str(text), check=False)
    assert refused.returncode == 2, refused
    assert refused.stderr.splitlines() == [
        f"smr: error: {binary} does not look like text (it has NUL bytes in its first 64 KiB): "
        "not fed; --binary-ok feeds it as lines of UTF-8 anyway"
    ]
    assert cluster.dump() == {}
    result = cluster.feed(str(binary), str(text), extra=["--binary-ok"])
    warnings = [line for line in result.stderr.splitlines() if "does not look like text" in line]
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith(f"smr: warning: {binary} ") and "NUL" in warnings[0]
    assert cluster.counts()["ishmael"] == 1


def test_feed_with_another_jobs_map_is_refused_naming_both_jobs(cluster: Cluster) -> None:
    cluster.up(1)
    result = cluster.feed(EXAMPLE_BOOKS[0], job="tests.e2e.jobs:announcing", check=False)
    _assert_one_line_error(
        result,
        "--job tests.e2e.jobs:announcing is not the cluster's job examples.wordcount:job",
        "omit --job",
    )
    assert cluster.dump() == {}


def test_feed_without_job_runs_the_clusters_job(cluster: Cluster, tmp_path: Path) -> None:
    text = tmp_path / "words.txt"
    text.write_text("call me ishmael\ncall me\n", encoding="utf-8")
    cluster.up(1)
    cluster.smr("feed", "--cluster", str(cluster.dir), str(text))
    assert cluster.counts() == {"call": 2, "me": 2, "ishmael": 1}


@pytest.mark.slow
def test_a_dump_that_fails_leaves_no_partial_file(cluster: Cluster, tmp_path: Path) -> None:
    cluster.up(2, JOB, "--replication", "0")  # nobody takes over n1: its keys cannot be dumped
    cluster.feed(EXAMPLE_BOOKS[0])
    cluster.smr("fault", "kill", "n1", "--cluster", str(cluster.dir))
    out = tmp_path / "dump.jsonl"
    result = cluster.smr("dump", "--cluster", str(cluster.dir), "--out", str(out), check=False)
    n1_addr = next(n["addr"] for n in cluster.spec()["nodes"] if n["id"] == "n1")
    _assert_one_line_error(result, n1_addr)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("dump")) == []
