"""The Python client (``smr.connect``): writing from a program against ``smr feed``, and
reading state while a feed runs.

What is measured, in one run, on local clusters of 3 nodes with ``r = 1``:

1. **emit_many against smr feed**: the same text file (the books' words, ten to a line) is
   fed by ``smr feed FILE`` and by a program of a few lines that splits the lines into words
   as the job's map does and writes them with ``Cluster.emit_many`` and ``flush``. Both run
   as fresh processes on a fresh cluster, timed from process start to exit (interpreter
   start, connection and the acks of every tuple included), with and without ``combine``;
   the order alternates run by run, and every run's counts are checked against plain Python.
   The ratio is feed time over program time (above 1: the program is faster).
2. **get under load**: a feeder process emits the words at 50% of the peak measured in step
   1 (the program's rate without combine); meanwhile this process calls ``get`` on random
   words of the text, one at a time, and ``get_many`` of 1,000 of them, timing each call.
   The same calls are timed again once the feed has ended (idle).
3. **scan**: every key and state of the finished cluster, keys per second.

Each figure is the median of ``--runs`` runs with min and max; the JSON in
``bench/results/client.json`` records every run, the machine and the versions; a plot goes
to ``bench/results/client.png``.

    python bench/client.py [--runs 3] [--words 1000000] [--seconds 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    JOB,
    RESULTS,
    check_counts,
    load_words,
    machine,
    spread,
    stream_counts,
    versions,
    write_words_text,
)
from bench.harness import (
    dump_counts,
    feeder_process,
    local_cluster,
    pyplot,
    smr_command,
    timed_run,
    write_report,
)
from bench.latency import paced_feeder, percentiles

NODES = 3
REPLICATION = 1
WORDS_PER_LINE = 10
GET_MANY_KEYS = 1000
LOAD_FRACTION = 0.5
LINGER_MS = 10.0

# The user's program of step 1: its own map (the job's tokeniser), then emit_many and flush.
PROGRAM = textwrap.dedent(
    """
    import re, sys
    import smr
    from examples.wordcount import job

    cluster_dir, path, combine = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    word = re.compile(r"[a-z0-9']+")
    with smr.connect(cluster_dir, job=job if combine else None, mapper_id="bench-program") as c:
        with open(path, encoding="utf-8") as text:
            for line in text:
                c.emit_many([(w, 1) for w in word.findall(line.lower())])
        c.flush()
    """
)


def write_once(
    writer: str, words: Sequence[str], text: Path, combine: bool, expected: dict[str, int]
) -> dict[str, Any]:
    """One writer (``feed`` or ``program``) on a fresh cluster; its time and rate, and the
    check of the cluster's counts against ``expected``."""
    with local_cluster(NODES, REPLICATION) as (cluster_dir, _spec):
        if writer == "feed":
            command = smr_command("feed", str(text), "--cluster", str(cluster_dir))
            command += [] if combine else ["--no-combine"]
        else:
            command = [
                sys.executable,
                "-c",
                PROGRAM,
                str(cluster_dir),
                str(text),
                str(int(combine)),
            ]
        elapsed = timed_run(command)
        check = check_counts(dump_counts([n.addr for n in _spec.nodes]), expected)
    return {
        "writer": writer,
        "combine": combine,
        "elapsed_s": elapsed,
        "words_per_s": len(words) / elapsed,
        "check": check,
    }


def compare_writers(words: Sequence[str], text: Path, runs: int) -> dict[str, Any]:
    """Step 1: ``runs`` runs of each writer, with and without combine, in alternating order."""
    expected = dict(stream_counts(words, len(words)))
    modes: dict[str, Any] = {}
    for combine in (False, True):
        by_writer: dict[str, list[dict[str, Any]]] = {"feed": [], "program": []}
        for run in range(runs):
            order = ("feed", "program") if run % 2 == 0 else ("program", "feed")
            for writer in order:
                result = write_once(writer, words, text, combine, expected)
                by_writer[writer].append(result)
                print(
                    f"  {writer:7} combine={combine!s:5} {result['elapsed_s']:.2f} s "
                    f"({result['words_per_s']:,.0f} words/s)",
                    flush=True,
                )
        feed_s = spread([r["elapsed_s"] for r in by_writer["feed"]])["median"]
        program_s = spread([r["elapsed_s"] for r in by_writer["program"]])["median"]
        assert feed_s is not None and program_s is not None
        modes["combine" if combine else "no_combine"] = {
            "runs": by_writer,
            "feed_words_per_s": spread([r["words_per_s"] for r in by_writer["feed"]]),
            "program_words_per_s": spread([r["words_per_s"] for r in by_writer["program"]]),
            "program_over_feed": feed_s / program_s,
        }
    return modes


