"""The results of ``bench/spark_baselines.py``: each measurement saved as a section of
``bench/results/spark_baselines.json`` with the machine, versions and Spark settings it ran
with, and the plot of every section in ``spark_baselines.png``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import RESULTS, machine, source
from bench.harness import pyplot
from bench.spark_queries import BASELINES, spark_conf, spark_versions

RESULTS_JSON = RESULTS / "spark_baselines.json"

__all__ = ["RESULTS_JSON", "plot", "save_section"]


def save_section(
    name: str,
    section: dict[str, Any],
    path: Path = RESULTS_JSON,
    loadavg_before: Sequence[float] | None = None,
) -> dict[str, Any]:
    """Put ``section`` (with when, machine, versions, source) under ``name`` in the results
    JSON, keeping the other sections, and redraw the plot; returns the whole report. The
    machine's load average is recorded after the measurement, and before it if given."""
    report: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    report.setdefault("benchmark", "spark_baselines")
    now = machine()
    now["loadavg_after"] = now.pop("loadavg")
    if loadavg_before is not None:
        now["loadavg_before"] = list(loadavg_before)
    section = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": now,
        "versions": spark_versions(),
        "source": source(),
        "spark_conf": spark_conf(),
        **section,
    }
    report[name] = section
    report["baselines"] = {
        b.name: {"operator": b.operator, "state_stores": list(b.state_stores), "note": b.note}
        for b in BASELINES.values()
    }
    report["machine"], report["versions"] = section["machine"], section["versions"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    plot(report, path.with_suffix(".png"))
    return report


def plot(report: dict[str, Any], path: Path) -> None:
    """One panel per measured section, medians with min-max bars: throughput per baseline
    (whole run and steady), latency percentiles per (baseline, trigger), and recovery per
    (case, keys) as its parts (kill → restart, restart → session, → query started, → first
    commit)."""
    plt = pyplot()
    panels = [name for name in ("throughput", "latency", "recovery") if name in report]
    if not panels:
        return
    figure, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5.5), squeeze=False)

    def bars(axis: Any, x: Sequence[float], figures: Sequence[dict[str, Any]], **kw: Any) -> None:
        medians = [f["median"] or 0 for f in figures]
        low = [
            m - (m if f["min"] is None else f["min"]) for m, f in zip(medians, figures, strict=True)
        ]
        high = [
            (m if f["max"] is None else f["max"]) - m for m, f in zip(medians, figures, strict=True)
        ]
        axis.bar(x, medians, yerr=[low, high], capsize=3, **kw)

    for axis, name in zip(axes[0], panels, strict=True):
        rows = report[name]["summary"]
        if name == "throughput":
            labels = list(rows)
            width = 0.4
            positions = range(len(labels))
            bars(
                axis,
                [i - width / 2 for i in positions],
                [rows[b]["words_per_s"] for b in labels],
                width=width,
                label="first batch start → last commit",
            )
            bars(
                axis,
                [i + width / 2 for i in positions],
                [rows[b]["steady_words_per_s"] for b in labels],
                width=width,
                label="steady (batch 0 left out)",
            )
            axis.set_xticks(
                list(positions),
                [f"{b}\n{rows[b]['batch_words']['median'] or 0:,.0f} words/batch" for b in labels],
                fontsize=8,
            )
            axis.set_yscale("log")
            axis.set_ylabel("input words/s")
            axis.set_title("throughput, local[2], session start excluded")
            axis.legend(fontsize=8)
        elif name == "latency":
            width = 0.2
            for offset, q in enumerate(("p50", "p95", "p99", "max")):
                bars(
                    axis,
                    [i + (offset - 1.5) * width for i in range(len(rows))],
                    [r[f"latency_{q}_ms"] for r in rows],
                    width=width,
                    label=q,
                )
            axis.set_xticks(
                range(len(rows)),
                [f"{r['baseline']}\n{r['trigger']}\n{r['words_per_s']:,.0f} w/s" for r in rows],
                fontsize=8,
            )
            axis.set_ylabel("file published → its batch committed (ms)")
            axis.set_title("end-to-end latency per file")
            axis.legend(fontsize=8)
        else:
            parts = (
                ("kill_to_restart_s", "kill → restart"),
                ("restart_to_session_s", "restart → session ready"),
                ("session_to_query_s", "→ query started"),
                ("query_start_to_commit_s", "→ first batch committed"),
            )
            bottom = [0.0] * len(rows)
            for key, label in parts:
                heights = [(r.get(key) or {}).get("median") or 0.0 for r in rows]
                axis.bar(range(len(rows)), heights, bottom=bottom, label=label, width=0.6)
                bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
            total = [r["kill_to_commit_s"] for r in rows]
            axis.errorbar(
                range(len(rows)),
                [t["median"] or 0 for t in total],
                yerr=[
                    [(t["median"] or 0) - (t["min"] or 0) for t in total],
                    [(t["max"] or 0) - (t["median"] or 0) for t in total],
                ],
                fmt="o",
                color="black",
                capsize=4,
                label="kill → first commit (median, min-max)",
            )
            axis.set_xticks(
                range(len(rows)),
                [f"{r['baseline']}/{r['state_store']}\n{r['keys_n']:,} keys" for r in rows],
                fontsize=8,
            )
            tallest = max([t["max"] or 0 for t in total] + bottom)
            axis.set_ylim(0, 1.45 * tallest)  # room for the legend above the bars
            axis.set_ylabel("seconds after SIGKILL of the driver")
            axis.set_title("recovery: restart from the checkpoint (medians of parts)")
            axis.legend(fontsize=8)
    figure.suptitle("Spark Structured Streaming word-count baselines (medians, min-max bars)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
