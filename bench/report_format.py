"""How the benchmark report writes figures: counts, milliseconds, medians with their
spread, ratios and the machine line, one way for every section (``bench/report.py``,
``bench/report_ops.py``)."""

from __future__ import annotations

from typing import Any


def fmt_n(value: float | None, unit: str = "") -> str:
    """A figure for a table: 1.2 M, 835 k, 12.3, with its unit."""
    if value is None:
        return "-"
    if abs(value) >= 1e6:
        text = f"{value / 1e6:.2f} M"
    elif abs(value) >= 1e4:
        text = f"{value / 1e3:.0f} k"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.1f}"
    return f"{text}{unit}"


def fmt_ms(value: float | None) -> str:
    """A duration given in ms: ms below a second, else seconds."""
    if value is None:
        return "-"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.1f} s"


def fmt_spread(figure: dict[str, Any] | None, unit: str = "", scale: float = 1.0) -> str:
    """``median (min-max)`` of a spread; ``unit`` " ms" formats durations (ms or s)."""
    if not figure or figure.get("median") is None:
        return "-"
    median, low, high = (figure[k] * scale for k in ("median", "min", "max"))
    if unit == " ms":
        shown = fmt_ms(median)
        return f"{shown} ({fmt_ms(low)} - {fmt_ms(high)})" if figure.get("count", 0) > 1 else shown
    if figure.get("count", 0) > 1:
        return f"{fmt_n(median, unit)} ({fmt_n(low)}-{fmt_n(high)})"
    return fmt_n(median, unit)


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x" if value < 10 else f"{value:.0f}x"


def fmt_machine(report: dict[str, Any]) -> str:
    machine = report.get("machine", {})
    machine = machine.get("before", machine)  # recorded before and after the run
    versions = report.get("versions", {})
    load = machine.get("loadavg") or machine.get("loadavg_before")
    parts = [
        f"{machine.get('cpus', '?')} CPUs",
        f"load average {load}" if load else "",
        ", ".join(f"{k} {v}" for k, v in versions.items() if k in ("python", "pyspark", "pyzmq")),
    ]
    return "; ".join(p for p in parts if p)


def fmt_fine_ms(figure: dict[str, Any]) -> str:
    """``median (min-max)`` of a spread of milliseconds, to 0.1 ms."""
    if figure.get("median") is None:
        return "-"
    return f"{figure['median']:.1f} ms ({figure['min']:.1f} - {figure['max']:.1f})"