def _time_calls(call: Callable[[], Any], until: Callable[[], bool]) -> list[float]:
    """Call ``call`` until ``until()`` holds; each call's latency in ms."""
    latencies_ms = []
    while not until():
        started = time.perf_counter()
        call()
        latencies_ms.append((time.perf_counter() - started) * 1000)
    return latencies_ms


def read_under_load(words: Sequence[str], rate: float, seconds: float) -> dict[str, Any]:
    """Steps 2 and 3 on a fresh cluster: ``get`` and ``get_many`` while a feeder emits at
    ``rate`` words/s for ``seconds``, then idle, then one full ``scan``."""
    import smr

    vocabulary = sorted(set(words))
    pick = random.Random(7)
    with (
        local_cluster(NODES, REPLICATION) as (cluster_dir, _spec),
        smr.connect(cluster_dir) as cluster,
        feeder_process(
            paced_feeder, str(cluster_dir), list(words), rate, seconds, LINGER_MS
        ) as feeder,
    ):
        _wait_for_feed(cluster)
        started = time.monotonic()
        half = started + seconds / 2
        get_loaded = _time_calls(
            lambda: cluster.get(pick.choice(vocabulary)), lambda: time.monotonic() > half
        )
        end = started + seconds - 0.5
        many_loaded = _time_calls(
            lambda: cluster.get_many(pick.sample(vocabulary, GET_MANY_KEYS)),
            lambda: time.monotonic() > end,
        )
        fed = feeder.result(timeout_s=seconds + 120)
        get_idle = _time_calls(lambda: cluster.get(pick.choice(vocabulary)), _after(2.0))
        many_idle = _time_calls(
            lambda: cluster.get_many(pick.sample(vocabulary, GET_MANY_KEYS)), _after(2.0)
        )
        scan_started = time.perf_counter()
        keys = sum(1 for _ in cluster.scan())
        scan_s = time.perf_counter() - scan_started
    return {
        "feed": fed,
        "get_loaded_ms": {**percentiles(get_loaded), "calls": len(get_loaded)},
        "get_many_loaded_ms": {**percentiles(many_loaded), "calls": len(many_loaded)},
        "get_idle_ms": {**percentiles(get_idle), "calls": len(get_idle)},
        "get_many_idle_ms": {**percentiles(many_idle), "calls": len(many_idle)},
        "scan": {"keys": keys, "elapsed_s": scan_s, "keys_per_s": keys / scan_s},
    }


def _wait_for_feed(cluster: Any, timeout_s: float = 60.0) -> None:
    """Return once the nodes have applied a first tuple of the feed (a spawned feeder takes
    a second to start): the loaded figures must not include idle time."""
    deadline = time.monotonic() + timeout_s
    while sum(row.get("tuples_applied", 0) for row in cluster.status()) == 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the feeder applied nothing within {timeout_s} s")
        time.sleep(0.05)


def _after(seconds: float) -> Callable[[], bool]:
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() > deadline


