"""The workload forecast of the ``capacity`` policy: a smoothed level, a trend only where the
recent samples lie on a line, and a cautious fallback when the recent error is high.

Why this model: the ring acts in about a second (a join or a move), so the forecast only
needs to see a few seconds to a minute ahead, where the shapes that matter are levels, steps
and ramps. A trend fitted across a step (Holt's, ARIMA's) keeps climbing after the step and
makes the policy overshoot, then creep back; so the trend is the least-squares slope of the
last ``trend_samples`` samples, used only when they fit a line (R² ≥ ``trend_fit_min``: a
ramp), and the level is an exponential moving average otherwise. Its accuracy is watched as
Daedalus does: the weighted absolute percentage error (WAPE) of its one-step forecasts over
the last ``window`` samples; above ``wape_max`` (an erratic load) the forecast is the highest
recent sample, so the policy plans for the recent peak rather than for a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Below this many samples there is no trend to speak of.
SAMPLES_MIN: Final = 3


@dataclass(frozen=True)
class ForecastConfig:
    """Samples arrive every ``interval_s``; forecasts reach ``horizon_s`` ahead."""

    interval_s: float = 1.0
    horizon_s: float = 10.0
    level_smoothing: float = 0.5
    trend_samples: int = 10
    trend_fit_min: float = 0.9
    window: int = 30
    wape_max: float = 0.25


@dataclass(frozen=True)
class Forecaster:
    """The forecast's state after the samples seen so far (a value: ``observe`` returns a
    new one)."""

    level: float | None = None
    recent: tuple[float, ...] = ()
    """The last ``window`` samples, oldest first."""
    errors: tuple[float, ...] = ()
    """The absolute errors of the one-step forecasts of the last samples."""

    def observe(self, config: ForecastConfig, value: float) -> Forecaster:
        """The state after one more sample (tuples/s over the last interval)."""
        value = max(0.0, value)
        recent = (*self.recent, value)[-config.window :]
        if self.level is None:
            return Forecaster(value, recent, ())
        error = abs(value - self.path(config)[0])
        level = config.level_smoothing * value + (1 - config.level_smoothing) * self.level
        return Forecaster(level, recent, (*self.errors, error)[-config.window :])

    def wape(self) -> float | None:
        """The recent one-step forecasts' weighted absolute percentage error (None before
        any, or when the workload was zero throughout)."""
        actual = sum(self.recent[-len(self.errors) :]) if self.errors else 0.0
        return sum(self.errors) / actual if actual > 0 else None

    def fallback(self, config: ForecastConfig) -> bool:
        """Whether the forecast is the recent peak (the model's recent error is too high)."""
        wape = self.wape()
        return wape is not None and wape > config.wape_max

    def path(self, config: ForecastConfig) -> list[float]:
        """The forecast for each interval up to the horizon (never negative)."""
        steps = max(1, round(config.horizon_s / config.interval_s))
        if self.level is None:
            return [0.0] * steps
        if self.fallback(config):
            return [max(self.recent)] * steps
        tail = self.recent[-config.trend_samples :]
        if len(tail) >= SAMPLES_MIN:
            slope, last, fit = _line(tail)
            if fit >= config.trend_fit_min:
                return [max(0.0, last + slope * step) for step in range(1, steps + 1)]
        return [self.level] * steps

    def peak(self, config: ForecastConfig) -> float:
        """The highest forecast value up to the horizon."""
        return max(self.path(config))

    def average(self, samples: int) -> float:
        """The mean of the last ``samples`` samples (0 before any)."""
        chosen = self.recent[-samples:]
        return sum(chosen) / len(chosen) if chosen else 0.0


def _line(values: tuple[float, ...]) -> tuple[float, float, float]:
    """The least-squares line through ``values`` (one per interval): its slope, its value
    at the last one, and its R² (1 for a flat series, which a line fits exactly)."""
    count = len(values)
    mean_x = (count - 1) / 2
    mean_y = sum(values) / count
    sxx = sum((x - mean_x) ** 2 for x in range(count))
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    syy = sum((y - mean_y) ** 2 for y in values)
    slope = sxy / sxx
    fit = sxy * sxy / (sxx * syy) if syy > 0 else 1.0
    return slope, mean_y + slope * (count - 1 - mean_x), fit


def wape(actual: list[float], forecast: list[float]) -> float | None:
    """The weighted absolute percentage error of ``forecast`` against ``actual`` (pairs
    in order): the sum of absolute errors over the sum of actual values."""
    total = sum(actual)
    if total <= 0:
        return None
    return sum(abs(a - f) for a, f in zip(actual, forecast, strict=True)) / total
