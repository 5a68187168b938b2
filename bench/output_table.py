"""Exactly-once output to PostgreSQL: what writing every record to a table costs.

A local cluster of 3 nodes, r = 1, fed ``--words`` words of the books by ``smr feed`` (the
Python feeder, with ``combine``) and reducing with a job that emits a record per tuple:

- ``files``: ``examples.wordcount:counted`` (each tuple's count), output files only: the
  baseline, measured in the same run;
- ``table add``: the same job, and a PostgreSQL table summing the records per word
  (``--output-merge add``);
- ``table replace``: ``examples.wordcount:published`` (a word's new count each time),
  and a table keeping each word's last (``--output-merge replace``).

The cases run in turn, ``--repeats`` times over. For each: the feed's words per second, the
seconds from the feed's end until every node's table backlog is empty and the table equals
plain Python's counts, the time the nodes spent committing, and the checks: the dumped
state, the table, and the output files read each origin once (``smr output``), every one
exact against plain Python. The PostgreSQL server (Debian's package, fsync on) is started
for the run in a temporary directory and stopped after it; it runs on the same cores as the
nodes and the feeder. The JSON goes to ``bench/results/output_table.json``; a plot beside
it.

    python bench/output_table.py [--words 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    RESULTS,
    check_counts,
    load_words,
    machine,
    spread,
    versions,
    write_words_text,
)
from bench.harness import (
    cluster_statuses,
    dump_counts,
    local_cluster,
    pyplot,
    smr_command,
    timed_run,
    write_report,
)

NODES = 3
REPLICATION = 1
CASES = (
    ("files", "examples.wordcount:counted", None),
    ("table add", "examples.wordcount:counted", "add"),
    ("table replace", "examples.wordcount:published", "replace"),
)
SETTLE_TIMEOUT_S = 120.0


def table_counts(dsn: str, table: str) -> dict[str, int]:
    """The table's rows as word -> int."""
    import psycopg

    with psycopg.connect(dsn) as connection:
        rows = connection.execute(f"SELECT key, value FROM {table}").fetchall()
    return {key: int(value) for key, value in rows}


def file_counts(cluster_dir: Path, merge: str) -> tuple[dict[str, int], int]:
    """The output files read each origin once, merged per word (summed, or the largest of
    running counts); and the repeats dropped."""
    from smr.output.files import OutputFiles

    files = OutputFiles(cluster_dir / "output")
    merged: collections.Counter[str] = collections.Counter()
    for record in files:
        key, value = record["key"], record["value"]
        merged[key] = merged[key] + value if merge == "add" else max(merged[key], value)
    return dict(merged), files.repeats


def run_case(
    name: str, job: str, merge: str | None, dsn: str, text: Path, expected: dict[str, int], run: int
) -> dict[str, Any]:
    """One feed of ``text`` into a fresh cluster of ``job``, writing to a table of its own
    with ``merge`` (None: files only); its figures and checks."""
    from smr.output.table import TableTarget

    table = f"bench_{name.replace(' ', '_')}_{run}"
    target = None if merge is None else TableTarget(dsn, table, merge)
    with local_cluster(NODES, REPLICATION, job=job, output_table=target) as (cluster_dir, spec):
        started = time.perf_counter()
        feed_s = timed_run(
            smr_command("feed", str(text), "--cluster", str(cluster_dir), "--job", job)
        )
        settle_s = None
        table_check = None
        if target is not None:
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while True:
                rows = cluster_statuses(spec)
                backlog = sum(row.get("output_table_backlog", 0) for row in rows.values())
                found = table_counts(dsn, table) if backlog == 0 else None
                if found == expected or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            settle_s = time.perf_counter() - started - feed_s
            table_check = check_counts(table_counts(dsn, table), expected)
        rows = cluster_statuses(spec)
        state_check = check_counts(dump_counts([str(cluster_dir)]), expected)
        files, repeats = file_counts(cluster_dir, merge or "add")
        files_check = check_counts(files, expected)
    words = sum(expected.values())
    result = {
        "case": name,
        "job": job,
        "merge": merge,
        "feed_s": feed_s,
        "words_per_s": words / feed_s,
        "settle_s": settle_s,
        "records": sum(row.get("output_records", 0) for row in rows.values()),
        "table_records": sum(row.get("output_table_records", 0) for row in rows.values()),
        "table_commits": sum(row.get("output_table_commits", 0) for row in rows.values()),
        "table_commit_s": sum(row.get("output_table_commit_s", 0.0) for row in rows.values()),
        "table_errors": sum(row.get("output_table_errors", 0) for row in rows.values()),
        "file_repeats": repeats,
        "check_state": state_check,
        "check_table": table_check,
        "check_files": files_check,
        "exact": state_check["exact"]
        and files_check["exact"]
        and (table_check is None or table_check["exact"]),
    }
    settled = "" if settle_s is None else f", table settled {settle_s:.2f} s after"
    print(
        f"  {name}: {result['words_per_s'] / 1e3:.0f} k words/s{settled}, "
        f"{result['records']:,} records, exact {result['exact']}",
        flush=True,
    )
    return result


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per case: the median rate and settle time, and the ratio to files only."""
    by_case: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for run in runs:
        by_case[run["case"]].append(run)
    summary = {
        name: {
            "words_per_s": spread([r["words_per_s"] for r in cases]),
            "settle_s": spread([r["settle_s"] for r in cases]),
            "commit_ms_per_commit": spread(
                [
                    1000 * r["table_commit_s"] / r["table_commits"]
                    for r in cases
                    if r["table_commits"]
                ]
            ),
            "exact": all(r["exact"] for r in cases),
        }
        for name, cases in by_case.items()
    }
    base = summary["files"]["words_per_s"]["median"]
    for entry in summary.values():
        entry["ratio_to_files"] = entry["words_per_s"]["median"] / base
    return summary


def plot(report: dict[str, Any], path: Path) -> None:
    """Words per second per case (median, with the min-max range)."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7, 4))
    names = list(report["summary"])
    medians = [report["summary"][n]["words_per_s"]["median"] / 1e3 for n in names]
    lows = [
        m - report["summary"][n]["words_per_s"]["min"] / 1e3
        for n, m in zip(names, medians, strict=True)
    ]
    highs = [
        report["summary"][n]["words_per_s"]["max"] / 1e3 - m
        for n, m in zip(names, medians, strict=True)
    ]
    axes.bar(names, medians, yerr=[lows, highs], capsize=4)
    axes.set_ylabel("k words/s (smr feed, r = 1)")
    axes.set_title("Output files only vs. a PostgreSQL table too")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def main() -> None:
    from tests.postgres_server import postgres_server

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "output_table.json")
    args = parser.parse_args()
    words = load_words(args.words)
    expected = dict(collections.Counter(words))
    runs = []
    with (
        tempfile.TemporaryDirectory(prefix="smr-bench-") as work,
        postgres_server(durable=True) as dsn,
    ):
        text = Path(work) / "words.txt"
        write_words_text(words, text)
        for run in range(args.repeats):
            for name, job, merge in CASES:
                runs.append(run_case(name, job, merge, dsn, text, expected, run))
    report = {
        "benchmark": "output_table",
        "nodes": NODES,
        "replication": REPLICATION,
        "words": args.words,
        "runs": runs,
        "summary": summarise(runs),
        "machine": machine(),
        "versions": versions(),
    }
    write_report(report, args.out, plot)


if __name__ == "__main__":
    main()
