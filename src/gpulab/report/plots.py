"""The report's plots as inline SVG (matplotlib): speedups, scaling, CPU threads, timelines, % of spec."""

from __future__ import annotations

import math
from typing import Any

from gpulab.names import Launcher
from gpulab.records import Report, Result, Scaling
from gpulab.report.templating import Markup, svg_figure

# --- plots ----------------------------------------------------------------------------------------


def new_figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def plot_speedups(report: Report) -> Markup | None:
    """Horizontal bars of each speedup ratio; inline SVG, or None when there is nothing to plot."""
    items = [s for s in report.speedups if math.isfinite(s.ratio) and s.ratio > 0]
    if not items:
        return None
    fig = new_figure(8, 1.2 + 0.4 * len(items))
    ax = fig.add_subplot(1, 1, 1)
    labels = [f"{s.workload} {s.framework} {s.precision}: {s.from_} → {s.to}" for s in items]
    ratios = [s.ratio for s in items]
    ypos = list(range(len(items)))
    ax.barh(ypos, ratios, color="#4c78a8")
    ax.set_yticks(ypos)
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    if max(ratios) / min(ratios) > 50:
        ax.set_xscale("log")
    ax.axvline(1.0, color="#888", lw=0.8)
    for y, r in zip(ypos, ratios, strict=True):
        ax.annotate(f"{r:.2f}x", (r, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_xlabel("speedup (x)")
    ax.set_title("Speedups")
    return svg_figure(fig)


def plot_scaling(points: list[Scaling]) -> Markup | None:
    """Throughput vs number of devices with the ideal (linear from n=1) line; None without data."""
    pts = sorted((s for s in points if math.isfinite(s.throughput)), key=lambda s: s.n)
    if not pts:
        return None
    base = next((s.throughput for s in pts if s.n == 1), None)
    if base is None:
        first = pts[0]
        base = first.throughput / first.speedup if first.speedup else None
    ns = [s.n for s in pts]
    fig = new_figure(5.5, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(ns, [s.throughput for s in pts], "o-", color="#4c78a8", label="measured")
    if base:
        ideal_ns = sorted({1, *ns})
        ax.plot(ideal_ns, [base * n for n in ideal_ns], "--", color="#999", label="ideal (linear)")
    for s in pts:
        if s.expected is not None and base:
            ax.plot([s.n], [base * s.n * s.expected], "x", color="#e45756")
    if any(s.expected is not None for s in pts) and base:
        ax.plot([], [], "x", color="#e45756", label="expected efficiency")
    p = pts[0]
    ax.set_title(f"{p.workload} {p.framework} {p.launcher} {p.precision}", fontsize=10)
    ax.set_xlabel("devices (n)")
    ax.set_ylabel("throughput")
    ax.set_xticks(sorted({1, *ns}) if base else ns)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return svg_figure(fig)


def plot_cpu_threads(groups: dict[tuple[str, str, str, str], list[Scaling]]) -> Markup | None:
    """Every CPU thread-scaling group in one chart: speedup over one thread against threads, with the ideal line.

    One chart instead of one per workload: CPU rows are the baseline of the GPU figures, not the subject.
    """
    lines = {
        key: sorted((s for s in pts if math.isfinite(s.speedup)), key=lambda s: s.n)
        for key, pts in groups.items()
        if key[2] == Launcher.CPU
    }
    lines = {key: pts for key, pts in lines.items() if len(pts) > 1}
    if not lines:
        return None
    fig = new_figure(5.5, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    threads = sorted({s.n for pts in lines.values() for s in pts})
    ax.plot(threads, threads, "--", color="#999", label="ideal (linear)")
    for (workload, framework, _launcher, precision), pts in sorted(lines.items()):
        ax.plot([s.n for s in pts], [s.speedup for s in pts], "o-", label=f"{workload} {framework} {precision}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_title("CPU threads: speedup over one thread", fontsize=10)
    ax.set_xlabel("threads")
    ax.set_ylabel("speedup (x)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return svg_figure(fig)


def result_label(r: Result) -> str:
    dev = f" {r.device}" if r.device else ""
    return f"{r.series()} {r.framework} {r.launched()} n={r.n} {r.precision}{dev}"


def plot_pct_of_spec(report: Report) -> Markup | None:
    """Bars of each result as % of its datasheet figure; None when no result has a spec."""
    items = [r for r in report.results if r.pct_of_spec is not None and math.isfinite(r.pct_of_spec)]
    if not items:
        return None
    fig = new_figure(8, 1.2 + 0.35 * len(items))
    ax = fig.add_subplot(1, 1, 1)
    ypos = list(range(len(items)))
    pcts = [float(r.pct_of_spec or 0.0) for r in items]
    ax.barh(ypos, pcts, color=["#54a24b" if p >= 50 else "#f58518" for p in pcts])
    ax.set_yticks(ypos)
    ax.set_yticklabels([result_label(r) for r in items], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(100, color="#888", lw=0.8, ls="--")
    for y, p in zip(ypos, pcts, strict=True):
        ax.annotate(f"{p:.0f} %", (p, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_xlim(0, max(110.0, max(pcts) * 1.1))
    ax.set_xlabel("% of datasheet spec")
    ax.set_title("Probe results vs spec")
    return svg_figure(fig)
