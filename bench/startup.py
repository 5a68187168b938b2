"""Start-up time of the command line and of ``import smr``, against a baseline measured in
the same run.

The baseline is the source of another commit (``--baseline``, default: where this branch
left ``main``), taken out with ``git archive`` into a temporary directory; each variant runs
with its own tree first on ``PYTHONPATH``, in turns (baseline, this tree, baseline, ...), so
that both see the same load. Measured, each ``--repeat`` times:

- ``import smr``: ``python -c "import smr"``;
- ``smr --version``: ``python -m smr --version``;
- ``smr cluster up``: a cluster of 2 nodes (keys made, nodes started, every node
  answering a ping), then ``cluster down`` (not timed);
- ``smr query``: one key of that cluster, while it is up.

Each figure is the median wall time, with the median CPU time (user + system) of the
command and its children beside it: on a shared machine the wall time carries the others'
load, the CPU time does not. Targets: ``smr --version`` <= 0.2 s, ``import smr`` <= 0.15 s,
``cluster up`` of 2 nodes <= 1 s.

    python bench/startup.py [--repeat 7] [--baseline REV] [--out bench/results/startup.json]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine, source
from bench.harness import machine_around, pyplot, write_report

REPO = Path(__file__).resolve().parents[1]
TARGETS_S = {"import smr": 0.15, "smr --version": 0.2, "smr cluster up (2 nodes)": 1.0}
JOB = "examples.wordcount:job"


def run_timed(command: list[str], tree: Path, cwd: Path) -> tuple[float, float]:
    """Run ``command`` with ``tree`` first on the import path; its wall and CPU seconds.
    CalledProcessError, with its output, if it fails."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True)
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall_s, cpu_s


def measure_once(tree: Path, work: Path, dir_flag: str) -> dict[str, tuple[float, float]]:
    """One round of every figure for the source in ``tree``."""
    python = sys.executable
    cluster = work / "cluster"
    shutil.rmtree(cluster, ignore_errors=True)
    figures = {
        "import smr": run_timed([python, "-c", "import smr"], tree, tree),
        "smr --version": run_timed([python, "-m", "smr", "--version"], tree, tree),
    }
    up = [python, "-m", "smr", "cluster", "up", dir_flag, str(cluster), "--nodes", "2"]
    figures["smr cluster up (2 nodes)"] = run_timed([*up, "--job", JOB], tree, tree)
    try:
        query = [python, "-m", "smr", "query", "--cluster", str(cluster), "whale"]
        figures["smr query"] = run_timed(query, tree, tree)
    finally:
        down = [python, "-m", "smr", "cluster", "down", dir_flag, str(cluster)]
        subprocess.run(
            down,
            cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)},
            check=True,
            capture_output=True,
        )
    return figures


def baseline_tree(revision: str, into: Path) -> Path:
    """The source of ``revision``, written under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision], cwd=REPO, capture_output=True, check=True
    ).stdout
    tree = into / "baseline"
    tree.mkdir()
    archive_path = into / "baseline.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(tree, filter="data")
    return tree


def summary(rounds: list[dict[str, tuple[float, float]]]) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds of each figure over the rounds."""
    return {
        name: {
            "wall_s": round(statistics.median(r[name][0] for r in rounds), 3),
            "cpu_s": round(statistics.median(r[name][1] for r in rounds), 3),
        }
        for name in rounds[0]
    }


def plot(report: dict[str, Any], out: Path) -> None:
    plt = pyplot()
    names = list(report["this"])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.2
    for i, (variant, key, colour) in enumerate(
        (
            ("baseline", "wall_s", "#bbbbbb"),
            ("baseline", "cpu_s", "#888888"),
            ("this", "wall_s", "#6fa8dc"),
            ("this", "cpu_s", "#1f5f9f"),
        )
    ):
        values = [report[variant][name][key] for name in names]
        ax.bar(
            [x + (i - 1.5) * width for x in range(len(names))],
            values,
            width,
            label=f"{variant} ({key.removesuffix('_s')})",
            color=colour,
        )
    for x, name in enumerate(names):
        if name in TARGETS_S:
            ax.hlines(TARGETS_S[name], x - 0.45, x + 0.45, colors="red", linestyles="dashed")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("seconds (median)")
    ax.set_title("start-up: baseline and this tree, same run (red: target)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--baseline", default=None, help="a git revision [default: the merge-base with main]"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "startup.json")
    args = parser.parse_args()
    revision = (
        args.baseline
        or subprocess.run(
            ["git", "merge-base", "HEAD", "main"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    before = machine()
    with tempfile.TemporaryDirectory(prefix="smr-bench-startup-") as temporary:
        work = Path(temporary)
        baseline = baseline_tree(revision, work)
        rounds: dict[str, list[dict[str, tuple[float, float]]]] = {"baseline": [], "this": []}
        for i in range(args.repeat):
            # The baseline's cluster commands take --dir; this tree's take --cluster.
            rounds["baseline"].append(measure_once(baseline, work, "--dir"))
            rounds["this"].append(measure_once(REPO, work, "--cluster"))
            print(f"round {i + 1}/{args.repeat} done", file=sys.stderr)
    report: dict[str, Any] = {
        "benchmark": "startup",
        "baseline_revision": revision,
        "repeat": args.repeat,
        "baseline": summary(rounds["baseline"]),
        "this": summary(rounds["this"]),
        "targets_s": TARGETS_S,
        "machine": machine_around(before),
        "source": source(),
    }
    report["ratio_wall"] = {
        name: round(report["this"][name]["wall_s"] / report["baseline"][name]["wall_s"], 3)
        for name in report["this"]
    }
    report["ratio_cpu"] = {
        name: round(report["this"][name]["cpu_s"] / report["baseline"][name]["cpu_s"], 3)
        for name in report["this"]
    }
    write_report(report, args.out, plot)
    for name in report["this"]:
        b, t = report["baseline"][name], report["this"][name]
        target = f"  (target {TARGETS_S[name]} s)" if name in TARGETS_S else ""
        print(
            f"{name:26} baseline {b['wall_s']:.3f} s wall {b['cpu_s']:.3f} s cpu  ->  "
            f"this {t['wall_s']:.3f} s wall {t['cpu_s']:.3f} s cpu  "
            f"(x{report['ratio_wall'][name]} wall){target}"
        )


if __name__ == "__main__":
    main()
