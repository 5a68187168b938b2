"""Recovery against Spark: time from a failure to processing again, and how it grows with the
state, for smr and for Spark Structured Streaming, measured in one run.

- **smr** (``bench/recovery.py``'s ``run_failure``): 5 nodes (6 for k = 3), ``r = 1``, a
  steady word feed at ``--rate``, ``P`` preloaded distinct keys; SIGKILL of k = 1, 2, 3
  non-adjacent nodes at once. Processing again = the last victim's takeover done (detection
  plus promotion of the replica and replay of the backed-up tuples); the time until the
  feed's acked rate is back at 90% is kept too.
- **Spark** (``bench/spark_driver_kill.py``'s ``recovery_benchmark``): the native word count on
  RocksDB in a driver process of its own, the same number of preloaded keys, book text
  dripped at ``--rate``; SIGKILL of the driver's process group (driver, JVM, Python
  workers), an immediate restart of the query from its checkpoint. Processing again = the
  first batch committed after the kill.
- **State size**: both at k = 1 for every ``--keys`` value (10^4 .. 10^6 by default).

Every run's final counts are checked. Medians of ``--runs`` runs with min-max; the ratio is
Spark's median over smr's at the same number of keys. JSON in
``bench/results/spark_recovery.json``, plot beside it.

    python bench/spark_recovery.py [--runs 3] [--keys 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import recovery, spark_driver_kill, spark_queries
from bench.common import RESULTS, load_words, machine, versions
from bench.harness import pyplot, write_report
from bench.recovery_analysis import format_ms, summarise

NODES_MIN = 5
WARMUP_S = 3.0
POST_S = 3.0


def smr_failures(
    words: list[str], keys: list[int], victims: list[int], rate: float, runs: int
) -> list[dict[str, Any]]:
    """smr failures, round-robin: k = 1 at every state size, k > 1 at the middle one."""
    middle = keys[len(keys) // 2]
    plan = [(1, n) for n in keys] + [(k, middle) for k in victims if k != 1]
    failures = []
    for run in range(runs):
        for k, keys_n in plan:
            case = recovery.Case(k, 1, adjacent=False)
            try:
                failure = recovery.run_failure(
                    words, case, NODES_MIN, keys_n, rate, WARMUP_S, POST_S
                )
            except Exception as error:  # recorded; the other runs still count
                failures.append({"run": run, "k": k, "preload_keys": keys_n, "error": repr(error)})
                print(f"smr run {run} k={k} {keys_n:,} keys: {error!r}", flush=True)
                continue
            failure.update(run=run, preload_keys=keys_n)
            failures.append(failure)
            print(
                f"smr run {run} k={k} {keys_n:,} keys: takeover done "
                f"{format_ms(failure['kill_to_takeover_done_ms'])}, exact {failure['exact']}",
                flush=True,
            )
    return failures


def summarise_smr(failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``bench.recovery_analysis.summarise`` over the failures that ran, each row also counting the
    runs of its (k, keys) that ended in an error instead."""
    rows = summarise([f for f in failures if "error" not in f])
    for row in rows:
        row["errors"] = sum(
            1
            for f in failures
            if "error" in f and (f["k"], f["preload_keys"]) == (row["k"], row["preload_keys"])
        )
    return rows


def ratios(
    smr_rows: list[dict[str, Any]], spark_rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per state size: smr's kill-to-takeover-done median (k = 1), Spark's kill-to-commit
    median, and Spark's over smr's."""
    smr_ms = {
        r["preload_keys"]: r["kill_to_takeover_done_ms"]["median"] for r in smr_rows if r["k"] == 1
    }
    spark_ms = {
        r["keys_n"]: r["kill_to_commit_s"]["median"] * 1000
        for r in spark_rows
        if r["kill_to_commit_s"]["median"] is not None
    }
    out = []
    for keys_n in sorted(smr_ms.keys() | spark_ms.keys()):
        mine, theirs = smr_ms.get(keys_n), spark_ms.get(keys_n)
        out.append(
            {
                "keys_n": keys_n,
                "smr_ms": mine,
                "spark_ms": theirs,
                "spark_over_smr": theirs / mine if mine and theirs else None,
            }
        )
    return out


def plot(report: dict[str, Any], path: Path) -> None:
    plt = pyplot()
    rows = report["ratios"]
    if not rows:
        return
    figure, axis = plt.subplots(figsize=(7, 4.5))
    keys = [r["keys_n"] for r in rows]
    axis.plot(keys, [r["smr_ms"] or float("nan") for r in rows], "o-", label="smr, k=1, r=1")
    axis.plot(keys, [r["spark_ms"] or float("nan") for r in rows], "s-", label="Spark restart")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("keys of state")
    axis.set_ylabel("failure to processing again (ms, median)")
    axis.set_title("Recovery vs state size: smr takeover vs Spark driver restart")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keys", default="10000,100000,1000000")
    parser.add_argument("--victims", default="1,2,3", help="k values for smr")
    parser.add_argument("--rate", type=float, default=10_000, help="words/s fed to both")
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "spark_recovery.json")
    args = parser.parse_args()
    keys = [int(k) for k in args.keys.split(",")]
    victims = [int(k) for k in args.victims.split(",")]
    started = time.monotonic()
    machine_before = machine()
    failures = smr_failures(load_words(1_000_000), keys, victims, args.rate, args.runs)
    smr_rows = summarise_smr(failures)
    spark: dict[str, Any] = {"summary": []}
    if not args.skip_spark:
        spark = spark_driver_kill.recovery_benchmark(
            cases=(("native", "rocksdb"),), keys=keys, runs=args.runs, words_per_s=args.rate
        )
    report = {
        "benchmark": "spark_recovery",
        "machine": {**machine_before, "loadavg_after": machine()["loadavg"]},
        "versions": {**versions(), **spark_queries.spark_versions()},
        "config": {"runs": args.runs, "keys": keys, "victims": victims, "rate": args.rate},
        "how": {
            "smr": "kill -> the last victim's takeover done (bench/recovery.py), r=1, "
            "victims apart",
            "spark": spark.get("how"),
        },
        "smr": {"summary": smr_rows, "failures": failures},
        "spark": spark,
        "ratios": ratios(smr_rows, spark["summary"]),
        "elapsed_s": time.monotonic() - started,
    }
    write_report(report, args.out, plot, json_default=str)
    for row in report["ratios"]:
        print(row)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