def summarise_reads(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and spread over runs of each read figure."""
    summary: dict[str, Any] = {}
    for name in ("get_loaded_ms", "get_idle_ms", "get_many_loaded_ms", "get_many_idle_ms"):
        summary[name] = {q: spread([r[name][q] for r in runs]) for q in ("p50", "p99")}
    summary["scan_keys_per_s"] = spread([r["scan"]["keys_per_s"] for r in runs])
    summary["feed_words_per_s"] = spread([r["feed"]["tuples_per_s"] for r in runs])
    return summary


def plot(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    figure, (writers, reads) = plt.subplots(1, 2, figsize=(11, 4.5))
    labels, values, colors = [], [], []
    for mode, entry in report["writers"].items():
        for writer, color in (("feed", "tab:gray"), ("program", "tab:blue")):
            labels.append(f"{'smr feed' if writer == 'feed' else 'emit_many'}\n{mode}")
            values.append(entry[f"{writer}_words_per_s"]["median"] / 1000)
            colors.append(color)
    writers.bar(range(len(values)), values, color=colors)
    writers.set_xticks(range(len(labels)), labels, fontsize=8)
    writers.set_ylabel("thousand words/s (process start to exit)")
    writers.set_title("Writing: smr feed vs a program's emit_many")
    summary = report["reads"]["summary"]
    labels, values = [], []
    for name, label in (
        ("get_loaded_ms", "get\nloaded"),
        ("get_idle_ms", "get\nidle"),
        ("get_many_loaded_ms", "get_many\nloaded"),
        ("get_many_idle_ms", "get_many\nidle"),
    ):
        for q in ("p50", "p99"):
            labels.append(f"{label}\n{q}")
            values.append(summary[name][q]["median"] or 0)
    reads.bar(range(len(values)), values, color="tab:green")
    reads.set_xticks(range(len(labels)), labels, fontsize=7)
    reads.set_yscale("log")
    reads.set_ylabel("latency (ms, log scale)")
    reads.set_title(
        f"get and get_many ({GET_MANY_KEYS} keys): during a feed at {LOAD_FRACTION:.0%} "
        "of peak, and idle",
        fontsize=10,
    )
    figure.suptitle("smr.connect on 3 local nodes, r=1")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=8.0, help="length of a loaded run")
    parser.add_argument("--out", type=Path, default=RESULTS / "client.json")
    args = parser.parse_args()

    words = load_words(args.words)
    with tempfile.TemporaryDirectory(prefix="smr-bench-client-") as workdir:
        text = Path(workdir) / "words.txt"
        write_words_text(words, text, WORDS_PER_LINE)
        print(f"writers ({len(words):,} words, {args.runs} runs each):", flush=True)
        writers = compare_writers(words, text, args.runs)
    for mode, entry in writers.items():
        print(f"{mode}: emit_many / smr feed = {entry['program_over_feed']:.2f}x", flush=True)
    peak = writers["no_combine"]["program_words_per_s"]["median"]
    rate = peak * LOAD_FRACTION
    read_runs = []
    for _ in range(args.runs):
        read_runs.append(read_under_load(words, rate, args.seconds))
        last = read_runs[-1]
        print(
            f"reads at {rate:,.0f} words/s: get p50 {last['get_loaded_ms']['p50']:.2f} ms "
            f"p99 {last['get_loaded_ms']['p99']:.2f} ms; get_many p50 "
            f"{last['get_many_loaded_ms']['p50']:.1f} ms; scan {last['scan']['keys_per_s']:,.0f}"
            " keys/s",
            flush=True,
        )
    report = {
        "benchmark": "client",
        "machine": machine(),
        "versions": versions(),
        "config": {
            "nodes": NODES,
            "replication": REPLICATION,
            "job": JOB,
            "words": len(words),
            "words_per_line": WORDS_PER_LINE,
            "runs": args.runs,
            "loaded_seconds": args.seconds,
            "load_fraction": LOAD_FRACTION,
            "load_words_per_s": rate,
            "get_many_keys": GET_MANY_KEYS,
            "linger_ms": LINGER_MS,
        },
        "how": {
            "writers": "wall time of a fresh process from start to exit on a fresh cluster: "
            "`smr feed FILE` against a program calling emit_many per line and flush",
            "reads": "per call, in this process, while a spawned feeder emits at the load "
            "rate (first half get, second half get_many), then 2 s idle each",
        },
        "writers": writers,
        "reads": {"runs": read_runs, "summary": summarise_reads(read_runs)},
    }
    write_report(report, args.out, plot)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn", force=True)
    main()
