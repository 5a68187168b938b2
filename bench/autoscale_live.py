"""Autoscaling policies on real node processes: load patterns of ``bench/loads.py`` fed to a
local cluster of capped nodes (``--rate-cap``: on two cores, eight real nodes have no more
capacity than two, so each node emulates a smaller machine) while the autoscale controller
runs a policy; against static peak provisioning in the same run.

Per pattern and policy (and ``static``: the peak's nodes throughout, no controller; and
``oracle``: a controller whose policy knows the load of the next ``ORACLE_LEAD_S`` and the
cap, and runs the fewest nodes that serve it at 90%, the least a policy could use), on a
fresh cluster (r = 1, nodes capped at ``--cap`` tuples/s; the peak needs ``--peak-nodes``
nodes at 90%, and a policy may run up to two more while it catches up): the feeder emits
the pattern open-loop (batches of 100), records every tuple's ack latency and, per second,
the tuples offered and acked, and writes the source's figures for the controller
(``smr.autoscale.source``: the rate due and its lag; not for the ``-nodes-only`` runs, whose
policy sees only the nodes' figures); the controller polls every second. Reported:
node-seconds over static's, latency p50/p95/max (emit to acked by every replica, from when
the tuple was due: time spent held back at the source by backpressure counts, rescales
included) and its ECDF (in the JSON and the plot), the source's worst lag (the age of the
oldest tuple due and not emitted), omega per 10 s interval (acked over offered) and chi (the
share outside 1 ± 0.05), the actions, whether every count was exact, and for the capacity
policy its estimate of a node's capacity
and that estimate's error against the cap.

A policy named ``P+kill`` runs ``P`` and SIGKILLs the busiest serving node
``KILL_AFTER_PEAK_S`` after the load first reaches its peak (halfway through the peak if it
is shorter): reported are when, which node, and how long until the ring caught up (from then
on, for ``CAUGHT_UP_HOLD_S``, no tuple waited over ``CAUGHT_UP_LATENCY_MS`` from when it was
due), against the capacity policy's recovery-time target (its ring headroom rule is meant to
keep it).

    python bench/autoscale_live.py [--patterns square,sine,nyc-taxi] [--duration-s 90]
        [--cap 3000] [--policies static,oracle,capacity,capacity-nodes-only,target-util]
        [--policies static+kill,capacity+kill --out bench/results/autoscale_live_kill.json]
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from array import array
from pathlib import Path
from typing import Any, Final

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.autoscale import add_ratios_to_static, capacity_figures  # noqa: E402
from bench.common import (  # noqa: E402
    RESULTS,
    check_counts,
    load_words,
    machine,
    percentile,
    stream_counts,
    versions,
)
from bench.harness import (  # noqa: E402
    cluster_emitter,
    dump_counts,
    feeder_process,
    local_cluster,
    pyplot,
    write_report,
)
from bench.loads import Schedule, build  # noqa: E402
from smr.autoscale.observe import Decision, Observation, first_released  # noqa: E402
from smr.autoscale.policies import PolicyRunner  # noqa: E402

OUT = RESULTS / "autoscale_live.json"
POLICIES_RUN: Final = ("static", "oracle", "capacity")
# The oracle knows the load this far ahead: about a join's time, so its nodes serve when the
# load comes.
ORACLE_LEAD_S: Final = 3.0
# Points of the latency ECDF kept per run (quantiles evenly spaced, and the maximum).
ECDF_POINTS: Final = 200
# This run's policy decides without the source's figures (the feeder writes none).
NODES_ONLY: Final = "-nodes-only"
UTILIZATION_PLANNED: Final = 0.9
INTERVAL_S: Final = 10
OMEGA_TOLERANCE: Final = 0.05
STEP_S: Final = 0.01
BATCH_SIZE: Final = 100
NODES_MIN: Final = 2
NODES_OVER_PEAK: Final = 2
# A run named "P+kill": policy P, and the busiest node SIGKILLed this long after the load
# first reaches its peak (time for the policy to have scaled out for it).
KILL: Final = "+kill"
KILL_AFTER_PEAK_S: Final = 10.0
# Caught up after a kill: for this long, no tuple due waited longer than this.
CAUGHT_UP_HOLD_S: Final = 5
CAUGHT_UP_LATENCY_MS: Final = 1000.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--patterns", default="square,sine,nyc-taxi")
    parser.add_argument("--duration-s", type=float, default=90.0)
    parser.add_argument("--cap", type=float, default=3000.0, help="tuples/s a node applies")
    parser.add_argument("--peak-nodes", type=int, default=4)
    parser.add_argument("--policies", default=",".join(POLICIES_RUN))
    parser.add_argument("--out", type=Path, default=OUT, help="the JSON (the plot beside it)")
    args = parser.parse_args(argv)
    before = machine()
    words = load_words(200_000)
    peak = args.peak_nodes * args.cap * UTILIZATION_PLANNED
    runs = []
    for pattern in args.patterns.split(","):
        schedule = build(pattern, args.duration_s, peak)
        for policy in args.policies.split(","):
            runs.append(run(schedule, policy, args, words))
            print(_line(runs[-1]), flush=True)
    add_ratios_to_static(runs)
    report = {
        "benchmark": "autoscale (live, capped local nodes)",
        "duration_s": args.duration_s,
        "cap_per_node": args.cap,
        "peak_nodes": args.peak_nodes,
        "replication": 1,
        "runs": runs,
        "machine": {"before": before, "after": machine()},
        "versions": versions(),
    }
    write_report(report, args.out, plot)
    for entry in runs:
        print(f"{_line(entry)}  node-seconds {entry['node_seconds_ratio']:.2f} of static")
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


def _line(entry: dict[str, Any]) -> str:
    latency = entry["latency_ms"]
    return (
        f"{entry['pattern']:>8} {entry['policy']:>12}: nodes mean {entry['nodes_mean']:.2f}, "
        f"p95 {latency['p95']:.0f} ms, max {latency['max']:.0f} ms, "
        f"source lag max {entry['source_lag_s_max']:.1f} s, chi {entry['chi']:.2f}, "
        f"{entry['actions']} actions, exact {entry['exact']['exact']}"
        + (_kill_line(entry["kill"]) if entry.get("kill") else "")
    )


def _kill_line(kill: dict[str, Any]) -> str:
    if not kill["killed"]:
        return ", no node killed"
    return (
        f", {kill['node']} killed at {kill['at_s']:.0f} s: caught up after "
        f"{kill['caught_up_after_s']} s (target {kill['recovery_target_s']} s), worst "
        f"{kill['latency_max_ms_until_caught_up']:.0f} ms"
    )


def run(
    schedule: Schedule, policy: str, args: argparse.Namespace, words: list[str]
) -> dict[str, Any]:
    """One pattern under one policy on a fresh capped cluster."""
    from smr.autoscale.controller import Controller

    killing = policy.endswith(KILL)
    base_policy = policy.removesuffix(KILL)
    kill_at_s = _kill_at_s(schedule) if killing else None
    killed: dict[str, Any] | None = None
    start_nodes = args.peak_nodes if base_policy == "static" else NODES_MIN
    # A policy may run a few nodes more than static's peak for a while, to catch up a
    # backlog that built before a scale-out served.
    nodes_max = args.peak_nodes + NODES_OVER_PEAK
    with local_cluster(start_nodes, 1, apply_rate_cap_per_s=args.cap) as (cluster_dir, _spec):
        controller = None
        stopping = threading.Event()
        thread = None
        oracle = None
        if base_policy != "static":
            if base_policy == "oracle":
                runner: PolicyRunner = Oracle(schedule, args.cap)
                oracle = runner
            else:
                runner = PolicyRunner(base_policy.removesuffix(NODES_ONLY))
            controller = Controller(cluster_dir, runner, NODES_MIN, nodes_max, interval_s=1.0)
            thread = threading.Thread(target=controller.run, args=(stopping,), daemon=True)
            thread.start()
        counts: list[int] = []
        # The policy's decisions as they change: [second, nodes wanted, why].
        reasons: list[list[Any]] = []
        try:
            with feeder_process(
                _schedule_feeder,
                str(cluster_dir),
                words,
                schedule.to_json(),
                not base_policy.endswith(NODES_ONLY),
            ) as feeder:
                started = time.monotonic()
                if oracle is not None:
                    oracle.started_at_s = started
                while time.monotonic() - started < schedule.duration_s:
                    time.sleep(1.0)
                    seen = controller.last_observation if controller else None
                    counts.append(len(seen.nodes) if seen else start_nodes)
                    last = controller.policy.last if controller else None
                    if last is not None and (not reasons or reasons[-1][2] != last.reason):
                        reasons.append([len(counts), last.nodes_wanted, last.reason])
                    elapsed_s = time.monotonic() - started
                    if kill_at_s is not None and killed is None and elapsed_s >= kill_at_s:
                        killed = _kill_busiest(cluster_dir, elapsed_s)
                fed = feeder.result(args.duration_s + 180)
        finally:
            stopping.set()
            if thread is not None:
                thread.join(90)
            if controller is not None:
                controller.close()
        expected = dict(stream_counts(words, fed["emitted"]))
        from smr.spec.parse import read_spec

        addrs = [node.addr for node in read_spec(cluster_dir).nodes]
        exact = check_counts(dump_counts(addrs), expected)
    omegas = [
        acked / offered if offered else 1.0
        for offered, acked in _by_interval(fed["offered_per_s"], fed["acked_per_s"])
    ]
    latencies = list(fed["latency_ms"])
    action_log = list(controller.actions) if controller else []
    figures = capacity_figures(controller.policy, args.cap) if controller is not None else {}
    return {
        **figures,
        "pattern": schedule.name,
        "policy": policy,
        "node_seconds": sum(counts),
        "nodes_mean": round(sum(counts) / max(1, len(counts)), 2),
        "nodes_over_time": counts,
        "actions": controller.decisions_acted if controller else 0,
        "node_actions": controller.node_actions if controller else 0,
        "actions_failed": sum(not a["ok"] for a in action_log),
        "action_log": action_log,
        "decisions": reasons,
        "latency_ms": {
            "p50": round(percentile(latencies, 0.5) or 0.0, 1),
            "p95": round(percentile(latencies, 0.95) or 0.0, 1),
            "max": round(max(latencies, default=0.0), 1),
        },
        "latency_ecdf_ms": _ecdf(latencies),
        "omega_by_interval": [round(o, 3) for o in omegas],
        "chi": round(sum(abs(o - 1) > OMEGA_TOLERANCE for o in omegas) / max(1, len(omegas)), 3),
        "offered_per_s": fed["offered_per_s"],
        "acked_per_s": fed["acked_per_s"],
        "source_lag_s_per_s": fed["lag_s_per_s"],
        "latency_max_ms_by_due_s": fed["latency_max_ms_by_due_s"],
        "source_lag_s_max": max(fed["lag_s_per_s"], default=0.0),
        "nodes_max": nodes_max,
        "emitted": fed["emitted"],
        "feeder_error": fed["error"],
        "exact": exact,
        "kill": _recovery(killed, fed["latency_max_ms_by_due_s"]) if killing else None,
    }


class Oracle(PolicyRunner):
    """The oracle: it knows the schedule's load over the next ``ORACLE_LEAD_S`` and the
    nodes' cap, and runs the fewest nodes that serve it at 90% (releasing the last started
    first); it waits for no figures but a change under way. ``started_at_s`` (the
    controller's clock when the feed began) is set once the feed starts; it holds until
    then."""

    def __init__(self, schedule: Schedule, cap_per_s: float) -> None:
        super().__init__("capacity")
        self.name = "oracle"
        self._schedule = schedule
        self._cap_per_s = cap_per_s
        self.started_at_s: float | None = None

    def step(self, observation: Observation) -> Decision:
        """The nodes the coming load needs."""
        count = len(observation.nodes)
        if self.started_at_s is None or any(node.changing for node in observation.nodes):
            self.last = Decision(count, "waiting")
            return self.last
        at_s = observation.now_s - self.started_at_s
        steps = round(ORACLE_LEAD_S * 10)
        coming = max(self._schedule.rate_at(at_s + step / 10) for step in range(steps + 1))
        wanted = math.ceil(coming / (self._cap_per_s * UTILIZATION_PLANNED))
        wanted = max(observation.nodes_min, min(observation.nodes_max, wanted))
        release = first_released(observation, count - wanted) if wanted < count else ()
        self.last = Decision(wanted, f"the next {ORACLE_LEAD_S:.0f} s: {coming:,.0f}/s", release)
        return self.last


def _ecdf(latencies: list[float]) -> list[list[float]]:
    """``ECDF_POINTS`` points ``[latency ms, share at or below it]`` of the latencies'
    empirical distribution, evenly spaced in share, the maximum last."""
    if not latencies:
        return []
    ordered = sorted(latencies)
    last = len(ordered) - 1
    points = []
    for index in range(ECDF_POINTS):
        share = index / ECDF_POINTS
        points.append([round(ordered[round(share * last)], 1), round(share, 4)])
    points.append([round(ordered[-1], 1), 1.0])
    return points


def _kill_at_s(schedule: Schedule) -> float:
    """When to kill: ``KILL_AFTER_PEAK_S`` after the rate first reaches its peak (to within
    2%), or halfway through that first stretch at the peak if it is shorter."""
    near_peak = 0.98 * schedule.peak_per_s()
    reached_s = 0.0
    while reached_s < schedule.duration_s and schedule.rate_at(reached_s) < near_peak:
        reached_s += 0.5
    left_s = reached_s
    while left_s < schedule.duration_s and schedule.rate_at(left_s) >= near_peak:
        left_s += 0.5
    return reached_s + min(KILL_AFTER_PEAK_S, (left_s - reached_s) / 2)


def _kill_busiest(cluster_dir: Path, elapsed_s: float) -> dict[str, Any]:
    """SIGKILL the serving node that applies the most tuples per second now."""
    import os
    import signal

    from smr.client.control import Client
    from smr.cluster.ring_ops import serving_in_ring_order
    from smr.spec.parse import read_spec

    spec = read_spec(cluster_dir)
    client = Client(timeout_ms=500)
    try:
        busiest = max(serving_in_ring_order(client, spec), key=lambda row: row["tuples_per_s"])
    finally:
        client.close()
    victim = next(node for node in spec.nodes if node.id == busiest["node"])
    assert victim.pid is not None, f"{victim.id} has no process id in the spec"
    os.kill(victim.pid, signal.SIGKILL)
    return {
        "at_s": round(elapsed_s, 1),
        "node": victim.id,
        "its_tuples_per_s": float(busiest["tuples_per_s"]),
    }


def _recovery(killed: dict[str, Any] | None, latency_max_ms: list[float]) -> dict[str, Any]:
    """How long after the kill the ring caught up (``CAUGHT_UP_HOLD_S`` seconds of tuples
    due, none of which waited over ``CAUGHT_UP_LATENCY_MS``), its worst latency meanwhile,
    and whether that met the capacity policy's recovery-time target."""
    from smr.autoscale.capacity import CapacityConfig

    target_s = CapacityConfig().recovery_target_s
    if killed is None:
        return {"killed": False}
    first = int(killed["at_s"])
    caught_up_s = None
    for second in range(first, len(latency_max_ms) - CAUGHT_UP_HOLD_S + 1):
        if max(latency_max_ms[second : second + CAUGHT_UP_HOLD_S]) <= CAUGHT_UP_LATENCY_MS:
            caught_up_s = second
            break
    after = latency_max_ms[first : caught_up_s if caught_up_s is not None else None]
    took_s = max(0.0, caught_up_s - killed["at_s"]) if caught_up_s is not None else None
    return {
        **killed,
        "killed": True,
        "caught_up_after_s": took_s,
        "latency_max_ms_until_caught_up": round(max(after, default=0.0), 1),
        "recovery_target_s": target_s,
        "within_target": took_s is not None and target_s is not None and took_s <= target_s,
    }


def _by_interval(offered: list[int], acked: list[int]) -> list[tuple[int, int]]:
    pairs = []
    for start in range(0, len(offered), INTERVAL_S):
        pairs.append(
            (sum(offered[start : start + INTERVAL_S]), sum(acked[start : start + INTERVAL_S]))
        )
    return pairs


def _schedule_feeder(
    cluster_dir: str,
    words: list[str],
    schedule_json: dict[str, Any],
    report_source: bool,
    results: Any,
) -> None:
    """Emit ``words`` cyclically at the schedule's rate, open-loop: the tuples due by now are
    the integral of the rate over the wall clock (so a change of rate brings no burst, and a
    feeder held back by backpressure falls behind instead of lowering the load); after the
    schedule ends, emit what is still due, then wait for every ack. Put per second the
    tuples offered (due) and acked, the source's lag (the age of the oldest tuple due and
    not emitted), every tuple's ack latency counted from when it was due (time spent
    waiting at the source counts), and the count emitted. With ``report_source``, write the
    source's figures for the controller about once a second (the rate due now, and the
    tuples due not emitted)."""
    import traceback
    from bisect import bisect_left

    from smr.autoscale.source import write_source

    schedule = Schedule.from_json(schedule_json)
    latency_ms = array("f")
    acked_by_second: list[int] = [0] * (int(schedule.duration_s) + 600)
    # The worst latency of the tuples due in each second (for recovery after a kill).
    latency_max_ms_by_due_s = [0.0] * len(acked_by_second)
    started = time.monotonic()
    wall_at_start = time.time()
    # Per tuple, in emission order: the wall time it was due, and the wall time its emit
    # call returned (at or after the emit time an ack carries, so a bisection finds it).
    due_at = array("d")
    emitted_at = array("d")

    def on_acked(rows: Any) -> None:
        now = time.time()
        second = int(time.monotonic() - started)
        if second < len(acked_by_second):
            acked_by_second[second] += len(rows)
        for row in rows:
            index = min(bisect_left(emitted_at, row[4]), len(due_at) - 1)
            due = min(row[4], due_at[index])
            waited_ms = (now - due) * 1000
            latency_ms.append(waited_ms)
            due_second = min(int(due - wall_at_start), len(latency_max_ms_by_due_s) - 1)
            if waited_ms > latency_max_ms_by_due_s[due_second]:
                latency_max_ms_by_due_s[due_second] = waited_ms

    emitter = cluster_emitter(
        cluster_dir, "bench-autoscale", batch_size=BATCH_SIZE, on_acked=on_acked
    )
    offered_by_second: list[int] = []
    lag_s_by_second: list[float] = []
    due_total = 0.0
    integrated_to_s = 0.0
    reported_at_s = -1.0
    error = None
    count = len(words)
    emit = emitter.emit
    try:
        while True:
            now = time.monotonic() - started
            ended = now >= schedule.duration_s
            now = min(now, schedule.duration_s)
            second = min(int(now), int(schedule.duration_s) - 1)
            while len(offered_by_second) <= second:
                offered_by_second.append(0)
                lag_s_by_second.append(0.0)
            # The rate integrated in small steps over the time since the last turn, however
            # long that turn waited for window room.
            due_before = int(due_total)
            while integrated_to_s < now:
                dt = min(STEP_S, now - integrated_to_s)
                due_total += schedule.rate_at(integrated_to_s) * dt
                integrated_to_s += dt
                while len(due_at) < int(due_total):
                    due_at.append(wall_at_start + integrated_to_s)
            offered_by_second[second] += int(due_total) - due_before
            behind = len(due_at) - len(emitted_at)
            # The age of the oldest tuple due and not emitted.
            lag_s = time.time() - due_at[len(emitted_at)] if behind > 0 else 0.0
            lag_s_by_second[second] = max(lag_s_by_second[second], lag_s)
            if report_source and now - reported_at_s >= 1.0:
                write_source(Path(cluster_dir), schedule.rate_at(now), behind)
                reported_at_s = now
            for index in range(len(emitted_at), len(due_at)):
                emit(words[index % count], 1)
                emitted_at.append(time.time())
            emitter.pump(0)
            if ended:
                break
            time.sleep(max(0.0, integrated_to_s + STEP_S - (time.monotonic() - started)))
        emitter.close(timeout_s=120)
    except Exception:  # reported: the run is recorded as failed
        error = traceback.format_exc()
    results.put(
        {
            "emitted": len(emitted_at),
            "offered_per_s": offered_by_second,
            "acked_per_s": acked_by_second[: len(offered_by_second)],
            "lag_s_per_s": [round(lag, 2) for lag in lag_s_by_second],
            "latency_ms": latency_ms,
            "latency_max_ms_by_due_s": [
                round(ms, 1) for ms in latency_max_ms_by_due_s[: len(offered_by_second)]
            ],
            "error": error,
        }
    )


def plot(report: dict[str, Any], png: Path) -> None:
    """Per pattern: offered load and each policy's node count over time."""
    plt = pyplot()
    patterns = list(dict.fromkeys(entry["pattern"] for entry in report["runs"]))
    fig, axes = plt.subplots(2, len(patterns), figsize=(6 * len(patterns), 8), squeeze=False)
    for ax, pattern in zip(axes[1], patterns, strict=True):
        for entry in report["runs"]:
            points = entry.get("latency_ecdf_ms")
            if entry["pattern"] == pattern and points:
                ax.step(
                    [max(1.0, ms) for ms, _ in points],
                    [share for _, share in points],
                    where="post",
                    label=entry["policy"],
                )
        ax.set_xscale("log")
        ax.set_xlabel("ack latency from when due, ms (log)")
        ax.set_ylabel("share of tuples")
        ax.set_title(f"{pattern}: latency ECDF")
        ax.legend(fontsize=7)
    for ax, pattern in zip(axes[0], patterns, strict=True):
        load = ax.twinx()
        for entry in report["runs"]:
            if entry["pattern"] != pattern:
                continue
            ax.step(
                range(len(entry["nodes_over_time"])),
                entry["nodes_over_time"],
                label=entry["policy"],
                where="post",
            )
            kill = entry.get("kill")
            if kill and kill["killed"]:
                ax.axvline(kill["at_s"], linestyle=":", linewidth=0.8, color="black")
            if entry["policy"].startswith("static"):
                load.plot(entry["offered_per_s"], color="grey", linewidth=0.6)
        ax.set_title(pattern)
        ax.set_xlabel("s")
        ax.set_ylabel("serving nodes")
        load.set_ylabel("offered tuples/s (grey)")
        ax.legend(fontsize=7)
    fig.suptitle(
        f"smr autoscaling on capped local nodes ({report['cap_per_node']:.0f} tuples/s each)"
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
