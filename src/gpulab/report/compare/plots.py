"""The comparison's charts as inline SVG (matplotlib): each row's ratio to the baseline with its interval, and the
trend over the reports when more than two are compared."""

from __future__ import annotations

import math
import statistics

from gpulab.report.compare.comparison import Comparison
from gpulab.report.compare.keys import key_text
from gpulab.report.judge import SIDE_NAMES
from gpulab.report.plots import new_figure
from gpulab.report.templating import Markup, svg_figure

COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#9d755d", "#bab0ac")


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def ratio_chart(c: Comparison, labels: list[str]) -> Markup | None:
    """One line per row: each report's ratio to the baseline (a dot) and the interval of that ratio (a bar), the
    row's band (how far it may fall) as a red tick; regressions' labels in red."""
    rows = [r for r in c.rows if any(_finite(x) for x in r.ratios[1:])]
    if not rows or len(labels) < 2:
        return None
    fig = new_figure(11, 0.24 * len(rows) + 1.3)
    ax = fig.add_subplot(1, 1, 1)
    for y, row in enumerate(rows):
        for i in range(1, len(labels)):
            ratio = row.ratios[i]
            if not _finite(ratio):
                continue
            dy = (i - len(labels) / 2) * 0.12
            ci = row.ratio_interval(i)
            if ci is not None:
                ax.plot([ci.low, ci.high], [y + dy, y + dy], color=COLOURS[(i - 1) % len(COLOURS)], lw=2.2, alpha=0.5)
            ax.plot([ratio], [y + dy], "o", ms=3.5, color=COLOURS[(i - 1) % len(COLOURS)])
        if row.band_pct is not None:
            ax.plot([1 - row.band_pct / 100] * 2, [y - 0.35, y + 0.35], color="#c62828", lw=1)
    ax.axvline(1.0, color="#555", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([key_text(r.key) for r in rows], fontsize=7)
    for tick, row in zip(ax.get_yticklabels(), rows, strict=True):
        if row.regression:
            tick.set_color("#c62828")
    ax.invert_yaxis()
    ax.set_ylim(len(rows) - 0.5, -0.5)
    for i in range(1, len(labels)):
        ax.plot([], [], "o-", color=COLOURS[(i - 1) % len(COLOURS)], label=f"{labels[i]} / {labels[0]}")
    ax.plot([], [], color="#c62828", label="band: lowest ratio before a regression")
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(labels), frameon=False)
    ax.set_xlabel("ratio to the baseline (higher is faster); bars: the ratio's interval", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="x", alpha=0.3)
    return svg_figure(fig)


def trend_chart(c: Comparison, labels: list[str]) -> Markup | None:
    """With more than two reports: each row's ratio to the baseline over the reports, one panel per side (GPU,
    host-bound GPU, host), the sides' median in bold."""
    if len(labels) <= 2:
        return None
    sides = [s for s in SIDE_NAMES if any(r.side == s for r in c.rows)]
    if not sides:
        return None
    fig = new_figure(11, 2.6)
    xs = list(range(len(labels)))
    for k, side in enumerate(sides):
        ax = fig.add_subplot(1, len(sides), k + 1)
        series = [
            [x * 100 if x is not None and math.isfinite(x) else math.nan for x in r.ratios]
            for r in c.rows
            if r.side == side
        ]
        for ys in series:
            ax.plot(xs, ys, color="#999", lw=0.7, alpha=0.6)
        medians = [
            statistics.median([v for v in col if math.isfinite(v)] or [math.nan]) for col in zip(*series, strict=True)
        ]
        ax.plot(xs, medians, "o-", color="#4c78a8", lw=2, label="median")
        ax.axhline(100, color="#555", lw=0.8)
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(f"{SIDE_NAMES[side]} rows ({len(series)})", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3)
        if k == 0:
            ax.set_ylabel(f"% of {labels[0]}", fontsize=8)
            ax.legend(fontsize=7)
    return svg_figure(fig)
