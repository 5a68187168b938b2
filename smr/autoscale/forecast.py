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
of the last ``fallback_samples``, so the policy plans for the recent peak rather than for a
guess.

Loads with a period (a day, an hour; a square wave) are forecast as Daedalus and VISP do, from
the same point of the last period: the forecaster keeps the last ``history`` samples, finds
their period by autocorrelation (:func:`period_of`: the shortest lag whose autocorrelation
is at least ``period_fit_min`` and within ``period_tolerance`` of the best), and forecasts
seasonal-naive (each step ahead is the sample one period before it, shifted by how much the
last ``season_level_samples`` differ from the same samples a period earlier). The seasonal
path is used while its recent one-step error is below the smoothed level's: a load whose
period changes falls back by itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
    fallback_samples: int = 10
    """The fallback forecast is the highest of this many latest samples."""
    history: int = 600
    """Samples kept for finding a period (ten minutes at one a second)."""
    period_min: int = 6
    """The shortest period looked for, in samples."""
    period_fit_min: float = 0.6
    """A lag is a period only if the autocorrelation there is at least this."""
    period_tolerance: float = 0.1
    """The shortest lag within this of the best autocorrelation is the period (not a
    multiple of it)."""
    period_every: int = 5
    """The period is looked for again every this many samples."""
    season_level_samples: int = 3
    """The seasonal path is shifted by the mean difference of this many latest samples
    from the same samples one period earlier."""


@dataclass(frozen=True)
class Forecaster:
    """The forecast's state after the samples seen so far (a value: ``observe`` returns a
    new one)."""

    level: float | None = None
    recent: tuple[float, ...] = ()
    """The last ``window`` samples, oldest first."""
    errors: tuple[float, ...] = ()
    """The absolute errors of the one-step forecasts of the last samples."""
    history: tuple[float, ...] = ()
    """The last ``config.history`` samples, oldest first (where a period is looked for)."""
    period: int | None = None
    """The period found in ``history``, in samples (None: none found)."""
    seasonal_errors: tuple[float, ...] = ()
    """The absolute errors of the seasonal one-step forecasts of the last samples."""
    at_s: float | None = None
    """When the last sample was taken (None: the samples carry no time)."""

    def observe(
        self, config: ForecastConfig, value: float, at_s: float | None = None
    ) -> Forecaster:
        """The state after one more sample (tuples/s over the last interval), taken at
        ``at_s`` if given: intervals missed since the last sample (a controller busy with a
        scale action takes none) are filled in on the line between the two, so that a
        period counts in intervals, not in samples."""
        value = max(0.0, value)
        if at_s is not None and self.at_s is not None and self.history:
            missed = min(config.history, round((at_s - self.at_s) / config.interval_s) - 1)
            state, last = self, self.history[-1]
            for step in range(1, missed + 1):
                state = state.observe(config, last + (value - last) * step / (missed + 1))
            return replace(state.observe(config, value), at_s=at_s)
        if at_s is not None:
            return replace(self.observe(config, value), at_s=at_s)
        recent = (*self.recent, value)[-config.window :]
        history = (*self.history, value)[-config.history :]
        if self.level is None:
            return Forecaster(value, recent, (), history)
        error = abs(value - self._smoothed_path(config, 1)[0])
        seasonal_errors = self.seasonal_errors
        seasonal = self._seasonal_path(config, 1)
        if seasonal is not None:
            seasonal_errors = (*seasonal_errors, abs(value - seasonal[0]))[-config.window :]
        period = self.period
        if len(history) % config.period_every == 0:
            found = period_of(history, config, period)
            if found is None or period is None or abs(found - period) > found * 0.1:
                seasonal_errors = ()  # another period (or none): its errors start afresh
            period = found
        level = config.level_smoothing * value + (1 - config.level_smoothing) * self.level
        return Forecaster(
            level,
            recent,
            (*self.errors, error)[-config.window :],
            history,
            period,
            seasonal_errors,
        )

    def seasonal(self, config: ForecastConfig) -> bool:
        """Whether the forecast follows the period found: one was found, a whole period
        and the level samples are known, and the seasonal one-step forecasts of the last
        samples (at least a few) erred less than the smoothed level's."""
        if self.period is None or len(self.seasonal_errors) < SAMPLES_MIN:
            return False
        count = len(self.seasonal_errors)
        return sum(self.seasonal_errors) <= sum(self.errors[-count:])

    def wape(self) -> float | None:
        """The recent one-step forecasts' weighted absolute percentage error (None before
        any, or when the workload was zero throughout)."""
        actual = sum(self.recent[-len(self.errors) :]) if self.errors else 0.0
        return sum(self.errors) / actual if actual > 0 else None

    def fallback(self, config: ForecastConfig) -> bool:
        """Whether the forecast is the recent peak (the model's recent error is too high)."""
        wape = self.wape()
        return wape is not None and wape > config.wape_max

    def path(self, config: ForecastConfig, horizon_s: float | None = None) -> list[float]:
        """The forecast for each interval up to ``horizon_s`` (the configured horizon if
        None): the seasonal path when the load has a period that forecasts it well, else the
        smoothed one (never negative)."""
        steps = max(1, round((horizon_s or config.horizon_s) / config.interval_s))
        if self.seasonal(config):
            seasonal = self._seasonal_path(config, steps)
            if seasonal is not None:
                return seasonal
        return self._smoothed_path(config, steps)

    def _seasonal_path(self, config: ForecastConfig, steps: int) -> list[float] | None:
        """Seasonal naive: each step ahead is the sample one period before it, shifted by
        the recent level change (None without a period, or with less than one period and
        the level samples known)."""
        period, history = self.period, self.history
        shift_samples = config.season_level_samples
        if period is None or len(history) < period + shift_samples:
            return None
        latest = history[-shift_samples:]
        a_period_before = history[-period - shift_samples : -period]
        shift = (sum(latest) - sum(a_period_before)) / shift_samples
        path = []
        for step in range(1, steps + 1):
            back = period - (step - 1) % period  # the sample a period before the step
            path.append(max(0.0, history[-back] + shift))
        return path

    def _smoothed_path(self, config: ForecastConfig, steps: int) -> list[float]:
        """The level (or the recent line, or the recent peak) for ``steps`` intervals."""
        if self.level is None:
            return [0.0] * steps
        if self.fallback(config):
            return [max(self.recent[-config.fallback_samples :])] * steps
        tail = self.recent[-config.trend_samples :]
        if len(tail) >= SAMPLES_MIN:
            slope, last, fit = _line(tail)
            if fit >= config.trend_fit_min:
                return [max(0.0, last + slope * step) for step in range(1, steps + 1)]
        return [self.level] * steps

    def peak(self, config: ForecastConfig, horizon_s: float | None = None) -> float:
        """The highest forecast value up to ``horizon_s`` (the configured horizon if None)."""
        return max(self.path(config, horizon_s))

    def average(self, samples: int) -> float:
        """The mean of the last ``samples`` samples (0 before any)."""
        chosen = self.recent[-samples:]
        return sum(chosen) / len(chosen) if chosen else 0.0


