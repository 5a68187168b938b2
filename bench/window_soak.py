"""Window memory under a long stream, in-process: Nexmark bids counted per auction in hopping
windows (Q5's 10 s / 2 s) with an allowed lateness, the events generated on the fly, the
watermark raised every batch. Every ``--sample-every`` events it records the windows and
timers held and the process's RSS: closed windows leave state, so what is held stays flat
however many windows have passed (docs/design/windows.md#bounded-memory).

Compared within the run: the most windows held in the first half against the second half
(equal when nothing grows with the windows passed), and the RSS growth over the second half.
Writes ``bench/results/window_soak.json`` and its plot.

    flock /tmp/smr-heavy.lock .venv/bin/python bench/window_soak.py --events 1000000
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import RESULTS, machine, source, versions  # noqa: E402
from bench.harness import pyplot, write_report  # noqa: E402
from bench.nexmark_events import NexmarkConfig, events  # noqa: E402
from smr.checkpoint.window_state import WindowedState  # noqa: E402
from smr.checkpoint.windows import END_OF_TIME_MS, WindowSpec  # noqa: E402

BATCH_EVENTS = 1000
MIB = 1 << 20


def soak(config: NexmarkConfig, spec: WindowSpec, sample_every: int) -> dict[str, Any]:
    state = WindowedState(spec, lambda key, value, s: s.update(n=s.get("n", 0) + value))
    process = psutil.Process()
    samples, finals, largest_ms = [], 0, 0
    for number, event in enumerate(events(config), start=1):
        if event["kind"] == "bid":
            state.add(event["auction"], event["date_time"], 1)
        largest_ms = max(largest_ms, event["date_time"])
        if number % BATCH_EVENTS == 0:
            finals += len(state.advance(largest_ms - spec.out_of_orderness_ms - 1))
        if number % sample_every == 0:
            samples.append(
                {
                    "events": number,
                    "windows_held": sum(1 for _ in state.held()),
                    "timers_held": state.timers_held(),
                    "windows_closed": finals,
                    "rss_mib": process.memory_info().rss / MIB,
                }
            )
    finals += len(state.advance(END_OF_TIME_MS))
    return {"samples": samples, "windows_closed": finals, "held_at_end": len(list(state.held()))}


def plot(report: dict[str, Any], out: Path) -> None:
    plt = pyplot()
    samples = report["samples"]
    x = [s["events"] / 1e6 for s in samples]
    figure, held = plt.subplots(figsize=(6, 3.5))
    held.plot(x, [s["windows_held"] for s in samples], label="windows held")
    held.plot(x, [s["windows_closed"] for s in samples], label="windows closed so far")
    held.set_xlabel("million events")
    held.set_ylabel("windows")
    rss = held.twinx()
    rss.plot(x, [s["rss_mib"] for s in samples], color="grey", linestyle=":", label="RSS (MiB)")
    rss.set_ylabel("RSS, MiB")
    held.legend(loc="upper left", fontsize=8)
    held.set_title("Hopping 10 s / 2 s windows in-process: closed windows leave")
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--sample-every", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "window_soak.json")
    args = parser.parse_args(argv)
    config = NexmarkConfig(seed=1, events=args.events)
    spec = WindowSpec("hopping", size_ms=10_000, slide_ms=2_000, allowed_lateness_ms=5_000)
    before = machine()
    result = soak(config, spec, args.sample_every)
    second_half = [s for s in result["samples"] if s["events"] > args.events // 2]
    report = {
        "config": {**config.__dict__, "spec": spec.__dict__, "batch_events": BATCH_EVENTS},
        **result,
        "windows_held_max_second_half": max(s["windows_held"] for s in second_half),
        "windows_held_max_first_half": max(
            s["windows_held"] for s in result["samples"] if s["events"] <= args.events // 2
        ),
        "rss_growth_second_half_mib": second_half[-1]["rss_mib"] - second_half[0]["rss_mib"],
        "machine": {**before, "loadavg_after": machine()["loadavg"]},
        "source": source(),
        "versions": versions(),
    }
    write_report(report, args.out, plot)
    print(
        f"{result['windows_closed']:,} windows closed; held at most "
        f"{report['windows_held_max_first_half']:,} (first half) and "
        f"{report['windows_held_max_second_half']:,} (second half), {result['held_at_end']} "
        f"at the end; RSS grew {report['rss_growth_second_half_mib']:.1f} MiB over the second half"
    )
    return 0 if result["held_at_end"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
