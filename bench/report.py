"""Turn the benchmark results in ``bench/results/*.json`` into ``bench/RESULTS.md``: one table
per question (throughput, latency, recovery, state size), each figure a median of runs with
its min-max, each comparison a ratio measured in the same run.

A result file that is missing is named in the report as not run, never invented.
``bench/results/NOTES.md``, if present, is appended as written by whoever ran the benchmarks.

    python bench/report.py [--results bench/results] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report_format import fmt_machine, fmt_ms, fmt_n, fmt_ratio, fmt_spread
from bench.report_ops import (
    client_section,
    fuzz_section,
    hwm_growth_section,
    nexmark_section,
    output_table_section,
    restore_section,
    security_section,
    soak_faults_section,
    startup_section,
)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def _load(results: Path, name: str) -> dict[str, Any] | None:
    path = results / f"{name}.json"
    if not path.exists():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def throughput_section(report: dict[str, Any] | None) -> list[str]:
    lines = ["## Throughput", ""]
    if report is None:
        return [*lines, "Not run (`python bench/spark_throughput.py`).", ""]
    config = report["config"]
    lines += [
        f"Word count over the same {config['words']:,} words of book text in {config['files']} "
        f"files ({config['files_per_trigger']} files per Spark micro-batch), 3 smr nodes, "
        f"Spark on {config['spark_master']}; input words per second, median of "
        f"{config['runs']} runs (min-max); ratio to baseline (a), Spark's native aggregation "
        "at its best micro-batch size in the same run (marked a*). `fast` is the word count "
        "written with `map_batch` and the built-in count (`examples.wordcount:fast`). "
        f"The Python-state baselines ran their first "
        f"{config['python_state_batches']} batches only (they are slow). Every run's counts were "
        "checked against plain Python. "
        f"Machine: {fmt_machine(report)}.",
        "",
        "| configuration | words/s | ratio to (a) | counts exact |",
        "|---|---|---|---|",
    ]
    names = {
        "spark-native": "(a) Spark `groupBy(word).count()`, RocksDB",
        "spark-pandas_state": "(b) Spark `applyInPandasWithState`",
        "spark-tws_pandas": "(b) Spark `transformWithStateInPandas`",
    }
    for label, row in report["summary"].items():
        name = names.get(label) or label.replace("smr-python", "smr, Python feeder,").replace(
            "smr-spark", "smr, Spark feeder,"
        )
        if label.startswith("spark-native "):
            marker = "(a*)" if row.get("baseline") else "(a)"
            name = f"{marker} Spark `groupBy(word).count()`, RocksDB, {label.split(' ', 1)[1]}"
        lines.append(
            f"| {name} | {fmt_spread(row['words_per_s'])} | {fmt_ratio(row['ratio_to_native'])} | "
            f"{'yes' if row['exact'] else 'NO'} |"
        )
    return [*lines, ""]


def batch_size_section(report: dict[str, Any] | None) -> list[str]:
    """smr's Spark feeder and Spark's native count at the same micro-batch sizes
    (``bench/spark_batch_size.py``)."""
    lines = ["## Throughput against micro-batch size", ""]
    if report is None:
        return [*lines, "Not run (`python bench/spark_batch_size.py`).", ""]
    config = report["config"]
    lines += [
        f"The same {config['words']:,} words in {config['files']} files, read a number of "
        "files per micro-batch, by smr's Spark feeder (the fast word count, "
        f"`{config['job']}`, into 3 nodes at r = {config['replication']}) and by Spark's "
        f"native `groupBy(word).count()` on RocksDB, round-robin in one session on "
        f"{config['spark_master']}; input words per second, median of {config['runs']} runs "
        f"(min-max); counts checked. Machine: {fmt_machine(report)}.",
        "",
        "| words per micro-batch | smr, Spark feeder | Spark native | smr / native | exact |",
        "|---|---|---|---|---|",
    ]
    for size, row in report["sizes"].items():
        exact = row["smr"]["exact"] and row["native"]["exact"]
        lines.append(
            f"| {int(size):,} | {fmt_spread(row['smr']['words_per_s'])} | "
            f"{fmt_spread(row['native']['words_per_s'])} | {fmt_ratio(row['ratio'])} | "
            f"{'yes' if exact else 'NO'} |"
        )
    best = report["best"]
    lines += [
        "",
        f"Best of each: smr {fmt_n(best['smr'])} words/s, Spark native {fmt_n(best['native'])} "
        f"words/s: {fmt_ratio(best['ratio'])}.",
    ]
    return [*lines, ""]


def node_apply_section(report: dict[str, Any] | None) -> list[str]:
    """The node's apply against a bare dict loop, and the engine against the raw transport
    (``bench/throughput.py``)."""
    lines = ["## Node apply and transport", ""]
    if report is None or "node_apply" not in report:
        return [*lines, "Not run (`python bench/throughput.py`).", ""]
    lines += [
        "In one process, the same batch bodies (1000 rows of the books' words, raw, or folded "
        "per batch as the aggregators' partials are) decoded and applied as a node does, "
        "against a bare Python dict loop that decodes the same bodies and adds the same "
        f"counts; best of {report['node_apply']['raw batches']['rounds']} interleaved rounds, "
        "counts checked (reading the engine's counts back for the check is not timed). "
        "Then the engine (1 node, a feeder process, every tuple acked) against "
        "the raw pyzmq + msgpack ceiling between two processes, medians of "
        f"{report['runs_per_configuration']} runs. Machine: {fmt_machine(report)}.",
        "",
        "| batches | apply | tuples/s | ratio to the bare loop |",
        "|---|---|---|---|",
    ]
    for batches, run in report["node_apply"].items():
        for way, figures in run["ways"].items():
            lines.append(
                f"| {batches} | {way} | {fmt_n(figures['tuples_per_s'])} | "
                f"{fmt_ratio(figures['ratio_to_bare_loop'])} |"
            )
    lines += ["", "| configuration | tuples/s | ratio to raw at its batch size |", "|---|---|---|"]
    configurations = report["configurations"]
    for name, summary in configurations.items():
        batch = name.split("batch ")[1].split()[0]
        raw = configurations.get(f"raw batch {batch}", {}).get("median_tuples_per_s")
        median = summary["median_tuples_per_s"]
        lines.append(f"| {name} | {fmt_n(median)} | {fmt_ratio(median / raw if raw else None)} |")
    return [*lines, ""]


def latency_section(report: dict[str, Any] | None) -> list[str]:
    lines = ["## Latency", ""]
    if report is None:
        return [*lines, "Not run (`python bench/latency.py`).", ""]
    config, how = report["config"], report["how"]
    lines += [
        f"smr: {config['nodes']} nodes, r = {config['replication']}, batches of "
        f"{config['batch_size']}, open batches sent {config['linger_ms']:.0f} ms after their "
        "first tuple (the emitter's `linger_ms`); "
        f"{how['smr']}. Spark: {how['spark']}. Both fed the same words per second, "
        f"{config['seconds']:.0f} s per run, medians of {config['runs']} runs (min-max). "
        f"smr's measured peak in this run: {fmt_n(report['peak']['words_per_s'])} words/s. "
        f"Machine: {fmt_machine(report)}.",
        "",
        "| rate | system | p50 | p95 | p99 | max | p99 ratio (Spark/smr) |",
        "|---|---|---|---|---|---|---|",
    ]
    for level in report["levels"]:
        rate = f"{level['fraction']:.0%} of peak ({fmt_n(level['rate_words_per_s'])}/s)"
        smr = level["smr"]["summary"]
        spark = level.get("spark", {}).get("summary")
        ratio = None
        if spark and spark["p99"]["median"] and smr["p99"]["median"]:
            ratio = spark["p99"]["median"] / smr["p99"]["median"]
        for system, summary in (("smr", smr), ("Spark (a)", spark)):
            if summary is None:
                continue
            cells = " | ".join(fmt_spread(summary[q], " ms") for q in ("p50", "p95", "p99", "max"))
            lines.append(
                f"| {rate} | {system} | {cells} | {fmt_ratio(ratio) if system == 'smr' else ''} |"
            )
    return [*lines, ""]


def recovery_sections(report: dict[str, Any] | None) -> list[str]:
    lines = ["## Recovery", ""]
    if report is None:
        return [
            *lines,
            "Not run (`python bench/spark_recovery.py`).",
            "",
            "## State size",
            "",
            "Not run.",
            "",
        ]
    how = report["how"]
    config = report["config"]
    smr_rows = report["smr"]["summary"]
    spark_rows = report["spark"].get("summary", [])
    middle = config["keys"][len(config["keys"]) // 2]
    lines += [
        f"Time from a failure to processing again, {fmt_n(middle)} keys of state, words fed at "
        f"{fmt_n(config['rate'])}/s, medians of {config['runs']} runs (min-max). "
        f"smr: {how['smr']}; "
        "the time until the feed's acked rate is back at 90% is shown too. Spark: "
        f"{how['spark'] or 'not run'} Machine: {fmt_machine(report)}.",
        "",
        "| failure | failure to processing again | feed back at 90% | counts exact |",
        "|---|---|---|---|",
    ]
    for row in smr_rows:
        if row["preload_keys"] != middle:
            continue
        lines.append(
            f"| smr: SIGKILL of {row['k']} node{'s' if row['k'] > 1 else ''}, r = 1 | "
            f"{fmt_spread(row['kill_to_takeover_done_ms'], ' ms')} | "
            f"{fmt_spread(row['recovered_90_ms'], ' ms')} | "
            f"{row['exact']}/{row['failures'] + row['errors']} |"
        )
    for row in spark_rows:
        if row["keys_n"] != middle:
            continue
        lines.append(
            "| Spark: SIGKILL of the driver, restart from the checkpoint | "
            f"{fmt_spread(row['kill_to_commit_s'], ' ms', 1000)} | - | "
            f"{row['exact']}/{row['runs']} |"
        )
    lines += ["", "## State size", ""]
    lines += [
        "Failure to processing again against the keys of state: smr with one node killed "
        "(r = 1), Spark with its driver killed and restarted; ratio = Spark's median over "
        "smr's.",
        "",
        "| keys | smr | Spark | Spark / smr |",
        "|---|---|---|---|",
    ]
    for ratio in report["ratios"]:
        smr_row = next(
            (r for r in smr_rows if r["k"] == 1 and r["preload_keys"] == ratio["keys_n"]), None
        )
        spark_row = next((r for r in spark_rows if r["keys_n"] == ratio["keys_n"]), None)
        lines.append(
            f"| {ratio['keys_n']:,} | "
            f"{fmt_spread(smr_row['kill_to_takeover_done_ms'], ' ms') if smr_row else '-'} | "
            f"{fmt_spread(spark_row['kill_to_commit_s'], ' ms', 1000) if spark_row else '-'} | "
            f"{fmt_ratio(ratio['spark_over_smr'])} |"
        )
    return [*lines, ""]


def rebalance_section(report: dict[str, Any] | None) -> list[str]:
    lines = ["## Rebalance", ""]
    if report is None:
        return [*lines, "Not run (`python bench/rebalance.py`).", ""]
    lines += [
        f"A move of half a node's load, a join beside the busiest node and a leave, on "
        f"{report['nodes']} nodes at r = {report['replication']} fed at "
        f"{fmt_n(report['rate_tuples_per_s'])} tuples/s; request to serving, with how long the "
        "moving slots were refused in brackets; the slots that did not move: their p99 ack "
        "latency during the operation against the 2 s before, and their longest wait; the "
        f"longest run of 50 ms samples without an ack. One run per size. Machine: "
        f"{fmt_machine(report)}.",
        "",
        "| keys | operation | request to serving | unmoved p99 before, during | longest wait |"
        " stall | giver sent | counts exact |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        for name in ("move", "join", "leave"):
            op = run[name]
            lines.append(
                f"| {run['keys']:,} | {name} | {fmt_ms(op['total_ms'])} "
                f"({fmt_ms(op['frozen_ms'])}) | "
                f"{fmt_ms(op['p99_unmoved_before_ms'])}, {fmt_ms(op['p99_unmoved_during_ms'])} "
                f"({fmt_ratio(op['p99_ratio'])}) | {fmt_ms(op['max_other_during_ms'])} | "
                f"{fmt_ms(op['stall_ms'])} | {fmt_n(op['peer_bytes_sent'] / 1e6, ' MB')} | "
                f"{'yes' if run['exact']['exact'] else 'NO'} |"
            )
    return [*lines, ""]


def autoscale_section(report: dict[str, Any] | None) -> list[str]:
    lines = ["## Autoscaling (ring model)", ""]
    if report is None:
        return [*lines, "Not run (`python bench/autoscale.py`).", ""]
    lines += [
        f"Each load pattern of `bench/loads.py` over {report['duration_s']:.0f} s of trace "
        f"on the ring model (`smr/autoscale/model.py`: nodes of "
        f"{fmt_n(report['capacity_per_node'])} tuples/s, joins serving 2 s after the decision; "
        f"the peak needs {report['peak_nodes']} nodes at 90%); node-seconds against static "
        "peak provisioning, the share of 10 s intervals where applied/offered is outside "
        "1 ± 0.05 (chi), the queueing delay (p95 and maximum, rescales included), and the "
        "scale actions. `oracle` knows the next second's load and joins at once.",
        "",
        "| pattern | policy | node-seconds | chi | delay p95 | delay max | actions |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        delay = run["delay_s"]
        lines.append(
            f"| {run['pattern']} | {run['policy']} | {run['node_seconds_ratio']:.2f} | "
            f"{run['chi']:.2f} | {delay['p95']:.1f} s | {delay['max']:.1f} s | {run['actions']} |"
        )
    return [*lines, ""]


def autoscale_live_section(
    report: dict[str, Any] | None,
    title: str = "Autoscaling (live)",
    command: str = "python bench/autoscale_live.py",
) -> list[str]:
    lines = [f"## {title}", ""]
    if report is None:
        return [*lines, f"Not run (`{command}`).", ""]
    lines += [
        f"Each pattern for {report['duration_s']:.0f} s on real node processes capped at "
        f"{fmt_n(report['cap_per_node'])} tuples/s each (r = 1; the peak needs "
        f"{report['peak_nodes']} nodes at 90%; a policy may run two more while it catches "
        "up), the controller polling every second, against static peak provisioning"
        + (
            " and an oracle (it knows the next 3 s of load and the cap, and runs the fewest "
            "nodes that serve it at 90%)"
            if any(run["policy"] == "oracle" for run in report["runs"])
            else ""
        )
        + " in the same run. The feeder is open-loop: what backpressure "
        "holds back waits at the source and counts. It writes its rate and lag for the "
        "controller (`source.json`)"
        + (
            ", except for `capacity-nodes-only`, which sees only the nodes' figures"
            if any(run["policy"].endswith("-nodes-only") for run in report["runs"])
            else ""
        )
        + ". Node-seconds over static's; ack latency from when a tuple was due (rescales "
        "included); the source's worst lag; chi (10 s intervals where acked/offered is "
        "outside 1 ± 0.05); actions: the scale decisions carried out (the nodes added or "
        f"released, in brackets); exactness. Machine: {fmt_machine(report)}.",
        "",
        "| pattern | policy | node-seconds | vs oracle | latency p50 | p95 | max | source lag "
        "max | chi | actions | exact |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        latency = run["latency_ms"]
        lag = run.get("source_lag_s_max")
        failed = run["actions_failed"]
        actions = str(run["actions"])
        if run.get("node_actions"):
            actions += f" ({run['node_actions']}{f', {failed} failed' if failed else ''})"
        elif failed:
            actions += f" ({failed} failed)"
        oracle = next(
            (
                other
                for other in report["runs"]
                if other["pattern"] == run["pattern"] and other["policy"] == "oracle"
            ),
            None,
        )
        versus = f"{run['node_seconds'] / oracle['node_seconds']:.2f}" if oracle else "-"
        lines.append(
            f"| {run['pattern']} | {run['policy']} | {run['node_seconds_ratio']:.2f} | "
            f"{versus} | {fmt_ms(latency['p50'])} | {fmt_ms(latency['p95'])} | "
            f"{fmt_ms(latency['max'])} | "
            f"{'-' if lag is None else f'{lag:.1f} s'} | {run['chi']:.2f} | "
            f"{actions} | "
            f"{'yes' if run['exact']['exact'] else 'NO'} |"
        )
    kills = [run for run in report["runs"] if run.get("kill")]
    if kills:
        lines += [
            "",
            "A `+kill` run SIGKILLs its busiest serving node 10 s after the load first "
            "reaches its peak (halfway through the peak if it is shorter). Caught up: from "
            "then on, for 5 s, no tuple due waited over 1 s; the target is the capacity "
            "policy's recovery time, which its ring headroom rule is meant to keep (5 s).",
            "",
            "| pattern | policy | node killed | at | caught up after | target | worst latency "
            "until then |",
            "|---|---|---|---|---|---|---|",
        ]
        for run in kills:
            kill = run["kill"]
            if not kill["killed"]:
                lines.append(f"| {run['pattern']} | {run['policy']} | none | | | | |")
                continue
            took = kill["caught_up_after_s"]
            lines.append(
                f"| {run['pattern']} | {run['policy']} | {kill['node']} ("
                f"{fmt_n(kill['its_tuples_per_s'])}/s) | {kill['at_s']:.0f} s | "
                f"{'not in the run' if took is None else f'{took:.1f} s'} | "
                f"{kill['recovery_target_s']:.0f} s | "
                f"{fmt_ms(kill['latency_max_ms_until_caught_up'])} |"
            )
    return [*lines, ""]


def render(results: Path) -> str:
    """The whole report, from whatever result files exist under ``results``."""
    lines = [
        "# Benchmark results",
        "",
        "Written by `bench/report.py` from the JSON in `bench/results/` (each file also records "
        "every run, the machine and the versions; a PNG plot sits beside each). The machine is "
        "a shared 2-core VM, so only ratios measured in one run are compared.",
        "",
    ]
    lines += throughput_section(_load(results, "spark_throughput"))
    lines += batch_size_section(_load(results, "spark_batch_size"))
    lines += node_apply_section(_load(results, "throughput"))
    lines += latency_section(_load(results, "latency"))
    lines += client_section(_load(results, "client"))
    lines += security_section(_load(results, "security"))
    lines += fuzz_section(_load(results, "fuzz_decoders"))
    lines += recovery_sections(_load(results, "spark_recovery"))
    lines += rebalance_section(_load(results, "rebalance"))
    lines += soak_faults_section(_load(results, "soak_faults"))
    lines += hwm_growth_section(_load(results, "hwm_growth"))
    lines += restore_section(_load(results, "restore"))
    lines += output_table_section(_load(results, "output_table"))
    lines += nexmark_section(_load(results, "nexmark"))
    lines += startup_section(_load(results, "startup"))
    lines += autoscale_section(_load(results, "autoscale_model"))
    lines += autoscale_live_section(_load(results, "autoscale_live"))
    lines += autoscale_live_section(
        _load(results, "autoscale_live_kill"),
        "Autoscaling (live): a node killed at peak",
        "python bench/autoscale_live.py --policies static+kill,capacity+kill "
        "--out bench/results/autoscale_live_kill.json",
    )
    notes = results / "NOTES.md"
    if notes.exists():
        # What the JSON cannot say: what else ran on the machine during a run, and so on.
        lines += ["## Notes on these runs", "", notes.read_text().strip(), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args()
    args.out.write_text(render(args.results))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