def period_of(
    values: tuple[float, ...], config: ForecastConfig, current: int | None = None
) -> int | None:
    """The period of ``values`` in samples, by autocorrelation: among the peaks of the
    autocorrelation (lags from ``period_min`` up to where at least half a period overlaps),
    the shortest at least ``period_fit_min`` and within ``period_tolerance`` of the best
    (a multiple of the period correlates as well); ``current`` is kept while it stays that
    close and is not a multiple of that shortest lag (a flat-topped load correlates almost
    as well a lag either side; a period once taken at twice its length must not stick).
    None when no peak qualifies."""
    count = len(values)
    mean = sum(values) / count if count else 0.0
    centred = [value - mean for value in values]
    variance = sum(c * c for c in centred)
    if variance <= 0:
        return None
    scores: list[tuple[int, float]] = []
    lag = config.period_min
    while count - lag >= max(lag // 2, config.period_min):
        overlap = count - lag
        covariance = sum(centred[i] * centred[i + lag] for i in range(overlap))
        # Normalised by the overlap, so that long lags are not penalised for being short.
        scores.append((lag, covariance / overlap / (variance / count)))
        lag += 1
    peaks = [
        (lag, score)
        for index, (lag, score) in enumerate(scores[1:-1], start=1)
        if score >= scores[index - 1][1] and score >= scores[index + 1][1]
    ]
    if not peaks:
        return None
    best = max(score for _, score in peaks)
    if best < config.period_fit_min:
        return None
    floor = best - config.period_tolerance
    by_lag = dict(scores)
    shortest = next(lag for lag, score in peaks if score >= floor)
    if current is not None and by_lag.get(current, -1.0) >= floor and current < 1.5 * shortest:
        return current
    return shortest


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
