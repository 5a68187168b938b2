"""Autoscaling policies against static peak provisioning, over the load patterns of
``bench/loads.py``, on the ring model of ``smr.autoscale.model`` (the long-horizon version:
hours of trace in seconds, deterministic).

The model's nodes apply ``--capacity`` tuples/s each (the hottest node gets ``--hot-factor``
times the mean share), a join serves 2 s after the decision, the workload of each pattern
runs from a fifth of the peak to the peak, and the peak needs ``--peak-nodes`` nodes at 90%.
Per pattern and policy (``thresholds``, ``target-util``, ``capacity``, and ``capacity``
without its ring-headroom rule, to show what the rule costs), for static peak provisioning
(the peak's nodes throughout) and for an oracle (the nodes the next second's load needs,
joining at once: the least any policy could use), it reports:

- ``node_seconds_ratio``: node-seconds over static peak provisioning's;
- ``omega``: per 10 s interval, tuples applied over tuples offered; ``chi``: the share of
  intervals where omega is outside 1 ± 0.05 (a backlog drained counts above 1);
- ``delay_s``: the queueing delay a tuple would see (backlog over applied rate), mean,
  p95 and maximum over the run (rescales included);
- ``actions``: scale actions; ``capacity_error``: the capacity policy's estimate of a node's
  capacity against the model's, at the end; ``forecast_wape``: its forecast's recent error.

    python bench/autoscale.py [--duration-s 3600] [--capacity 1000] [--peak-nodes 8]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Final

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import RESULTS, machine, percentile, versions  # noqa: E402
from bench.harness import pyplot, write_report  # noqa: E402
from bench.loads import available, build  # noqa: E402
from smr.autoscale.capacity import CapacityConfig, CapacityMemory  # noqa: E402
from smr.autoscale.model import ModelRing  # noqa: E402
from smr.autoscale.policies import POLICIES, PolicyRunner  # noqa: E402

OUT = RESULTS / "autoscale_model.json"
INTERVAL_S: Final = 10
UTILIZATION_PLANNED: Final = 0.9
OMEGA_TOLERANCE: Final = 0.05
# The capacity policy without its ring-headroom rule: what the rule costs in node-seconds.
NO_HEADROOM: Final = "capacity-no-headroom"


def runner_policy(policy: str) -> bool:
    """Whether ``policy`` is a policy the controller runs (not a reference line)."""
    return policy in POLICIES or policy == NO_HEADROOM


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=3600.0)
    parser.add_argument("--capacity", type=float, default=1000.0, help="tuples/s a node")
    parser.add_argument("--peak-nodes", type=int, default=8)
    parser.add_argument("--hot-factor", type=float, default=1.0)
    args = parser.parse_args(argv)
    peak = args.peak_nodes * args.capacity * UTILIZATION_PLANNED
    runs = []
    skipped = {}
    for pattern, reason in available().items():
        if reason is not None:
            skipped[pattern] = reason
            continue
        schedule = build(pattern, args.duration_s, peak)
        for policy in ["static", "oracle", *sorted(POLICIES), NO_HEADROOM]:
            runs.append(run(schedule, policy, args))
    add_ratios_to_static(runs)
    report = {
        "benchmark": "autoscale (ring model)",
        "duration_s": args.duration_s,
        "capacity_per_node": args.capacity,
        "peak_nodes": args.peak_nodes,
        "hot_factor": args.hot_factor,
        "runs": runs,
        "patterns_not_run": skipped,
        "machine": machine(),
        "versions": versions(),
    }
    write_report(report, OUT, plot)
    print(f"{'pattern':>12} {'policy':>12} {'node-s':>7} {'chi':>6} {'p95 s':>6} {'max s':>6} acts")
    for entry in runs:
        delay = entry["delay_s"]
        print(
            f"{entry['pattern']:>12} {entry['policy']:>12} {entry['node_seconds_ratio']:>7.2f} "
            f"{entry['chi']:>6.2f} {delay['p95']:>6.2f} {delay['max']:>6.2f} {entry['actions']}"
        )
    print(f"wrote {OUT} and {OUT.with_suffix('.png')}")


def add_ratios_to_static(runs: list[dict[str, Any]]) -> None:
    """Set each run's ``node_seconds_ratio``: its node-seconds over the static run's of the
    same pattern (of ``static+X`` for a run ``P+X``: the same event without a policy)."""
    for entry in runs:
        event = entry["policy"].partition("+")[2]
        baseline = f"static+{event}" if event else "static"
        static = next(
            (r for r in runs if r["pattern"] == entry["pattern"] and r["policy"] == baseline),
            None,
        )
        if static is None:
            raise SystemExit(f"no {baseline} run of {entry['pattern']} to compare with: run it")
        entry["node_seconds_ratio"] = round(entry["node_seconds"] / static["node_seconds"], 3)


def run(schedule: Any, policy: str, args: argparse.Namespace) -> dict[str, Any]:
    """One pattern under one policy (or ``static``) on the model."""
    peak_nodes = args.peak_nodes
    nodes_min = 2 if runner_policy(policy) else 1
    ring = ModelRing(args.capacity, nodes_min, peak_nodes, hot_factor=args.hot_factor)
    ring.start(peak_nodes if policy == "static" else nodes_min, 0.0)
    runner = None
    if policy == NO_HEADROOM:
        runner = PolicyRunner("capacity", CapacityConfig(recovery_target_s=None))
    elif policy in POLICIES:
        runner = PolicyRunner(policy)
    counts: list[int] = []
    delays: list[float] = []
    omegas: list[float] = []
    actions = 0
    offered = applied = 0.0
    for second in range(int(schedule.duration_s)):
        now = float(second)
        offered_before, applied_before = ring.offered_total, ring.applied_total
        seen = ring.step(now, schedule.rate_at(now))
        if runner is not None:
            decision = runner.step(seen)
            if decision.changes(len(seen.nodes)):
                ring.apply(decision, now)
                actions += 1
        elif policy == "oracle":
            # Knows the next second's load and joins at once: the least any policy could use.
            wanted = math.ceil(schedule.rate_at(now + 1) / (args.capacity * UTILIZATION_PLANNED))
            ring.nodes = ring.nodes[: max(1, wanted)]
            if len(ring.nodes) < wanted:
                ring.start(wanted - len(ring.nodes), now)
        counts.append(len(ring.nodes))
        applied_now = ring.applied_total - applied_before
        delays.append(ring.backlog_tuples / applied_now if applied_now else 0.0)
        offered += ring.offered_total - offered_before
        applied += applied_now
        if (second + 1) % INTERVAL_S == 0:
            omegas.append(applied / offered if offered else 1.0)
            offered = applied = 0.0
    entry: dict[str, Any] = {
        "pattern": schedule.name,
        "policy": policy,
        "node_seconds": sum(counts),
        "nodes_mean": round(sum(counts) / len(counts), 2),
        "nodes_max": max(counts),
        "actions": actions,
        "chi": round(sum(abs(o - 1) > OMEGA_TOLERANCE for o in omegas) / len(omegas), 3),
        "delay_s": {
            "mean": round(sum(delays) / len(delays), 3),
            "p95": round(percentile(delays, 0.95) or 0.0, 3),
            "max": round(max(delays), 3),
        },
        "backlog_at_end": round(ring.backlog_tuples),
        "nodes_over_time": counts[:: max(1, len(counts) // 600)],
    }
    if runner is not None and isinstance(runner.memory, CapacityMemory):
        entry.update(capacity_figures(runner, args.capacity))
    return entry


def capacity_figures(runner: PolicyRunner, capacity_per_node: float) -> dict[str, Any]:
    """The capacity policy's figures after a run: its estimate of a node's capacity (the
    mean over nodes of each one's throughput-on-utilisation line at full utilisation), that
    estimate's error relative to ``capacity_per_node``, and the forecast's WAPE. Empty for
    another policy."""
    memory = runner.memory
    if not isinstance(memory, CapacityMemory):
        return {}
    figures: dict[str, Any] = {"forecast_wape": memory.forecaster.wape()}
    known = [value for line in memory.lines.values() if (value := line.at(1.0))]
    if known:
        estimate = sum(known) / len(known)
        figures["capacity_estimate_per_node"] = round(estimate, 1)
        figures["capacity_error"] = round(abs(estimate - capacity_per_node) / capacity_per_node, 4)
    return figures


def plot(report: dict[str, Any], png: Path) -> None:
    """Per pattern: the offered load and each policy's node count over time."""
    plt = pyplot()
    patterns = sorted({entry["pattern"] for entry in report["runs"]})
    columns = 2
    rows = math.ceil(len(patterns) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(12, 2.6 * rows), squeeze=False)
    duration = report["duration_s"]
    peak = report["peak_nodes"] * report["capacity_per_node"] * UTILIZATION_PLANNED
    for index, pattern in enumerate(patterns):
        ax = axes[index // columns][index % columns]
        schedule = build(pattern, duration, peak)
        ts = list(range(0, int(duration), max(1, int(duration) // 600)))
        load = ax.twinx()
        load.plot(ts, [schedule.rate_at(t) for t in ts], color="grey", linewidth=0.6)
        load.set_ylabel("offered/s", fontsize=7)
        for entry in report["runs"]:
            if entry["pattern"] != pattern:
                continue
            series = entry["nodes_over_time"]
            step = duration / len(series)
            times = [i * step for i in range(len(series))]
            ax.step(times, series, label=entry["policy"], where="post", linewidth=0.9)
        ax.set_title(pattern, fontsize=9)
        ax.set_ylabel("nodes", fontsize=7)
    for index in range(len(patterns), rows * columns):
        axes[index // columns][index % columns].axis("off")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("smr autoscaling policies on the ring model (grey: offered load)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
