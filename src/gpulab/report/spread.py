"""A timed figure's spread: its windows, their median and an interval, and how a bound judges it.

Every timed figure is several windows after warm-up. The interval of the median is distribution-free: the order
statistics that scipy's `quantile_test` gives for the median at CONFIDENCE (x2..x7 of 8 windows, x1..x5 of 5); fewer
than 5 windows cannot reach that confidence, so their interval is their range, with the confidence it has. A ratio
of two figures (N GPUs over one, a row over its known-good figure) gets a percentile bootstrap interval from scipy,
seeded so that the same windows always give the same interval.

A bound judges an interval, not a number: below it when the interval's top is under the bound, above it when the
interval's bottom clears it, and "straddling" otherwise (measure again with more windows; still straddling, the
check is marginal).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from gpulab.records import Result, Spread

CONFIDENCE = 0.9
MIN_WINDOWS_FOR_CONFIDENCE = 5  # the fewest windows whose range covers the median with >= 90 %
BOOTSTRAP_RESAMPLES = 2000
SEED = 20261127  # fixed: a verdict must not depend on the bootstrap's draw

Position = Literal["above", "below", "straddles"]


def _coverage_of_range(n: int) -> float:
    """The confidence that the range of n windows holds their distribution's median (order statistics)."""
    from scipy.stats import binom

    return float(1 - 2 * binom.cdf(0, n, 0.5))


def of_windows(windows: Sequence[float], unit: str = "") -> Spread:
    """The median of `windows` (each a rate, higher is better) and its order-statistic interval."""
    import numpy as np
    from scipy.stats import quantile_test

    values = [float(w) for w in windows]
    if not values:
        raise ValueError("a spread needs at least one window")
    median = float(np.median(values))
    if len(values) < MIN_WINDOWS_FOR_CONFIDENCE:
        confidence = _coverage_of_range(len(values)) if len(values) > 1 else 0.0
        return Spread(values, median, min(values), max(values), round(confidence, 4), "range", unit)
    ci = quantile_test(values, q=median, p=0.5).confidence_interval(confidence_level=CONFIDENCE)
    low, high = float(ci.low), float(ci.high)
    return Spread(values, median, min(low, median), max(high, median), CONFIDENCE, "order statistics", unit)


def of_ratio(top: Sequence[float], bottom: Sequence[float], scale: float = 1.0, unit: str = "") -> Spread:
    """median(top) / median(bottom) * scale with a bootstrap interval over both sides' windows.

    The windows of the result are the paired ratios (top[k] / bottom[k] * scale, as many as the shorter side has):
    what a reader sees of the spread. With fewer than 3 windows a side, the interval is the range of every ratio
    of a top window over a bottom window."""
    import numpy as np
    from scipy.stats import bootstrap

    a = np.asarray(top, dtype=float)
    b = np.asarray(bottom, dtype=float)
    if a.size == 0 or b.size == 0 or np.any(b <= 0):
        raise ValueError("a ratio needs positive windows on both sides")
    value = float(np.median(a) / np.median(b) * scale)
    paired = [float(x / y * scale) for x, y in zip(a, b, strict=False)]
    if min(a.size, b.size) < 3:
        every = (a[:, None] / b[None, :] * scale).ravel()
        return Spread(paired, value, float(min(every.min(), value)), float(max(every.max(), value)), 0.0, "range", unit)

    def statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(x, axis=axis) / np.median(y, axis=axis) * scale

    options = {
        "n_resamples": BOOTSTRAP_RESAMPLES,
        "confidence_level": CONFIDENCE,
        "method": "percentile",
        "vectorized": True,
        "paired": False,
    }
    try:
        res = bootstrap((a, b), statistic, rng=np.random.default_rng(SEED), **options)
    except TypeError:  # scipy < 1.15 names the generator random_state
        res = bootstrap((a, b), statistic, random_state=np.random.default_rng(SEED), **options)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return Spread(paired, value, min(low, value), max(high, value), CONFIDENCE, "bootstrap", unit)


def scaled(spread: Spread, factor: float, unit: str | None = None) -> Spread:
    """The same spread in other units (a % of a datasheet figure, TFLOP/s from seconds)."""
    return Spread(
        [w * factor for w in spread.windows],
        spread.median * factor,
        spread.low * factor,
        spread.high * factor,
        spread.confidence,
        spread.method,
        spread.unit if unit is None else unit,
    )


def windows_of(result: Result) -> list[float]:
    """A row's windows; a row timed as one window (an older report, a TensorFlow run) is its one value. The row's
    value is the authority: windows whose median disagrees with it (a hand-edited or transcribed report) are scaled
    to it."""
    if result.spread is None:
        return [result.value]
    median = result.spread.median
    if median > 0 and abs(result.value / median - 1) > 1e-9:
        return [w * result.value / median for w in result.spread.windows]
    return list(result.spread.windows)


def position(spread: Spread, bound: float) -> Position:
    """Where the interval lies against a floor: "above" it, "below" it, or "straddles" it."""
    if spread.low >= bound:
        return "above"
    if spread.high < bound:
        return "below"
    return "straddles"


def merged(first: Spread, again: Spread) -> Spread:
    """The windows of a measurement and of its re-measure as one spread (same unit)."""
    return of_windows([*first.windows, *again.windows], first.unit)


def text(spread: Spread, fmt: Callable[[float], str] = lambda v: f"{v:.4g}") -> str:
    """`median [low–high] (n)` as pages and compare show it."""
    return f"{fmt(spread.median)} [{fmt(spread.low)}–{fmt(spread.high)}] ({len(spread.windows)})"
