"""What a recovery run's records mean (``bench/recovery.py`` takes them): the feeder's acked
rate around the kill (dip, recovery to 90%, longest stall), the figures per case, the headline
against the design's targets, the plot and the lines printed at the end.

Everything here is a pure function of the records, so a results JSON can be summarised and
plotted again without running anything (``bench/spark_recovery.py`` summarises smr's runs
with ``summarise`` too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import spread
from bench.harness import pyplot

# The recovered throughput is judged over this many windows (250 ms), against the average
# over the baseline before the kill.
SLIDING_WINDOWS = 5
BASELINE_S = 2.0
RECOVERED_FRACTION = 0.9
# Targets from the design, reported against and never asserted.
TARGET_MEDIAN_MS = 700.0
TARGET_WORST_MS = 1500.0

__all__ = [
    "BASELINE_S",
    "RECOVERED_FRACTION",
    "SLIDING_WINDOWS",
    "TARGET_MEDIAN_MS",
    "TARGET_WORST_MS",
    "analyse_acks",
    "format_ms",
    "headline",
    "plot",
    "print_report",
    "sliding_series",
    "summarise",
]


def analyse_acks(
    samples: list[tuple[float, int, int]], killed_at: float, stopped_at: float | None
) -> dict[str, Any]:
    """Baseline rate, dip, recovery to 90% and the longest stall, from the sampled acks."""
    end = stopped_at if stopped_at is not None else samples[-1][0]
    points = [(t, acked) for t, acked, _ in samples if t <= end]
    times = [t for t, _ in points]
    acked = [a for _, a in points]
    before = [i for i, t in enumerate(times) if killed_at - BASELINE_S <= t <= killed_at]
    first, last = before[0], before[-1]
    baseline = (acked[last] - acked[first]) / (times[last] - times[first])
    threshold = RECOVERED_FRACTION * baseline
    # The dip is the trough of the sliding rate after the kill (the first window where it is
    # lowest), so that noise just after the kill, while acks still flow, is not mistaken
    # for a dip and a recovery.
    sliding = {
        i: (acked[i] - acked[i - SLIDING_WINDOWS]) / (times[i] - times[i - SLIDING_WINDOWS])
        for i in range(SLIDING_WINDOWS, len(points))
        if times[i] > killed_at
    }
    trough_index = min(sliding, key=lambda i: (sliding[i], i))
    dip_index = trough_index if sliding[trough_index] < threshold else None
    recovered_index = None
    if dip_index is not None:
        recovered_index = next(
            (i for i in sorted(sliding) if i > dip_index and sliding[i] >= threshold), None
        )
    stall_s = run_s = 0.0
    for i in range(1, len(points)):
        if times[i] <= killed_at:
            continue
        if acked[i] == acked[i - 1]:
            run_s += times[i] - times[i - 1]
            stall_s = max(stall_s, run_s)
        else:
            run_s = 0.0
    if dip_index is None:
        recovered_ms: float | None = 0.0
    elif recovered_index is None:
        recovered_ms = None
    else:
        recovered_ms = (times[recovered_index] - killed_at) * 1000
    series = [
        (
            round((times[i] - killed_at) * 1000, 1),
            round((acked[i] - acked[i - 1]) / (times[i] - times[i - 1]) / baseline, 3),
        )
        for i in range(1, len(points))
        if times[i] >= killed_at - 1.0
    ]
    return {
        "baseline_acked_per_s": baseline,
        "dipped": dip_index is not None,
        "recovered": dip_index is None or recovered_index is not None,
        "recovered_90_ms": recovered_ms,
        "stall_ms": stall_s * 1000,
        "acked_rate_vs_baseline": series,
    }


def summarise(failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median, min and max of each figure per (k, r, adjacent, preload)."""
    groups: dict[tuple[int, int, bool, int], list[dict[str, Any]]] = {}
    for failure in failures:
        key = (failure["k"], failure["r"], failure["adjacent"], failure["preload_keys"])
        groups.setdefault(key, []).append(failure)
    rows = []
    for (k, r, adjacent, preload_keys), group in groups.items():
        row: dict[str, Any] = {
            "case": group[0]["case"],
            "k": k,
            "r": r,
            "adjacent": adjacent,
            "n": group[0]["n"],
            "preload_keys": preload_keys,
            "failures": len(group),
            "exact": sum(1 for f in group if f["exact"]),
            "all_taken_over": sum(1 for f in group if f["all_taken_over"]),
            "recovered": sum(1 for f in group if f["recovered"]),
            "false_takeovers": sum(len(f["false_takeovers"]) for f in group),
            "runs_with_false_takeovers": sum(1 for f in group if f["false_takeovers"]),
            "healthy_before_kill": sum(1 for f in group if f["healthy_before_kill"]),
        }
        for figure in (
            "state_keys",
            "detection_ms",
            "takeover_ms",
            "kill_to_takeover_done_ms",
            "recovered_90_ms",
            "stall_ms",
            "baseline_acked_per_s",
        ):
            row[figure] = spread([f[figure] for f in group])
        rows.append(row)
    return rows


