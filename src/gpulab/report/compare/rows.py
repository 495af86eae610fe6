"""The rows of a comparison: one measured configuration across the reports (`Row`), one check (`CheckRow`).

A row keeps every measurement of each report and, where the reports kept them, the timed windows: its cell shows
`median [low–high] (n)`, and the ratio to the baseline carries the interval of the ratio (gpulab.report.spread).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpulab.names import Launcher
from gpulab.records import Spread
from gpulab.report import spread
from gpulab.report.compare.keys import KEY_FIELDS, ResultKey
from gpulab.report.formatting import num, ratio_pct


@dataclass
class Row:
    """One measured configuration across the reports; `values[i]` (the median of `measurements[i]`) and
    `ratios[i]` belong to report i (None when absent)."""

    key: ResultKey
    unit: str
    values: list[float | None]
    ratios: list[float | None]
    status: str  # "ok", "regression", "only in A", "missing in B, C", "unit differs", "no baseline value"
    regressed_in: list[str] = field(default_factory=list)
    measurements: list[list[float]] = field(default_factory=list)  # every value per report, in report order
    ns: list[int | None] = field(default_factory=list)  # devices/threads each report used (different mode)
    watts: list[float | None] = field(default_factory=list)  # mean board power over the row's GPUs, summed
    side: str = "gpu"  # what sets the row's pace: "gpu", "host-bound" (a mostly idle GPU) or "host" (judge.side)
    band_pct: float | None = None  # how far below the baseline it may fall before it regresses (same mode)
    band_why: str = ""
    contended_in: list[str] = field(default_factory=list)  # reports whose fall a contended host explains (compare_host)
    # per report: the interval of its median from the timed windows it kept (None: none kept), and the interval of
    # its ratio to the baseline (None for the baseline, or without windows on both sides)
    intervals: list[Spread | None] = field(default_factory=list)
    ratio_intervals: list[Spread | None] = field(default_factory=list)

    def value_per_gpu(self, i: int) -> float | None:
        """Report i's value per GPU: value / n for a row over several GPUs, the value itself otherwise."""
        value = self.values[i]
        n = self.ns[i] if i < len(self.ns) else self.key[3]
        if value is None or self.key[2] == Launcher.CPU or self.key[5] or not n or n <= 1:
            return value
        return value / n

    def value_per_watt(self, i: int) -> float | None:
        value, watts = self.values[i], self.watts[i] if i < len(self.watts) else None
        return value / watts if value is not None and watts else None

    @property
    def regression(self) -> bool:
        return bool(self.regressed_in)

    def found(self, i: int) -> list[float]:
        """Every measurement report i holds for this row (its median alone when built without them)."""
        if i < len(self.measurements):
            return self.measurements[i]
        value = self.values[i]
        return [] if value is None else [value]

    def spread(self, i: int) -> tuple[float, float] | None:
        """(min, max) of report i's measurements; None when it has none."""
        found = self.found(i)
        return (min(found), max(found)) if found else None

    def spread_pct(self, i: int) -> float | None:
        """(max - min) / median of report i's measurements, in percent; None with fewer than two."""
        found = self.found(i)
        median = self.values[i]
        if len(found) < 2 or not median:
            return None
        return (max(found) - min(found)) / abs(median) * 100

    def interval(self, i: int) -> Spread | None:
        return self.intervals[i] if i < len(self.intervals) else None

    def ratio_interval(self, i: int) -> Spread | None:
        return self.ratio_intervals[i] if i < len(self.ratio_intervals) else None

    def cell(self, i: int) -> str:
        """Report i's value for a table: `median [low–high] (windows)` when it kept its timed windows, else the
        median, with the count and min–max when measured more than once."""
        figure = self.interval(i)
        if figure is not None and len(figure.windows) > 1:
            return spread.text(figure, num)
        found = self.found(i)
        if len(found) < 2:
            return num(self.values[i])
        return f"{num(self.values[i])} (median of {len(found)}: {num(min(found))}–{num(max(found))})"

    def to_dict(self, labels: Sequence[str]) -> dict[str, Any]:
        spreads = [self.spread(i) for i in range(len(labels))]
        found = [self.found(i) for i in range(len(labels))]
        return {
            **dict(zip(KEY_FIELDS, self.key, strict=True)),
            "unit": self.unit,
            "values": dict(zip(labels, self.values, strict=True)),
            "ratios": dict(zip(labels, self.ratios, strict=True)),
            "counts": {label: len(m) for label, m in zip(labels, found, strict=True)},
            "spread": {
                label: {"min": s[0], "max": s[1]} if s else None for label, s in zip(labels, spreads, strict=True)
            },
            "measurements": dict(zip(labels, found, strict=True)),
            "status": self.status,
            "regressed_in": self.regressed_in,
            "contended_in": self.contended_in,
            "side": self.side,
            "band_pct": self.band_pct,
            "band": self.band_why,
            "intervals": {
                label: _interval_dict(self.interval(i)) for i, label in enumerate(labels) if self.interval(i)
            },
            "ratio_intervals": {
                label: _interval_dict(self.ratio_interval(i))
                for i, label in enumerate(labels)
                if self.ratio_interval(i)
            },
        }


def _interval_dict(figure: Spread | None) -> dict[str, Any] | None:
    if figure is None:
        return None
    return {"median": figure.median, "low": figure.low, "high": figure.high, "windows": len(figure.windows)}


@dataclass
class CheckRow:
    name: str
    statuses: list[str | None]  # per report; None when the check did not run there
    messages: list[str | None]
    regressed_in: list[str] = field(default_factory=list)

    @property
    def regression(self) -> bool:
        return bool(self.regressed_in)

    def to_dict(self, labels: Sequence[str]) -> dict[str, Any]:
        return {
            "name": self.name,
            "statuses": dict(zip(labels, self.statuses, strict=True)),
            "messages": dict(zip(labels, self.messages, strict=True)),
            "regressed_in": self.regressed_in,
        }


def ratio_cell(row: Row, i: int) -> str:
    """Report i's change from the baseline, with the ratio's interval when both kept windows: "-3.1 % [-6.0…-0.2]"."""
    text = ratio_pct(row.ratios[i])
    between = row.ratio_interval(i)
    if between is None or row.ratios[i] is None:
        return text
    return f"{text} [{(between.low - 1) * 100:+.1f}…{(between.high - 1) * 100:+.1f}]"
