"""The load patterns of the autoscaling benchmarks: rates within their bounds, the shapes they
promise, rebuilt from their JSON, the NAB replays faithful to their series, the key mixes."""

from __future__ import annotations

import collections
import csv
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.loads import (
    NAB_DIR,
    NAB_SERIES,
    PATTERNS,
    SKEWED,
    KeyMix,
    Schedule,
    available,
    build,
    nab,
)

BUILDABLE = [name for name, reason in available().items() if reason is None]


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(BUILDABLE),
    duration_s=st.floats(10, 3600),
    peak=st.floats(10, 100_000),
    t=st.floats(-10, 4000),
)
def test_every_rate_stays_between_low_and_peak(
    name: str, duration_s: float, peak: float, t: float
) -> None:
    schedule = build(name, duration_s, peak)
    assert peak * 0.2 - 1e-6 <= schedule.rate_at(t) <= peak + 1e-6


def test_the_square_wave_changes_level_at_each_half_period_only() -> None:
    schedule = build("square", 400, 1000)
    levels = [schedule.rate_at(t + 0.5) for t in range(400)]
    changes = [t for t in range(1, 400) if levels[t] != levels[t - 1]]
    assert changes == [50, 100, 150, 200, 250, 300, 350]
    assert set(levels) == {200, 1000}


def test_steps_and_ramp_have_their_shapes() -> None:
    steps = build("steps", 500, 1000)
    assert [steps.rate_at(t) for t in (50, 150, 250, 350, 450)] == [200, 600, 1000, 600, 200]
    ramp = build("ramp", 100, 1000)
    assert ramp.rate_at(25) == pytest.approx(600) and ramp.rate_at(50) == 1000


def test_the_random_walk_is_bounded_seeded_and_differs_between_seeds() -> None:
    from bench.loads import random_walk

    one, again, other = (random_walk(300, 1000, 200, seed) for seed in (1, 1, 2))
    assert one.rates_per_s == again.rates_per_s != other.rates_per_s
    assert min(one.rates_per_s) >= 200 and max(one.rates_per_s) <= 1000


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_a_schedule_is_rebuilt_from_its_json(name: str) -> None:
    if name not in BUILDABLE:
        pytest.skip(f"needs {NAB_DIR} (not in a user's clone)")
    schedule = build(name, 120, 5000)
    assert Schedule.from_json(schedule.to_json()) == schedule


@pytest.mark.parametrize("name", sorted(NAB_SERIES))
def test_a_nab_replay_follows_its_series(name: str) -> None:
    filename, window = NAB_SERIES[name]
    if not (NAB_DIR / filename).is_file():
        pytest.skip(f"needs {NAB_DIR} (not in a user's clone)")
    with (NAB_DIR / filename).open(newline="") as handle:
        raw = [float(row["value"]) for row in csv.DictReader(handle)][:window]
    schedule = build(name, window - 1, 1000)  # one point a second: the raw points
    replay = [schedule.rate_at(t) for t in range(window)]
    assert _pearson(raw, replay) > 0.999
    assert min(replay) == pytest.approx(200) and max(replay) == pytest.approx(1000)


def test_a_missing_nab_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nyc-taxi pattern replays .* not here"):
        nab("nyc-taxi", 60, 1000, 200, nab_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown pattern 'saw'"):
        build("saw", 60, 1000)


def test_the_skewed_mix_gives_its_hot_set_its_share() -> None:
    words = [f"w{i}" for i in range(5000)]
    keys = SKEWED.keys(words, 100_000)
    counts = collections.Counter(keys)
    hot = words[: SKEWED.hot_keys]
    share = sum(counts[w] for w in hot) / len(keys)
    # The hot words also come up in their turn among the cold ones (rarely, here).
    assert share == pytest.approx(SKEWED.hot_fraction, abs=0.01)
    assert keys == SKEWED.keys(words, 100_000)
    assert KeyMix().keys(words, 7) == words[:7]


def _pearson(xs: list[float], ys: list[float]) -> float:
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    cov = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    var_x = sum((x - mean_x) ** 2 for x in xs)
    var_y = sum((y - mean_y) ** 2 for y in ys)
    return float(cov / (var_x * var_y) ** 0.5)
