"""False deaths: live nodes declared dead when a reduce call is slow or the CPU is starved.

Each case runs a local cluster of ``--nodes`` nodes at replication 1 and feeds it
``--words`` words of the books as fast as it takes them, ``--runs`` times:

- ``baseline``: the word count, nothing else running;
- ``slow reduce``: a word count whose reduce takes ``SLOW_CALL_S`` (3 s) once per node
  process, far past the 700 ms after which a silent node is declared dead;
- ``cpu load``: the word count while twice as many busy processes as cores spin.

A node declared dead while alive shows as a takeover of a node that is still running (no
node is killed here, so every takeover is a false death) and as a fenced node. Reported per
run: takeovers, fenced nodes, whether the dumped counts equal plain Python's, feed seconds
(``bench/results/false_deaths.json`` and ``false_deaths.png``).

    python bench/false_deaths.py [--runs 3] [--nodes 4] [--words 200000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import RESULTS, check_counts, load_words, machine, versions  # noqa: E402
from bench.harness import (  # noqa: E402
    cluster_emitter,
    cluster_statuses,
    dump_counts,
    local_cluster,
    pyplot,
    run_feeder,
    stop_process,
    write_report,
)
from examples.wordcount import count, split_words  # noqa: E402
from smr import Job  # noqa: E402

SLOW_CALL_S = 3.0
SLOW_WORD = "the"
_slow_call_done = False


def _count_with_one_slow_call(word: str, n: int, state: dict[str, Any], emit: Any) -> None:
    global _slow_call_done
    if word == SLOW_WORD and not _slow_call_done:
        _slow_call_done = True
        until = time.monotonic() + SLOW_CALL_S
        while time.monotonic() < until:  # pure-Python work, as user code is
            sum(range(1000))
    count(word, n, state, emit)


slow_job = Job("one-slow-call", map=split_words, reduce=_count_with_one_slow_call)

CASES: dict[str, tuple[str, int]] = {
    # name: (job, busy processes per core)
    "baseline": ("examples.wordcount:job", 0),
    "slow reduce": ("bench.false_deaths:slow_job", 0),
    "cpu load": ("examples.wordcount:job", 2),
}


def _spin(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


def _feeder(cluster_dir: str, words: list[str], results: Any) -> None:
    emitter = cluster_emitter(cluster_dir, f"false-deaths-{os.getpid()}")
    started = time.monotonic()
    for word in words:
        emitter.emit(word, 1)
    emitter.close()
    results.put({"tuples": len(words), "seconds": time.monotonic() - started})


def run_case(job: str, burners_per_core: int, nodes: int, words: list[str]) -> dict[str, Any]:
    """One run: cluster up, burners on, feed, burners off, read takeovers and the dump."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    burners = [
        context.Process(target=_spin, args=(stop,))
        for _ in range(burners_per_core * (os.cpu_count() or 1))
    ]
    with local_cluster(nodes, 1, job=job) as (cluster_dir, spec):
        for burner in burners:
            burner.start()
        try:
            fed = run_feeder(_feeder, str(cluster_dir), words, timeout_s=600)
        finally:
            stop.set()
            for burner in burners:
                stop_process(burner)
        time.sleep(1.0)
        statuses = cluster_statuses(spec)
        counts = check_counts(dump_counts([n.addr for n in spec.nodes]), _oracle(words))
    return {
        "takeovers": sum(row["takeovers"] for row in statuses.values()),
        "fenced": sum(row["fenced"] for row in statuses.values()),
        "exact": counts["exact"],
        "feed_s": round(fed["seconds"], 2),
    }


def _oracle(words: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    return counts


def plot(report: dict[str, Any], path: Path) -> None:
    """False deaths (takeovers of live nodes) per run, by case."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(6, 3.5))
    names = list(report["cases"])
    totals = [sum(run["takeovers"] for run in report["cases"][n]["runs"]) for n in names]
    axes.bar(names, totals, color="tab:red")
    axes.set_ylabel(f"false deaths over {report['runs']} runs")
    axes.set_title(f"{report['nodes_count']} nodes, r=1, {report['words']:,} words per run")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--words", type=int, default=200_000)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    parser.add_argument("--out", type=Path, default=RESULTS / "false_deaths.json")
    args = parser.parse_args()
    words = load_words(args.words)
    before = machine()
    cases: dict[str, Any] = {}
    for name in args.cases.split(","):
        job, burners_per_core = CASES[name]
        runs = [run_case(job, burners_per_core, args.nodes, words) for _ in range(args.runs)]
        cases[name] = {"job": job, "busy_processes_per_core": burners_per_core, "runs": runs}
        print(
            f"{name:12} false deaths {[r['takeovers'] for r in runs]}  fenced "
            f"{[r['fenced'] for r in runs]}  exact {sum(r['exact'] for r in runs)}/{len(runs)}"
            f"  feed s {[r['feed_s'] for r in runs]}",
            flush=True,
        )
    report = {
        "benchmark": "false_deaths",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**machine(), "loadavg_before": before["loadavg"]},
        "versions": versions(),
        "runs": args.runs,
        "nodes_count": args.nodes,
        "words": args.words,
        "cases": cases,
    }
    write_report(report, args.out, plot)
    print(f"results in {args.out}")


if __name__ == "__main__":
    main()
