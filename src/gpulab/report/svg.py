"""Inline SVG charts for the HTML page (per-GPU load gauges, the % of spec bar) and the escape that passes them."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpulab.report.model import Result
from gpulab.report.plots import result_label
from gpulab.report.views import DASH, finite_or_none

# --- inline SVG charts ----------------------------------------------------------------------------


class Markup(str):
    """Text that is already HTML (an inline chart): `escape` passes it through unescaped."""


def escape(value: Any) -> str:
    return str(value) if isinstance(value, Markup) else html.escape(str(value), quote=True)


@dataclass(frozen=True)
class Gauge:
    """One bar of a load chart: a GPU's mean and peak of one metric against its full scale."""

    mean: float | None
    peak: float | None
    scale: float | None  # the full bar: 100 %, total memory, power limit; None = the chart's largest peak
    text: str


def _n0(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f}"


def _of(value: float | None, total: float | None, unit: str) -> str:
    return f" ({value / total * 100:.0f} % of {total:.0f} {unit})" if value is not None and total else ""


def util_gauge(stats: dict[str, Any], gpu: dict[str, Any]) -> Gauge:
    mean, peak = finite_or_none(stats.get("util_mean")), finite_or_none(stats.get("util_max"))
    text = DASH if mean is None and peak is None else f"{_n0(mean)} % mean, {_n0(peak)} % max"
    return Gauge(mean, peak, 100.0, text)


def memory_gauge(stats: dict[str, Any], gpu: dict[str, Any]) -> Gauge:
    mean, peak = finite_or_none(stats.get("mem_mean_mib")), finite_or_none(stats.get("mem_max_mib"))
    total, shown = finite_or_none(gpu.get("memory_total_mib")), peak if peak is not None else mean
    gib = None if shown is None else shown / 1024
    text = DASH if gib is None else f"{gib:.1f} GiB max" + _of(gib, total and total / 1024, "GiB")
    return Gauge(mean, peak, total, text)


def power_gauge(stats: dict[str, Any], gpu: dict[str, Any]) -> Gauge:
    mean, peak = finite_or_none(stats.get("power_mean_w")), finite_or_none(stats.get("power_max_w"))
    limit = finite_or_none(gpu.get("power_limit_w"))
    text = DASH if mean is None and peak is None else f"{_n0(mean)} W mean, {_n0(peak)} max"
    return Gauge(mean, peak, limit, text + _of(mean, limit, "W"))


# metric id, panel title, bar colour, gauge
LOAD_METRICS = (
    ("util", "GPU utilisation", "#4c78a8", util_gauge),
    ("mem", "Memory used", "#2a9d8f", memory_gauge),
    ("power", "Power", "#e07b00", power_gauge),
)
LABEL_W, PANEL_W, BAR_W, BAR_H, ROW_H, HEAD_H = 52, 360, 130, 12, 18, 18


def gpu_facts(fp: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    return {g.get("index"): g for g in fp.get("gpus") or []}


def _load_rows(result: Result, gpus: dict[Any, dict[str, Any]]) -> list[tuple[Any, list[Gauge]]]:
    stats = [s for s in (result.telemetry.per_gpu if result.telemetry else []) if isinstance(s, dict)]
    return [(s.get("index"), [m[3](s, gpus.get(s.get("index")) or {}) for m in LOAD_METRICS]) for s in stats]


def _scales(rows: list[tuple[Any, list[Gauge]]]) -> list[float]:
    """Each metric's full bar: its own scale, else the largest value any GPU reached in this chart."""
    out = []
    for k in range(len(LOAD_METRICS)):
        seen = [v for _, g in rows for v in (g[k].mean, g[k].peak) if v is not None]
        out.append(max(seen, default=1.0) or 1.0)
    return out


def _svg_bar(x: float, y: float, gauge: Gauge, scale: float, metric: tuple[str, str, str, Any], gpu: Any) -> str:
    name, title, colour = metric[:3]
    full = gauge.scale or scale

    def width(v: float | None) -> float:
        return 0.0 if v is None else round(BAR_W * max(0.0, min(v / full, 1.0)), 1)

    attrs = (
        f'data-metric="{name}" data-gpu="{escape(gpu)}" data-mean="{escape(gauge.mean)}" '
        f'data-max="{escape(gauge.peak)}"'
    )
    return (
        f"<g {attrs}><title>GPU {escape(gpu)} {escape(title)}: {escape(gauge.text)}</title>"
        f'<rect x="{x}" y="{y}" width="{BAR_W}" height="{BAR_H}" fill="#eef1f4"/>'
        f'<rect x="{x}" y="{y}" width="{width(gauge.peak)}" height="{BAR_H}" fill="{colour}" opacity="0.35"/>'
        f'<rect x="{x}" y="{y}" width="{width(gauge.mean)}" height="{BAR_H}" fill="{colour}"/>'
        f'<text x="{x + BAR_W + 6}" y="{y + BAR_H - 2}">{escape(gauge.text)}</text></g>'
    )


def load_chart(result: Result, gpus: dict[Any, dict[str, Any]]) -> str | None:
    """Per GPU, bars of utilisation, memory and power side by side (dark: mean, light: peak); an inline
    SVG, or None when the result has no per-GPU telemetry."""
    rows = _load_rows(result, gpus)
    if not rows:
        return None
    w, h = LABEL_W + PANEL_W * len(LOAD_METRICS), HEAD_H + ROW_H * len(rows)
    parts = [
        f'<svg class="load" role="img" aria-label="GPU load: {escape(result_label(result))}" '
        f'viewBox="0 0 {w} {h}" width="{w}" height="{h}">',
        *(
            f'<text class="head" x="{LABEL_W + k * PANEL_W}" y="12">{escape(m[1])}</text>'
            for k, m in enumerate(LOAD_METRICS)
        ),
    ]
    scales = _scales(rows)
    for r, (gpu, gauges) in enumerate(rows):
        y = HEAD_H + r * ROW_H
        parts.append(f'<text x="0" y="{y + BAR_H - 2}">GPU {escape(gpu)}</text>')
        parts += [_svg_bar(LABEL_W + k * PANEL_W, y, gauges[k], scales[k], m, gpu) for k, m in enumerate(LOAD_METRICS)]
    return "".join([*parts, "</svg>"])


PCT_BAR_MAX = 120.0  # % of a reference figure at the bar's end, so 100 % (the tick) sits inside it


def pct_bar(values: Sequence[float | None]) -> str:
    """A small bar for a % of a reference: dark up to the worst device, light up to the best."""
    nums = sorted(v for v in values if v is not None)
    if not nums:
        return ""
    w = 120

    def x(v: float) -> float:
        return round(w * max(0.0, min(v, PCT_BAR_MAX)) / PCT_BAR_MAX, 1)

    tick = x(100.0)
    return (
        f'<svg class="pct" viewBox="0 0 {w} 12" width="{w}" height="12" role="img" aria-label="{nums[0]:.1f} %">'
        f'<rect width="{w}" height="12" fill="#eef1f4"/>'
        f'<rect width="{x(nums[-1])}" height="12" fill="#4c78a8" opacity="0.35"/>'
        f'<rect width="{x(nums[0])}" height="12" fill="#4c78a8"/>'
        f'<line x1="{tick}" x2="{tick}" y1="0" y2="12" stroke="#333"/></svg>'
    )