def headline(failures: list[dict[str, Any]]) -> dict[str, Any]:
    """Kill → takeover done over all failures, against the targets; exactness."""
    done = [f["kill_to_takeover_done_ms"] for f in failures]
    present = [d for d in done if d is not None]
    summary = spread(done)
    return {
        "kill_to_takeover_done_ms": summary,
        "target_median_ms": TARGET_MEDIAN_MS,
        "target_worst_ms": TARGET_WORST_MS,
        "median_within_target": summary["median"] is not None
        and summary["median"] <= TARGET_MEDIAN_MS,
        "worst_within_target": len(present) == len(done)
        and bool(present)
        and max(present) <= TARGET_WORST_MS,
        "recovered_90_ms": spread([f["recovered_90_ms"] for f in failures]),
        "failures": len(failures),
        "exact": sum(1 for f in failures if f["exact"]),
        "never_recovered": sum(1 for f in failures if not f["recovered"]),
        "all_taken_over": sum(1 for f in failures if f["all_taken_over"]),
        "runs_with_false_takeovers": sum(1 for f in failures if f["false_takeovers"]),
        "unhealthy_before_kill": sum(1 for f in failures if not f["healthy_before_kill"]),
        "inexact_runs": [
            {
                "run": f["run"],
                "case": f["case"],
                "preload_keys": f["preload_keys"],
                "keys_missing": f["keys_missing"],
                "keys_wrong": f["keys_wrong"],
                "false_takeovers": len(f["false_takeovers"]),
            }
            for f in failures
            if not f["exact"]
        ],
    }


def sliding_series(windows: list[list[float]]) -> list[tuple[float, float]]:
    """The mean of each 50 ms window's relative rate with the ones before it, over 250 ms
    (``SLIDING_WINDOWS``), as ``(ms since the kill, relative rate)``; for the plot."""
    return [
        (
            windows[i][0],
            sum(v for _, v in windows[i - SLIDING_WINDOWS + 1 : i + 1]) / SLIDING_WINDOWS,
        )
        for i in range(SLIDING_WINDOWS - 1, len(windows))
    ]


