"""Load patterns for the autoscaling benchmarks: rate schedules as data, compressed in time so
a run takes minutes, and the key mixes to feed them with.

A :class:`Schedule` gives the offered rate (tuples/s) at each second of a run, between
``low`` and ``peak``:

- ``steps``: low, middle, peak, middle, low, each a fifth of the run;
- ``square``: low and peak in turn, ``periods`` times;
- ``random-walk``: a bounded random walk, seeded, one step a second (reflected at the bounds);
- ``ramp``: linear from low to peak over the first half, back over the second;
- ``sine``: two sines (one and three periods a run), scaled into [low, peak];
- ``nyc-taxi`` and ``tweets``: real shapes from the Numenta Anomaly Benchmark (NYC taxi
  passengers per 30 min, one week; tweets about AAPL per 5 min, one day), compressed onto
  the run and scaled so their minimum is low and their maximum peak. They need
  ``../shared/data/events/nab`` (not in a user's clone): ``available()`` says which
  patterns can be built here.

The key mixes: ``uniform`` (the books' words in order, as the other benchmarks feed) and
``skewed`` (a hot set of words takes a fixed share of the tuples, as in the thesis).

    python bench/loads.py [--duration-s 300] [--peak 20000] [--png FILE]
"""

from __future__ import annotations

import argparse
import csv
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NAB_DIR: Final = REPO.parent / "shared" / "data" / "events" / "nab"
NAB_SERIES: Final = {
    # pattern: (file, points in the window replayed: one week of 30-min points, one day of 5-min)
    "nyc-taxi": ("nyc_taxi.csv", 7 * 48),
    "tweets": ("realTweets/Twitter_volume_AAPL.csv", 288),
}
LOW_FRACTION_DEFAULT: Final = 0.2
WALK_SEED_DEFAULT: Final = 7
# A random walk's step, as a share of the span between low and peak.
WALK_STEP_FRACTION: Final = 0.08


@dataclass(frozen=True)
class Schedule:
    """An offered rate over ``duration_s`` seconds: ``points`` are rates (tuples/s) spaced
    evenly over the run, linearly interpolated (a square wave's points come in pairs at the
    same time, so its edges are sharp).

    Guarantees: ``rate_at`` stays within [min(points), max(points)], which the builders put
    within [low, peak]; the schedule is rebuilt exactly from ``to_json()``.
    """

    name: str
    duration_s: float
    times_s: tuple[float, ...]
    rates_per_s: tuple[float, ...]

    def rate_at(self, t_s: float) -> float:
        """The offered rate at second ``t_s`` of the run (held at the ends)."""
        times, rates = self.times_s, self.rates_per_s
        if t_s <= times[0]:
            return rates[0]
        if t_s >= times[-1]:
            return rates[-1]
        low, high = 0, len(times) - 1
        while high - low > 1:  # the last point at or before t
            middle = (low + high) // 2
            if times[middle] <= t_s:
                low = middle
            else:
                high = middle
        t0, t1 = times[low], times[high]
        if t1 == t0:
            return rates[high]
        return rates[low] + (rates[high] - rates[low]) * (t_s - t0) / (t1 - t0)

    def mean_per_s(self, step_s: float = 1.0) -> float:
        """The mean offered rate over the run."""
        samples = [self.rate_at(i * step_s) for i in range(int(self.duration_s / step_s))]
        return sum(samples) / len(samples)

    def peak_per_s(self) -> float:
        """The highest offered rate."""
        return max(self.rates_per_s)

    def to_json(self) -> dict[str, Any]:
        """Everything needed to rebuild and describe the schedule."""
        return {
            "name": self.name,
            "duration_s": self.duration_s,
            "times_s": list(self.times_s),
            "rates_per_s": list(self.rates_per_s),
        }

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Schedule:
        """The schedule ``to_json`` described."""
        return cls(
            body["name"], body["duration_s"], tuple(body["times_s"]), tuple(body["rates_per_s"])
        )


def _even(name: str, duration_s: float, rates: list[float]) -> Schedule:
    step = duration_s / (len(rates) - 1)
    return Schedule(name, duration_s, tuple(i * step for i in range(len(rates))), tuple(rates))


def steps(duration_s: float, peak: float, low: float) -> Schedule:
    """Low, middle, peak, middle, low: a fifth of the run each, sharp edges."""
    levels = [low, (low + peak) / 2, peak, (low + peak) / 2, low]
    return _levels("steps", duration_s, levels)


def square(duration_s: float, peak: float, low: float, periods: int = 4) -> Schedule:
    """Low and peak in turn, half a period each, ``periods`` periods."""
    return _levels("square", duration_s, [low, peak] * periods)


def _levels(name: str, duration_s: float, levels: list[float]) -> Schedule:
    """Each level held for an equal share of the run, with sharp edges."""
    width = duration_s / len(levels)
    times: list[float] = []
    rates: list[float] = []
    for index, level in enumerate(levels):
        times += [index * width, (index + 1) * width]
        rates += [level, level]
    return Schedule(name, duration_s, tuple(times), tuple(rates))


