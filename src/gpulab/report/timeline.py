"""One telemetry timeline per GPU for the whole run, each timed window shaded and named (inline SVG, matplotlib).

Each timed measurement samples its GPUs from its own start (`TelemetrySummary.timeline`, `t` from 0); rows measured
in one job (1 and N GPUs interleaved) share one sampler and so one stretch. The run's timeline joins the stretches in
the report's order, a thin line between them; the report keeps no clock between stretches, so gaps are not drawn.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpulab.records import GpuTelemetry, Report, Result
from gpulab.report.plots import new_figure
from gpulab.report.templating import Markup, svg_figure

GAP_S = 1.0  # the space drawn between two stretches

# timeline key, axis label, factor from the sampled unit to the plotted one, fixed y range or None
METRICS = (
    ("util", "util %", 1.0, (0, 105)),
    ("mem_mib", "memory GiB", 1 / 1024, None),
    ("power_w", "power W", 1.0, None),
    ("sm_mhz", "SM MHz", 1.0, None),
    ("temp_c", "temp °C", 1.0, None),
)


@dataclass
class Stretch:
    """One sampler's samples: the rows it timed, their window, its samples per GPU."""

    names: list[str]
    window: tuple[float, float] | None
    interval_s: float
    samples: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    throttle: dict[int, dict[str, int]] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return max((s["t"] for pts in self.samples.values() for s in pts), default=0.0)


def short_name(r: Result) -> str:
    dev = f" {r.device}" if r.device else ""
    return f"{r.series()} {r.launched()} n={r.n}{dev}"


def _window(r: Result) -> tuple[float, float] | None:
    stats = r.telemetry.per_gpu if r.telemetry else []
    return next((span for span in (_closed(s.window_s) for s in stats) if span is not None), None)


def _closed(span: Any) -> tuple[float, float] | None:
    """A recorded window as (start, end) seconds; None for the whole run, an open end or a malformed entry."""
    if isinstance(span, (list, tuple)) and len(span) == 2:
        start, end = span
        if isinstance(start, (int, float)) and isinstance(end, (int, float)):
            return float(start), float(end)
    return None


def stretches(report: Report) -> list[Stretch]:
    """The run's sampled stretches in report order; rows that shared a sampler share one stretch."""
    out: list[Stretch] = []
    seen: dict[tuple[Any, ...], Stretch] = {}
    for r in report.results:
        if r.telemetry is None or not r.telemetry.timeline:
            continue
        by_gpu: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for s in r.telemetry.timeline:
            if isinstance(s.get("t"), (int, float)) and isinstance(s.get("index"), int):
                by_gpu[s["index"]].append(s)
        if not by_gpu:
            continue
        end = max(s["t"] for pts in by_gpu.values() for s in pts)
        key = (round(end, 2), _window(r))
        stretch = seen.get(key)
        if stretch is None:
            stretch = seen[key] = Stretch([], _window(r), r.telemetry.interval_s)
            out.append(stretch)
        stretch.names.append(short_name(r))
        for index, pts in by_gpu.items():
            if len(pts) > len(stretch.samples.get(index, [])):
                stretch.samples[index] = sorted(pts, key=lambda s: s["t"])
        for st in r.telemetry.per_gpu:
            if st.throttle_counts:
                stretch.throttle[st.index] = dict(st.throttle_counts)
    return out


def window_name(stretch: Stretch) -> str:
    """ "resnet50 ddp n=1 / n=2" for rows that shared a window, else the names joined."""
    first, *rest = stretch.names
    head = first.rsplit(" n=", 1)[0]
    if rest and all(n.rsplit(" n=", 1)[0] == head for n in rest):
        return first + "".join(" / n=" + n.rsplit(" n=", 1)[1] for n in rest)
    return " + ".join(stretch.names)


def _metrics(parts: list[Stretch], index: int) -> list[tuple[str, str, float, Any]]:
    def has(key: str) -> bool:
        return any(isinstance(s.get(key), (int, float)) for p in parts for s in p.samples.get(index, []))

    return [m for m in METRICS if has(m[0])]


def _draw(axes: list[Any], metrics: list[Any], parts: list[Stretch], index: int) -> None:
    offset = 0.0
    for n, part in enumerate(parts):
        pts = part.samples.get(index, [])
        for ax, (key, _label, scale, _lim) in zip(axes, metrics, strict=True):
            xy = [(offset + s["t"], s[key] * scale) for s in pts if isinstance(s.get(key), (int, float))]
            if xy:
                ax.plot([p[0] for p in xy], [p[1] for p in xy], lw=0.9, color="#4c78a8")
            if n:
                ax.axvline(offset - GAP_S / 2, color="#999", lw=0.6, ls=":")
            if part.window and pts:
                ax.axvspan(offset + part.window[0], offset + part.window[1], color="#f58518", alpha=0.18, lw=0)
        if part.window and pts:
            label = window_name(part)
            if part.throttle.get(index):
                label += " · throttled: " + ", ".join(sorted(part.throttle[index]))
            axes[0].annotate(
                f"{n + 1}. {label}",
                (offset + part.window[0], 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(1, 2),
                textcoords="offset points",
                rotation=30,
                fontsize=7,
                va="bottom",
                ha="left",
            )
        offset += part.end + GAP_S


XLABEL = "sampled seconds of the run (stretches joined; shaded: timed windows)"


def plot_gpu_timeline(parts: list[Stretch], index: int, xlabel: str = XLABEL) -> Markup | None:
    """GPU `index` over the whole run: its sampled metrics stacked, the timed windows shaded and numbered."""
    metrics = _metrics(parts, index)
    if not metrics:
        return None
    fig = new_figure(11, 1.05 * len(metrics) + 1.6)
    axes = [fig.add_subplot(len(metrics), 1, i + 1) for i in range(len(metrics))]
    for ax, (_key, label, _scale, lim) in zip(axes, metrics, strict=True):
        ax.set_ylabel(label, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if lim:
            ax.set_ylim(*lim)
    _draw(axes, metrics, parts, index)
    for ax in axes[:-1]:
        ax.tick_params(labelbottom=False)
    axes[-1].set_xlabel(xlabel, fontsize=8)
    for ax in axes:
        ax.set_xlim(left=0)
    fig.subplots_adjust(hspace=0.12)
    return svg_figure(fig)


def gpu_timelines(report: Report) -> list[tuple[int, Markup]]:
    """One timeline per GPU that was sampled: (its index, the SVG)."""
    parts = stretches(report)
    gpus = sorted({i for p in parts for i in p.samples})
    return [(i, svg) for i in gpus if (svg := plot_gpu_timeline(parts, i)) is not None]


def too_short(stats: GpuTelemetry, interval_s: float | None) -> bool:
    """A timed window shorter than the sampling interval (or with no sample in it): its means say nothing."""
    span = _closed(stats.window_s)
    if stats.samples == 0:
        return True
    return span is not None and bool(interval_s) and (span[1] - span[0]) < float(interval_s or 0)
