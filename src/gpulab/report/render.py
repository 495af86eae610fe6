"""Human-readable views of a report: Markdown, and one self-contained HTML page with plots.

The HTML page has inline CSS and inline PNG plots (matplotlib, Agg canvas), and no external URL, so it
can be mailed or archived as one file. All text from the report is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gpulab.report.io import atomic_write_text
from gpulab.report.model import STATUSES, Check, Report, Result, Scaling

DASH = "—"
MAX_TIMELINE_PLOTS = 12
MAX_SCALING_PLOTS = 12


# --- plain values ---------------------------------------------------------------------------------


def fmt_num(value: float | None, unit: str = "") -> str:
    """A measured number at a readable precision: 1,234 / 123.4 / 12.34 / 0.123."""
    if value is None:
        return DASH
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    mag = abs(value)
    if mag >= 1000:
        text = f"{value:,.0f}"
    elif mag >= 100:
        text = f"{value:.1f}"
    elif mag >= 1 or mag == 0:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".rstrip()


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f} %"


def _yes_no(value: bool | None) -> str:
    return DASH if value is None else ("on" if value else "off")


def _s(value: Any) -> str:
    return DASH if value is None or value == "" else str(value)


def pcie_text(link: dict[str, Any] | None, which: str) -> str:
    """Text like "gen5 x16" for `which` = "current" or "max"; "?" parts when unknown."""
    link = link or {}
    gen, width = link.get(f"gen_{which}"), link.get(f"width_{which}")
    if gen is None and width is None:
        return DASH
    return f"gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def platform_text(fp: dict[str, Any]) -> str:
    if fp.get("host") is None:  # a captured host: the capture says nothing about the platform
        captured = ", ".join(map(str, fp.get("captured_from") or [])) or "a capture"
        return f"not captured (judged from {captured})"
    host = fp["host"]
    hyp = host.get("hypervisor")
    if not hyp:
        return "bare metal"
    evidence = host.get("hypervisor_evidence") or []
    return f"VM ({hyp})" + (f" — evidence: {', '.join(map(str, evidence))}" if evidence else "")


def cpu_text(fp: dict[str, Any]) -> str:
    cpu = (fp.get("host") or {}).get("cpu") or {}
    parts = [str(cpu["model"])] if cpu.get("model") else []
    counts = [
        f"{cpu[k]} {label}"
        for k, label in (("sockets", "sockets"), ("cores", "cores"), ("threads", "threads"))
        if cpu.get(k) is not None
    ]
    if counts:
        parts.append(f"({', '.join(counts)})")
    return " ".join(parts) or DASH


def status_counts(checks: Sequence[Check]) -> dict[str, int]:
    counts: Counter[str] = Counter(c.status for c in checks)
    return {s: counts[s] for s in STATUSES}


def _counts_text(checks: Sequence[Check]) -> str:
    return " · ".join(f"{n} {s}" for s, n in status_counts(checks).items())


def software_rows(fp: dict[str, Any]) -> list[tuple[str, str]]:
    sw = fp.get("software") or {}
    rows = [
        ("NVIDIA driver", _s(sw.get("driver_version"))),
        ("CUDA (driver supports)", _s(sw.get("cuda_driver_version"))),
        ("nvcc", _s(sw.get("nvcc_version"))),
        ("cuDNN", _s(sw.get("cudnn_version"))),
        ("NCCL", _s(sw.get("nccl_version"))),
        ("Python", _s(sw.get("python"))),
    ]
    for tk in sw.get("toolkits") or []:
        rows.append((f"CUDA toolkit {tk.get('path', '')}".strip(), _s(tk.get("version"))))
    for fw in sw.get("frameworks") or []:
        extra = []
        for key, label in (("built_cuda", "CUDA"), ("built_cudnn", "cuDNN"), ("nccl", "NCCL")):
            if fw.get(key):
                extra.append(f"{label} {fw[key]}")
        if fw.get("sees_gpus") is not None:
            extra.append(f"sees {fw['sees_gpus']} GPU(s)")
        if fw.get("error"):
            extra.append(f"error: {fw['error']}")
        text = _s(fw.get("version")) + (f" ({', '.join(extra)})" if extra else "")
        rows.append((str(fw.get("name", "?")), text))
    return rows


GPU_HEADERS = ("#", "GPU", "Bus ID", "Memory", "PCIe now", "PCIe max", "NUMA", "ECC", "Persistence", "Mode")


def topology_table(fp: dict[str, Any]) -> tuple[tuple[str, ...], list[tuple[str, ...]]] | None:
    """`nvidia-smi topo -m`'s GPU-to-GPU matrix (NV# = bonded NVLinks, PIX/PXB/PHB/NODE/SYS = PCIe paths)."""
    matrix = fp.get("topology") or []
    if len(matrix) < 2:
        return None
    headers = ("", *(f"GPU{i}" for i in range(len(matrix))))
    return headers, [(f"GPU{i}", *row) for i, row in enumerate(matrix)]