def random_walk(
    duration_s: float, peak: float, low: float, seed: int = WALK_SEED_DEFAULT
) -> Schedule:
    """A walk from the middle, one step a second of up to ``WALK_STEP_FRACTION`` of the span,
    reflected at low and peak; the same for the same seed."""
    chooser = random.Random(seed)
    span = peak - low
    rate = (low + peak) / 2
    rates = [rate]
    for _ in range(max(1, int(duration_s))):
        rate += chooser.uniform(-1, 1) * WALK_STEP_FRACTION * span
        if rate > peak:
            rate = 2 * peak - rate
        if rate < low:
            rate = 2 * low - rate
        rates.append(min(peak, max(low, rate)))
    return _even("random-walk", duration_s, rates)


def ramp(duration_s: float, peak: float, low: float) -> Schedule:
    """Linear from low to peak over the first half, back to low over the second."""
    return _even("ramp", duration_s, [low, peak, low])


def sine(duration_s: float, peak: float, low: float, points: int = 600) -> Schedule:
    """Two sines, of one and three periods a run (the second at a third of the amplitude),
    scaled into [low, peak]."""
    raw = [
        math.sin(2 * math.pi * i / points) + math.sin(6 * math.pi * i / points) / 3
        for i in range(points + 1)
    ]
    return _even("sine", duration_s, _scaled(raw, low, peak))


def nab(name: str, duration_s: float, peak: float, low: float, nab_dir: Path = NAB_DIR) -> Schedule:
    """The window of NAB series ``name`` (``NAB_SERIES``) compressed onto the run."""
    filename, window = NAB_SERIES[name]
    path = nab_dir / filename
    if not path.is_file():
        raise FileNotFoundError(
            f"the {name} pattern replays {path}, which is not here (it comes with the shared "
            "data beside the repository, not with a clone)"
        )
    with path.open(newline="") as handle:
        values = [float(row["value"]) for row in csv.DictReader(handle)]
    return _even(name, duration_s, _scaled(values[:window], low, peak))


def _scaled(values: list[float], low: float, peak: float) -> list[float]:
    lowest, highest = min(values), max(values)
    span = highest - lowest or 1.0
    return [low + (value - lowest) / span * (peak - low) for value in values]


Builder = Callable[[float, float, float], Schedule]

PATTERNS: Final[dict[str, Builder]] = {
    "steps": steps,
    "square": square,
    "random-walk": random_walk,
    "ramp": ramp,
    "sine": sine,
    "nyc-taxi": lambda d, p, low: nab("nyc-taxi", d, p, low),
    "tweets": lambda d, p, low: nab("tweets", d, p, low),
}


def build(name: str, duration_s: float, peak: float, low: float | None = None) -> Schedule:
    """Pattern ``name`` over ``duration_s`` from ``low`` (a fifth of peak unless given) to
    ``peak`` tuples/s."""
    if name not in PATTERNS:
        raise ValueError(f"unknown pattern {name!r}: choose one of {', '.join(PATTERNS)}")
    return PATTERNS[name](duration_s, peak, peak * LOW_FRACTION_DEFAULT if low is None else low)


def available() -> dict[str, str | None]:
    """Each pattern, with why it cannot be built here (None when it can)."""
    reasons: dict[str, str | None] = {}
    for name in PATTERNS:
        try:
            build(name, 10, 100)
            reasons[name] = None
        except FileNotFoundError as missing:
            reasons[name] = str(missing)
    return reasons


# -- key mixes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyMix:
    """Which key the i-th tuple has: the words in order (``hot_fraction`` 0), or a hot set
    of ``hot_keys`` words (the first distinct ones) taking ``hot_fraction`` of the tuples,
    the rest the words in order. Deterministic: the same i, the same key."""

    hot_keys: int = 0
    hot_fraction: float = 0.0
    seed: int = 1

    def keys(self, words: list[str], count: int) -> list[str]:
        """The keys of tuples ``0 .. count - 1``."""
        if not self.hot_fraction:
            return [words[i % len(words)] for i in range(count)]
        hot = list(dict.fromkeys(words))[: self.hot_keys]
        chooser = random.Random(self.seed)
        keys = []
        cold = 0
        for _ in range(count):
            if chooser.random() < self.hot_fraction:
                keys.append(hot[chooser.randrange(len(hot))])
            else:
                keys.append(words[cold % len(words)])
                cold += 1
        return keys

    def to_json(self) -> dict[str, Any]:
        """The mix's parameters."""
        return {"hot_keys": self.hot_keys, "hot_fraction": self.hot_fraction, "seed": self.seed}


UNIFORM: Final = KeyMix()
SKEWED: Final = KeyMix(hot_keys=10, hot_fraction=0.3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=300.0)
    parser.add_argument("--peak", type=float, default=20_000.0)
    parser.add_argument("--png", type=Path, help="draw every pattern that can be built")
    args = parser.parse_args(argv)
    built = []
    for name, reason in available().items():
        if reason is not None:
            print(f"{name:>12}: not here: {reason}")
            continue
        schedule = build(name, args.duration_s, args.peak)
        built.append(schedule)
        mean, peak = schedule.mean_per_s(), schedule.peak_per_s()
        print(f"{name:>12}: mean {mean:,.0f}/s, peak {peak:,.0f}/s, mean/peak {mean / peak:.2f}")
    if args.png:
        from bench.harness import pyplot

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(10, 4))
        for schedule in built:
            ts = [i for i in range(int(schedule.duration_s))]
            ax.plot(ts, [schedule.rate_at(t) for t in ts], label=schedule.name, linewidth=0.9)
        ax.set_xlabel("s")
        ax.set_ylabel("offered tuples/s")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