def plot(report: dict[str, Any], path: Path) -> None:
    """Left: kill → takeover done per case (median detection + takeover bars, each run as a
    dot, recovered-to-90% as crosses) against the targets. Right: acked throughput around the
    kill over a sliding 250 ms, relative to the pre-kill average, for every run."""
    plt = pyplot()
    rows = report["summary"]
    failures = report["failures"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(15, 6))
    labels = [
        f"k={row['k']} r={row['r']}\n{'adjacent' if row['adjacent'] else 'apart'}\n"
        f"+{row['preload_keys']:,} keys"
        for row in rows
    ]
    positions = range(len(rows))
    detection = [row["detection_ms"]["median"] or 0 for row in rows]
    takeover = [row["takeover_ms"]["median"] or 0 for row in rows]
    left.bar(positions, detection, color="tab:orange", label="detection (median)")
    left.bar(positions, takeover, bottom=detection, color="tab:blue", label="takeover (median)")
    for index, row in enumerate(rows):
        group = [
            f
            for f in failures
            if (f["k"], f["r"], f["adjacent"], f["preload_keys"])
            == (row["k"], row["r"], row["adjacent"], row["preload_keys"])
        ]
        done = [f["kill_to_takeover_done_ms"] for f in group if f["kill_to_takeover_done_ms"]]
        recovered = [f["recovered_90_ms"] for f in group if f["recovered_90_ms"] is not None]
        left.scatter([index - 0.15] * len(done), done, color="black", s=12, zorder=3)
        left.scatter(
            [index + 0.15] * len(recovered), recovered, color="tab:red", marker="x", zorder=3
        )
    left.scatter([], [], color="black", s=12, label="kill → takeover done (each run)")
    left.scatter([], [], color="tab:red", marker="x", label="kill → 90% acked rate (each run)")
    left.axhline(TARGET_MEDIAN_MS, color="tab:green", linestyle="--", label="target median")
    left.axhline(TARGET_WORST_MS, color="tab:red", linestyle=":", label="target worst")
    tallest = max(
        [TARGET_WORST_MS]
        + [f["kill_to_takeover_done_ms"] or 0 for f in failures]
        + [f["recovered_90_ms"] or 0 for f in failures]
    )
    left.set_ylim(0, 1.45 * tallest)  # room for the legend above the data
    left.set_xticks(list(positions), labels, fontsize=7)
    left.set_ylabel("ms after SIGKILL")
    left.set_title("kill → takeover done, per case")
    left.legend(fontsize=7, loc="upper left", ncol=2)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    seen: set[str] = set()
    for failure in failures:
        name = f"{failure['case']}, {failure['preload_keys']:,} preloaded"
        colour = colours[
            [r["case"] + str(r["preload_keys"]) for r in rows].index(
                failure["case"] + str(failure["preload_keys"])
            )
            % len(colours)
        ]
        series = sliding_series(failure["acked_rate_vs_baseline"])
        right.plot(
            [t for t, _ in series],
            [100 * v for _, v in series],
            color=colour,
            linewidth=0.8,
            alpha=0.7,
            label=None if name in seen else name,
        )
        seen.add(name)
    right.axvline(0, color="black", linewidth=0.8)
    right.axhline(100 * RECOVERED_FRACTION, color="grey", linestyle="--", linewidth=0.8)
    right.set_ylim(0, 400)
    right.set_xlabel("ms since SIGKILL")
    right.set_ylabel("acked tuples/s over the last 250 ms, % of pre-kill average")
    right.set_title(f"feeder's acked throughput ({report['rate_tuples_per_s']:,.0f} tuples/s)")
    right.legend(fontsize=7)
    figure.suptitle(
        f"smr recovery, {report['headline']['failures']} failures: kill → takeover done median "
        f"{report['headline']['kill_to_takeover_done_ms']['median'] or float('nan'):.0f} ms, "
        f"worst {report['headline']['kill_to_takeover_done_ms']['max'] or float('nan'):.0f} ms; "
        f"exact {report['headline']['exact']}/{report['headline']['failures']}; runs with false "
        f"takeovers {report['headline']['runs_with_false_takeovers']}"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def print_report(report: dict[str, Any], out: Path) -> None:
    """The summary per case and the headline, one line each, for the terminal."""
    print()
    for row in report["summary"]:
        done = row["kill_to_takeover_done_ms"]
        print(
            f"{row['case']:<20} preload {row['preload_keys']:>7,}: keys "
            f"{row['state_keys']['median']:>9,.0f}  detection "
            f"{format_ms(row['detection_ms']['median'])}  "
            f"takeover {format_ms(row['takeover_ms']['median'], 1)}"
            f"  done {format_ms(done['median'])} "
            f"[{format_ms(done['min'])} - {format_ms(done['max'])}]  90% rate "
            f"{format_ms(row['recovered_90_ms']['median'])}  exact {row['exact']}/{row['failures']}"
            f"  runs with false takeovers {row['runs_with_false_takeovers']}"
        )
    head = report["headline"]
    done = head["kill_to_takeover_done_ms"]
    print(
        f"kill → takeover done: median {format_ms(done['median'])} "
        f"(target {TARGET_MEDIAN_MS:.0f} ms), "
        f"worst {format_ms(done['max'])} (target {TARGET_WORST_MS:.0f} ms); exact "
        f"{head['exact']}/{head['failures']}; {head['runs_with_false_takeovers']} runs with "
        f"false takeovers ({head['unhealthy_before_kill']} before the kill); "
        f"{len(report['errors'])} runs failed; load average "
        f"{report['machine']['loadavg_before']} → {report['machine']['loadavg_after']}; "
        f"{report['elapsed_s']:.0f} s; results in {out}"
    )


def format_ms(value: float | None, decimals: int = 0) -> str:
    """A duration in ms for a printed line: ``n/a`` when there is none."""
    return "n/a" if value is None else f"{value:.{decimals}f} ms"
