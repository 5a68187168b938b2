"""User values over real processes: bad emits, unencodable states, big records and a huge
line each cost their own record (or tuple) only, never the feed, a node or a rerun."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import Cluster, word_counts
from tests.e2e.jobs import BAD_EMITS

pytestmark = pytest.mark.e2e


def test_bad_keys_and_values_from_map_cost_their_records_only_and_exit_1(
    cluster: Cluster, tmp_path: Path
) -> None:
    good = ["the cat sat", "on the mat", "the end"]
    bad = [f"a dog {marker} ran" for marker in BAD_EMITS]
    text = tmp_path / "input.txt"
    text.write_text("\n".join([good[0], *bad, *good[1:]]) + "\n")
    cluster.up(3, "tests.e2e.jobs:bad_emits")
    for extra in (["--no-combine"], []):
        result = cluster.feed(str(text), job="tests.e2e.jobs:bad_emits", extra=extra, check=False)
        assert result.returncode == 1, result.stderr
        assert f"bad emit at {text}:2: key (1, 2) is a tuple" in result.stderr
        assert (
            f"smr: {len(bad)} records failed and were skipped: 0 in map, {len(bad)} with a bad emit"
            in result.stderr
        )
        assert "Traceback" not in result.stderr
    # Two feeds, each exact: the good records counted twice, nothing of the bad ones.
    good_text = tmp_path / "good.txt"
    good_text.write_text("\n".join(good) + "\n")
    assert cluster.counts() == {word: 2 * n for word, n in word_counts([str(good_text)]).items()}


@pytest.mark.slow
def test_a_reduce_storing_a_set_is_a_counted_reduce_error_and_reads_still_work(
    cluster: Cluster, tmp_path: Path
) -> None:
    text = tmp_path / "input.txt"
    text.write_text("a zzset b\nzzbig a zzset\nc\n" * 50)
    cluster.up(3, "tests.e2e.jobs:unencodable_state", "--replication", "1")
    cluster.feed(str(text), job="tests.e2e.jobs:unencodable_state")
    for _ in range(3):
        assert cluster.counts() == {"a": 100, "b": 50, "c": 50}
        for key in ("zzset", "zzbig", "a"):
            answer = json.loads(cluster.smr("query", "--cluster", str(cluster.dir), key).stdout)
            assert answer["state"] == ({"count": 100} if key == "a" else None)
    time.sleep(1.5)  # a checkpoint cycle or more
    status = cluster.status()
    assert sum(row["tuples_failed"] for row in status.values()) == 150
    assert all(row["state"] == "up" for row in status.values())
    assert all(psutil.pid_exists(pid) for pid in cluster.pids())
    logs = "".join(p.read_text() for p in (cluster.dir / "logs").glob("*.log"))
    assert "reduce failed for key 'zzset': StateValueError: field 'seen' holds set" in logs


def test_records_of_100_kb_are_delivered_exactly_in_batches_cut_by_bytes(
    cluster: Cluster, tmp_path: Path
) -> None:
    text = tmp_path / "big.txt"
    lines = [f"k{i % 7} " + chr(ord("a") + i % 26) * 100_000 for i in range(300)]
    text.write_text("\n".join(lines) + "\n")
    cluster.up(2, "tests.e2e.jobs:big_records")
    started = time.monotonic()
    cluster.feed(str(text), job="tests.e2e.jobs:big_records")
    assert time.monotonic() - started < 60
    expected: dict[str, dict[str, int]] = {}
    for line in lines:
        state = expected.setdefault(line.split(" ", 1)[0], {"count": 0, "bytes": 0})
        state["count"] += 1
        state["bytes"] += len(line)
    assert cluster.dump() == expected
    assert sum(row["bad_frames"] for row in cluster.status().values()) == 0


def test_a_50_mb_line_is_a_failed_record_and_the_feeder_stays_small(
    cluster: Cluster, tmp_path: Path
) -> None:
    text = tmp_path / "huge.txt"
    with open(text, "w") as out:
        out.write("the cat\n")
        for _ in range(50):
            out.write("x" * 1_000_000)
        out.write("\nthe end\n")
    cluster.up(2)
    feed = cluster.feed_in_background(str(text), combine=True)
    process = psutil.Process(feed.pid)
    rss_peak = 0
    try:
        while feed.poll() is None:
            try:
                rss_peak = max(rss_peak, process.memory_info().rss)
            except psutil.NoSuchProcess:
                break
            time.sleep(0.005)
        out, err = feed.communicate(timeout=120)
    finally:
        if feed.poll() is None:
            feed.kill()
            feed.wait()
    print(f"feeder RSS peak: {rss_peak / 2**20:.1f} MiB")
    assert feed.returncode == 1, err
    assert f"record at {text}:2 is longer than 1048576 bytes (--max-record-bytes)" in err
    assert cluster.counts() == {"the": 2, "cat": 1, "end": 1}
    assert rss_peak < 300 * 2**20


def test_a_line_over_the_bound_on_standard_input_is_a_failed_record(cluster: Cluster) -> None:
    cluster.up(2)
    long_line = "y" * 3_000_000
    result = cluster.feed(
        "-", input_text=f"the cat\n{long_line}\nthe end\n{long_line}", check=False
    )
    assert result.returncode == 1, result.stderr
    assert "record at -:2 is longer than 1048576 bytes" in result.stderr
    assert "record at -:4 is longer" in result.stderr
    assert cluster.counts() == {"the": 2, "cat": 1, "end": 1}
