"""The figures behind the HTML page's small SVG charts (per-GPU load gauges); the markup is in the template
`load_chart.svg.j2`. `escape` and `Markup` are markupsafe's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import escape

from gpulab.records import GpuTelemetry, Result
from gpulab.report.plots import result_label
from gpulab.report.templating import Markup, render
from gpulab.report.timeline import too_short
from gpulab.report.views import DASH, finite_or_none

__all__ = ["Gauge", "Markup", "escape", "load_chart"]

# --- inline SVG charts ----------------------------------------------------------------------------


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


def util_gauge(stats: GpuTelemetry, gpu: dict[str, Any]) -> Gauge:
    mean, peak = finite_or_none(stats.util_mean), finite_or_none(stats.util_max)
    text = DASH if mean is None and peak is None else f"{_n0(mean)} % mean, {_n0(peak)} % max"
    return Gauge(mean, peak, 100.0, text)


def memory_gauge(stats: GpuTelemetry, gpu: dict[str, Any]) -> Gauge:
    mean, peak = finite_or_none(stats.mem_mean_mib), finite_or_none(stats.mem_max_mib)
    total, shown = finite_or_none(gpu.get("memory_total_mib")), peak if peak is not None else mean
    gib = None if shown is None else shown / 1024
    text = DASH if gib is None else f"{gib:.1f} GiB max" + _of(gib, total and total / 1024, "GiB")
    return Gauge(mean, peak, total, text)


def power_gauge(stats: GpuTelemetry, gpu: dict[str, Any]) -> Gauge:
    mean, peak = finite_or_none(stats.power_mean_w), finite_or_none(stats.power_max_w)
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


TOO_SHORT = Gauge(None, None, None, "too short to sample")


def _load_rows(result: Result, gpus: dict[Any, dict[str, Any]]) -> list[tuple[Any, list[Gauge]]]:
    """Per GPU its gauges; a window shorter than the sampling interval gets none ("too short to sample")."""
    stats = result.telemetry.per_gpu if result.telemetry else []
    interval = result.telemetry.interval_s if result.telemetry else None
    return [
        (s.index, [TOO_SHORT if too_short(s, interval) else m[3](s, gpus.get(s.index) or {}) for m in LOAD_METRICS])
        for s in stats
    ]


def _scales(rows: list[tuple[Any, list[Gauge]]]) -> list[float]:
    """Each metric's full bar: its own scale, else the largest value any GPU reached in this chart."""
    out = []
    for k in range(len(LOAD_METRICS)):
        seen = [v for _, g in rows for v in (g[k].mean, g[k].peak) if v is not None]
        out.append(max(seen, default=1.0) or 1.0)
    return out


def _bar(x: float, y: float, gauge: Gauge, scale: float, metric: tuple[str, str, str, Any], gpu: Any) -> dict[str, Any]:
    name, title, colour = metric[:3]
    full = gauge.scale or scale

    def width(v: float | None) -> float:
        return 0.0 if v is None else round(BAR_W * max(0.0, min(v / full, 1.0)), 1)

    return {
        "x": x,
        "y": y,
        "w": BAR_W,
        "h": BAR_H,
        "metric": name,
        "title": title,
        "colour": colour,
        "gpu": gpu,
        "mean": gauge.mean,
        "peak": gauge.peak,
        "text": gauge.text,
        "mean_w": width(gauge.mean),
        "peak_w": width(gauge.peak),
    }


def load_chart(result: Result, gpus: dict[Any, dict[str, Any]]) -> Markup | None:
    """Per GPU, bars of utilisation, memory and power side by side (dark: mean, light: peak); an inline
    SVG, or None when the result has no per-GPU telemetry."""
    rows = _load_rows(result, gpus)
    if not rows:
        return None
    scales = _scales(rows)
    chart_rows = []
    for r, (gpu, gauges) in enumerate(rows):
        y = HEAD_H + r * ROW_H
        bars = [_bar(LABEL_W + k * PANEL_W, y, gauges[k], scales[k], m, gpu) for k, m in enumerate(LOAD_METRICS)]
        chart_rows.append({"gpu": gpu, "y": y + BAR_H - 2, "bars": bars})
    return Markup(
        render(
            "load_chart.svg.j2",
            label=result_label(result),
            w=LABEL_W + PANEL_W * len(LOAD_METRICS),
            h=HEAD_H + ROW_H * len(rows),
            heads=[(LABEL_W + k * PANEL_W, m[1]) for k, m in enumerate(LOAD_METRICS)],
            rows=chart_rows,
        ).strip()
    )