def gpu_rows(fp: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for g in fp.get("gpus") or []:
        mem = g.get("memory_total_mib")
        rows.append(
            (
                _s(g.get("index")),
                _s(g.get("name")),
                _s(g.get("bus_id")),
                DASH if mem is None else f"{mem / 1024:.0f} GiB",
                pcie_text(g.get("pcie"), "current"),
                pcie_text(g.get("pcie"), "max"),
                _s(g.get("numa_node")),
                _yes_no(g.get("ecc_enabled")),
                _yes_no(g.get("persistence_mode")),
                _s(g.get("virtualization_mode")),
            )
        )
    return rows


RESULT_HEADERS = (
    "Workload",
    "Framework",
    "Launcher",
    "n",
    "Precision",
    "Device",
    "Value",
    "Spec",
    "% of spec",
)


def result_row(r: Result) -> tuple[str, ...]:
    return (
        r.workload,
        r.framework,
        r.launcher,
        str(r.n),
        r.precision,
        r.device or "all",
        fmt_num(r.value, r.unit),
        fmt_num(r.spec_value, r.unit) if r.spec_value is not None else DASH,
        _pct(r.pct_of_spec),
    )


SCALING_HEADERS = (
    "Workload",
    "Framework",
    "Launcher",
    "Precision",
    "n",
    "Throughput",
    "Speedup",
    "Efficiency",
    "Expected",
    "Source",
)


def scaling_row(s: Scaling) -> tuple[str, ...]:
    verdict = ""
    if s.expected is not None:
        verdict = " ✓" if s.efficiency >= s.expected else " ✗"
    return (
        s.workload,
        s.framework,
        s.launcher,
        s.precision,
        str(s.n),
        fmt_num(s.throughput),
        f"{s.speedup:.2f}x",
        f"{s.efficiency * 100:.1f} %{verdict}",
        DASH if s.expected is None else f"{s.expected * 100:.0f} %",
        _s(s.expected_source),
    )


def _title(report: Report) -> str:
    host = (report.fingerprint.get("host") or {}).get("hostname", "?")
    return f"gpulab report — {host}"


def _overview(report: Report) -> list[tuple[str, str]]:
    fp = report.fingerprint
    host = fp.get("host") or {}
    mem = host.get("memory_total_mib")
    numa = host.get("numa_nodes") or []
    rows = [
        ("Host", _s(host.get("hostname"))),
        ("Platform", platform_text(fp)),
        ("OS", _s(host.get("os"))),
        ("Kernel", _s(host.get("kernel"))),
        ("CPU", cpu_text(fp)),
        ("Memory", DASH if mem is None else f"{mem / 1024:.0f} GiB"),
        ("NUMA nodes", str(len(numa)) if numa else DASH),
        ("IOMMU", _yes_no(host.get("iommu_enabled"))),
        ("GPU source", _s(fp.get("gpu_source"))),
    ]
    if fp.get("gpu_absent_reason"):
        rows.append(("No GPU", str(fp["gpu_absent_reason"])))
    rows += [
        ("Tier", report.tier),
        ("Created", report.created),
        ("gpulab", report.gpulab_version),
    ]
    if report.command:
        rows.append(("Command", report.command))
    if report.duration_s is not None:
        rows.append(("Duration", f"{report.duration_s:.1f} s"))
    return rows


def _failures(report: Report) -> list[Check]:
    return [c for c in report.checks if c.status in ("fail", "error")]


# --- Markdown -------------------------------------------------------------------------------------


def _md_cell(value: Any) -> str:
    text = str(value).replace("\\", "\\\\").replace("|", "\\|")
    return " ".join(text.replace("\r", "").split("\n")).strip() or " "


def _md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def to_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown: fingerprint, checks, results, speedups, scaling, limits."""
    fp = report.fingerprint
    out: list[str] = [f"# {_title(report)}", ""]
    if report.interrupted:
        out += ["> **Interrupted:** the run was stopped before every test ran; results are partial.", ""]
    out += [*_md_table(("", ""), _overview(report)), ""]

    out += ["## GPUs", ""]
    gpus = gpu_rows(fp)
    if gpus:
        out += _md_table(GPU_HEADERS, gpus)
    else:
        out.append(f"No GPU found{': ' + fp['gpu_absent_reason'] if fp.get('gpu_absent_reason') else '.'}")
    topo = topology_table(fp)
    if topo:
        out += ["", "GPU topology:", "", *_md_table(*topo)]
    out += ["", "## Software", ""]
    out += _md_table(("Component", "Version"), software_rows(fp))
    env = (fp.get("software") or {}).get("env") or {}
    if env:
        out += ["", "Environment: " + ", ".join(f"`{k}={v}`" for k, v in sorted(env.items()))]

    out += ["", "## Checks", ""]
    if report.checks:
        out += [f"**{_counts_text(report.checks)}**", ""]
        failures = _failures(report)
        if failures:
            out += ["### Failures", ""]
            out += [f"- **{c.status.upper()}** `{c.name}`: {_md_cell(c.message)}" for c in failures]
            out.append("")
        out += _md_table(
            ("Status", "Check", "Message", "Threshold"),
            ((c.status, c.name, c.message, _s(c.threshold)) for c in report.checks),
        )
    else:
        out.append("No checks ran.")

    out += ["", "## Results", ""]
    if report.results:
        out += _md_table(RESULT_HEADERS, (result_row(r) for r in report.results))
    else:
        out.append("No measurements.")

    if report.speedups:
        out += ["", "## Speedups", ""]
        out += _md_table(
            ("Workload", "Framework", "Precision", "From", "To", "Speedup"),
            ((s.workload, s.framework, s.precision, s.from_, s.to, f"{s.ratio:.2f}x") for s in report.speedups),
        )
    if report.scaling:
        out += ["", "## Scaling", ""]
        out += _md_table(SCALING_HEADERS, (scaling_row(s) for s in report.scaling))
    if report.thresholds:
        out += ["", "## Thresholds", ""]
        out += _md_table(
            ("Name", "Value", "Source", "Basis"),
            ((t.name, f"{fmt_num(t.value)} {t.unit}", t.source, _s(t.basis)) for t in report.thresholds),
        )
    return "\n".join(out).rstrip() + "\n"


# --- plots ----------------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def plot_speedups(report: Report) -> str | None:
    """Horizontal bars of each speedup ratio; base64 PNG, or None when there is nothing to plot."""
    items = [s for s in report.speedups if math.isfinite(s.ratio) and s.ratio > 0]
    if not items:
        return None
    fig = _figure(8, 1.2 + 0.4 * len(items))
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
    return _png(fig)


def _scaling_groups(report: Report) -> dict[tuple[str, str, str, str], list[Scaling]]:
    groups: dict[tuple[str, str, str, str], list[Scaling]] = defaultdict(list)
    for s in report.scaling:
        groups[(s.workload, s.framework, s.launcher, s.precision)].append(s)
    return groups


def plot_scaling(points: list[Scaling]) -> str | None:
    """Throughput vs number of devices with the ideal (linear from n=1) line; None without data."""
    pts = sorted((s for s in points if math.isfinite(s.throughput)), key=lambda s: s.n)
    if not pts:
        return None
    base = next((s.throughput for s in pts if s.n == 1), None)
    if base is None:
        first = pts[0]
        base = first.throughput / first.speedup if first.speedup else None
    ns = [s.n for s in pts]
    fig = _figure(5.5, 3.6)
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
    return _png(fig)


def plot_cpu_threads(groups: dict[tuple[str, str, str, str], list[Scaling]]) -> str | None:
    """Every CPU thread-scaling group in one chart: speedup over one thread against threads, with the ideal line.

    One chart instead of one per workload: CPU rows are the baseline of the GPU figures, not the subject.
    """
    lines = {
        key: sorted((s for s in pts if math.isfinite(s.speedup)), key=lambda s: s.n)
        for key, pts in groups.items()
        if key[2] == "cpu"
    }
    lines = {key: pts for key, pts in lines.items() if len(pts) > 1}
    if not lines:
        return None
    fig = _figure(5.5, 3.6)
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
    return _png(fig)


def plot_timeline(result: Result) -> str | None:
    """Utilisation and power against time, one line per GPU; None when the result has no timeline."""
    tel = result.telemetry
    if tel is None or not tel.timeline:
        return None
    series: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for sample in tel.timeline:
        if isinstance(sample.get("t"), (int, float)) and isinstance(sample.get("index"), int):
            series[sample["index"]].append(sample)
    metrics = [
        (key, label)
        for key, label in (("util", "GPU util (%)"), ("power_w", "power (W)"))
        if any(isinstance(s.get(key), (int, float)) for samples in series.values() for s in samples)
    ]
    if not metrics:
        return None
    fig = _figure(8, 2.4 * len(metrics) + 0.6)
    axes = [fig.add_subplot(len(metrics), 1, i + 1) for i in range(len(metrics))]
    for ax, (key, label) in zip(axes, metrics, strict=True):
        for index in sorted(series):
            pts = sorted(
                ((s["t"], s[key]) for s in series[index] if isinstance(s.get(key), (int, float))),
                key=lambda p: p[0],
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1, label=f"GPU {index}")
        ax.set_ylabel(label)
        if key == "util":
            ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=min(8, max(1, len(series))), loc="lower right")
    axes[-1].set_xlabel("t (s)")
    axes[0].set_title(_result_label(result), fontsize=10)
    return _png(fig)


def _result_label(r: Result) -> str:
    dev = f" {r.device}" if r.device else ""
    return f"{r.workload} {r.framework} {r.launcher} n={r.n} {r.precision}{dev}"


def plot_pct_of_spec(report: Report) -> str | None:
    """Bars of each result as % of its datasheet figure; None when no result has a spec."""
    items = [r for r in report.results if r.pct_of_spec is not None and math.isfinite(r.pct_of_spec)]
    if not items:
        return None
    fig = _figure(8, 1.2 + 0.35 * len(items))
    ax = fig.add_subplot(1, 1, 1)
    ypos = list(range(len(items)))
    pcts = [float(r.pct_of_spec or 0.0) for r in items]
    ax.barh(ypos, pcts, color=["#54a24b" if p >= 50 else "#f58518" for p in pcts])
    ax.set_yticks(ypos)
    ax.set_yticklabels([_result_label(r) for r in items], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(100, color="#888", lw=0.8, ls="--")
    for y, p in zip(ypos, pcts, strict=True):
        ax.annotate(f"{p:.0f} %", (p, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    ax.set_xlim(0, max(110.0, max(pcts) * 1.1))
    ax.set_xlabel("% of datasheet spec")
    ax.set_title("Probe results vs spec")
    return _png(fig)


# --- HTML -----------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1200px;
color:#222;padding:0 1rem;line-height:1.4}
h1{font-size:1.6rem;border-bottom:2px solid #4c78a8;padding-bottom:.3rem}
h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f6f8}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#2e7d32;font-weight:600}.fail,.error{color:#c62828;font-weight:600}.skip{color:#777}
.banner{background:#fff3cd;border:1px solid #e0c36c;padding:.5rem 1rem}
.counts span{margin-right:1rem}
.failures li{margin:.3rem 0}
img.plot{max-width:100%;display:block;margin:.5rem 0}
code{background:#f4f6f8;padding:0 .2rem}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _html_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], num_cols: Sequence[int] = (), status_col: int = -1
) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = []
            if i in num_cols:
                cls.append("num")
            if i == status_col:
                cls.append(_e(cell))
            attr = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{_e(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _img(png: str | None, alt: str) -> str:
    if png is None:
        return ""
    return f'<img class="plot" alt="{_e(alt)}" src="data:image/png;base64,{png}">'


def to_html(report: Report) -> str:
    """One self-contained HTML page: inline CSS, inline PNG plots, no external resources."""
    fp = report.fingerprint
    parts: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(_title(report))}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(_title(report))}</h1>",
    ]
    if report.interrupted:
        parts.append(
            '<p class="banner"><strong>Interrupted:</strong> the run was stopped before every test ran; '
            "results are partial.</p>"
        )
    parts.append(_html_table(("Field", "Value"), _overview(report)))

    parts.append("<h2>GPUs</h2>")
    gpus = gpu_rows(fp)
    if gpus:
        parts.append(_html_table(GPU_HEADERS, gpus))
    else:
        reason = fp.get("gpu_absent_reason")
        parts.append(f"<p>No GPU found{': ' + _e(reason) if reason else '.'}</p>")
    topo = topology_table(fp)
    if topo:
        parts.append("<p>GPU topology (NV# = bonded NVLinks; PIX/PXB/PHB/NODE/SYS = PCIe paths):</p>")
        parts.append(_html_table(*topo))
    parts.append("<h2>Software</h2>")
    parts.append(_html_table(("Component", "Version"), software_rows(fp)))
    env = (fp.get("software") or {}).get("env") or {}
    if env:
        parts.append(
            "<p>Environment: " + ", ".join(f"<code>{_e(k)}={_e(v)}</code>" for k, v in sorted(env.items())) + "</p>"
        )

    parts.append("<h2>Checks</h2>")
    if report.checks:
        counts = status_counts(report.checks)
        parts.append(
            '<p class="counts">' + "".join(f'<span class="{s}">{n} {s}</span>' for s, n in counts.items()) + "</p>"
        )
        failures = _failures(report)
        if failures:
            parts.append("<h3>Failures</h3><ul class='failures'>")
            parts += [
                f'<li><span class="{c.status}">{_e(c.status.upper())}</span> <code>{_e(c.name)}</code>: '
                f"{_e(c.message)}</li>"
                for c in failures
            ]
            parts.append("</ul>")
        parts.append(
            _html_table(
                ("Status", "Check", "Message", "Threshold", "Seconds"),
                (
                    (
                        c.status,
                        c.name,
                        c.message,
                        _s(c.threshold),
                        DASH if c.seconds is None else f"{c.seconds:.1f}",
                    )
                    for c in report.checks
                ),
                num_cols=(4,),
                status_col=0,
            )
        )
    else:
        parts.append("<p>No checks ran.</p>")

    parts.append("<h2>Results</h2>")
    if report.results:
        parts.append(_html_table(RESULT_HEADERS, (result_row(r) for r in report.results), num_cols=(3, 6, 7, 8)))
        parts.append(_img(plot_pct_of_spec(report), "results as percent of spec"))
    else:
        parts.append("<p>No measurements.</p>")

    if report.speedups:
        parts.append("<h2>Speedups</h2>")
        parts.append(
            _html_table(
                ("Workload", "Framework", "Precision", "From", "To", "Speedup"),
                ((s.workload, s.framework, s.precision, s.from_, s.to, f"{s.ratio:.2f}x") for s in report.speedups),
                num_cols=(5,),
            )
        )
        parts.append(_img(plot_speedups(report), "speedups"))

    if report.scaling:
        parts.append("<h2>Scaling</h2>")
        parts.append(_html_table(SCALING_HEADERS, (scaling_row(s) for s in report.scaling), num_cols=(4, 5, 6, 7, 8)))
        groups = _scaling_groups(report)
        devices = [(key, pts) for key, pts in groups.items() if key[2] != "cpu"]
        for key, pts in devices[:MAX_SCALING_PLOTS]:
            parts.append(_img(plot_scaling(pts), "scaling " + " ".join(key)))
        parts.append(_img(plot_cpu_threads(groups), "CPU thread scaling"))

    timelines = [r for r in report.results if r.telemetry is not None and r.telemetry.timeline]
    if timelines:
        parts.append("<h2>GPU telemetry</h2>")
        for r in timelines[:MAX_TIMELINE_PLOTS]:
            parts.append(_img(plot_timeline(r), "telemetry " + _result_label(r)))
        if len(timelines) > MAX_TIMELINE_PLOTS:
            parts.append(f"<p>{len(timelines) - MAX_TIMELINE_PLOTS} more timelines are in the JSON report.</p>")

    if report.thresholds:
        parts.append("<h2>Thresholds</h2>")
        parts.append(
            _html_table(
                ("Name", "Value", "Source", "Basis"),
                ((t.name, f"{fmt_num(t.value)} {t.unit}", t.source, _s(t.basis)) for t in report.thresholds),
            )
        )
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def rendered_paths(json_path: Path) -> tuple[Path, Path]:
    """Where the Markdown and HTML views of `json_path` go: beside it, same stem."""
    json_path = Path(json_path)
    return json_path.with_suffix(".md"), json_path.with_suffix(".html")


def write_rendered(report: Report, json_path: Path) -> tuple[Path, Path]:
    """Write `<stem>.md` and `<stem>.html` beside the report JSON, atomically; returns both paths."""
    md_path, html_path = rendered_paths(json_path)
    atomic_write_text(md_path, to_markdown(report))
    atomic_write_text(html_path, to_html(report))
    return md_path, html_path
