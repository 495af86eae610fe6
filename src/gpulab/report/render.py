"""Human-readable views of a report: Markdown, and one self-contained HTML page with plots.

Both open with a front page (the verdict, each failure with its cause and fix, the key figures against
the datasheet and baseline, speedups and scaling) and keep every detail below it. The HTML page has
inline CSS, inline PNG plots (matplotlib, Agg canvas) and inline SVG charts, and no external URL, so it
can be mailed or archived as one file. All text from the report is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.report.formatting import stand_ins_summary
from gpulab.report.io import atomic_write_text
from gpulab.report.model import STATUSES, Check, Report, Result, Scaling, Speedup

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


def _pct1(value: float) -> str:
    return f"{value:.1f}"


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
        r.series(),
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
    return f"gpulab report — {machine_name(report)}"


def machine_name(report: Report) -> str:
    """The host's name; for a capture (no host facts), the capture file and its GPUs."""
    fp = report.fingerprint
    host = (fp.get("host") or {}).get("hostname")
    if host:
        return str(host)
    names = Counter(str(g.get("name", "?")) for g in fp.get("gpus") or [])
    gpus = ", ".join(f"{n} × {name}" for name, n in names.items()) or "no GPU"
    source = str(fp.get("gpu_source") or "")
    if source.startswith("nvidia-smi-xml:"):
        return f"capture {Path(source.removeprefix('nvidia-smi-xml:')).name} ({gpus})"
    return gpus


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


# --- front page: the verdict, what failed and why, the key figures -----------------------------------

VERDICT_WORDS = {
    "pass": "PASS",
    "fail": "FAIL",
    "interrupted": "INTERRUPTED",
    "empty": "NO CHECKS",
    "inconclusive": "INCONCLUSIVE",
}
# The checks that define a healthy GPU: its count, driver, memory, ECC (or its absence by product class) and link.
# A run where none of them could judge anything (all skipped) proves nothing about the GPUs.
DEFINING_CHECKS = (
    "health.gpu_count",
    "health.driver_for_cuda",
    "health.stack_supports_arch",
    "health.ecc",
    "health.memory_retirement",
    "health.pcie_link",
)


def _defining(report: Report) -> list[Check]:
    return [c for c in report.checks if c.name.split("[")[0] in DEFINING_CHECKS]


# A zero replay counter is also what a board that reports little says: alone it judges nothing of the board.
NOT_OF_THE_BOARD_STATE = ("health.pcie_replays",)


def _per_gpu_health(report: Report) -> list[Check]:
    return [
        c
        for c in report.checks
        if c.name.startswith("health.") and "[" in c.name and c.name.split("[")[0] not in NOT_OF_THE_BOARD_STATE
    ]


def unjudged(report: Report) -> list[Check]:
    """What could not judge anything, when that makes the run prove nothing: the defining checks when every one of
    them skipped, or every GPU's own health checks (but the replay counter) when all of them skipped for want of a
    value (the driver and stack checks passing say nothing of the boards). Skips of checks judged elsewhere (a vGPU
    slice's board is the host's, a MIG GPU's whole-GPU readings its instances') are no want of a value. [] when
    something was judged."""
    defining = _defining(report)
    if defining and all(c.status == "skip" for c in defining):
        return defining
    boards = _per_gpu_health(report) if report.fingerprint.get("gpus") else []  # a machine without GPUs: none to judge
    if boards and all(c.status == "skip" and not c.evidence.get("judged_elsewhere") for c in boards):
        return boards
    return []


def inconclusive_text(report: Report) -> str:
    """One line naming what could not be read."""
    skipped = unjudged(report)
    names = ", ".join(c.name for c in skipped)
    unread = [c.message for c in skipped if "not reported" in c.message] or [c.message for c in skipped]
    first = unread[0] if unread else ""
    return (
        f"the checks that define a healthy GPU could not judge anything ({names}): e.g. {first}; "
        "capture again with `nvidia-smi -q -x` on a current driver, or run `pytest validate/` on the host"
    )


EVIDENCE_CHARS = 400


def verdict(report: Report) -> str:
    """ "fail" when a check failed or errored, else "interrupted" when the run was cut short, else "pass"."""
    if _failures(report):
        return "fail"
    if report.interrupted:
        return "interrupted"
    if unjudged(report):
        return "inconclusive"
    return "pass" if report.checks else "empty"


def verdict_text(report: Report) -> str:
    """The verdict with its counts: "FAIL: 2 of 9 checks failed (6 pass · 1 fail · 1 skip · 1 error)"."""
    word = VERDICT_WORDS[verdict(report)]
    if not report.checks:
        return f"{word}: no checks ran"
    counts = status_counts(report.checks)
    bad = counts["fail"] + counts["error"]
    lead = f"{bad} of {len(report.checks)} checks failed" if bad else f"{counts['pass']} checks passed"
    if verdict(report) == "inconclusive":
        lead = inconclusive_text(report)
    text = f"{word}: {lead} ({_counts_text(report.checks)})"
    if report.interrupted and bad:  # both matter: the failures and that more checks never ran
        text += "; the run was interrupted"
    return text


def stand_ins_text(report: Report) -> str | None:
    """The stand-ins the report's runs recorded (random weights, stand-in data), or None: "Stand-ins: random VGG19
    weights (style_transfer; 2 rows)"."""
    text = stand_ins_summary(((r.series(), r.params.get("stand_ins") or []) for r in report.results), "row")
    return f"Stand-ins: {text}; these rows did not run on the real weights or data" if text else None


def run_text(report: Report) -> str:
    """One line naming the machine and the run: host · GPUs · tier · when · how long."""
    names = Counter(str(g.get("name", "?")) for g in report.fingerprint.get("gpus") or [])
    gpus = ", ".join(f"{n} × {name}" for name, n in names.items()) or "no GPU"
    parts = [machine_name(report), gpus, f"tier {report.tier}", report.created]
    if report.duration_s is not None:
        parts.append(f"{report.duration_s:.0f} s")
    return " · ".join(parts)


def threshold_text(report: Report, name: str | None) -> str | None:
    """A check's bound with its source and basis, so the reader can judge the verdict."""
    if not name:
        return None
    t = next((t for t in report.thresholds if t.name == name), None)
    if t is None:
        return name
    text = f"{t.name} = {fmt_num(t.value)} {t.unit} ({t.source})"
    return text + (f"; basis: {t.basis}" if t.basis else "")


def _short(value: Any) -> str:
    if isinstance(value, float):
        return fmt_num(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str, separators=(",", ":"))
    return str(value)


def evidence_text(evidence: dict[str, Any]) -> str | None:
    """`key=value` pairs, cut at EVIDENCE_CHARS: the front page summarises, the JSON keeps it all."""
    if not evidence:
        return None
    text = ", ".join(f"{k}={_short(v)}" for k, v in evidence.items())
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


def failure_facts(report: Report, check: Check) -> list[tuple[str, str]]:
    facts = [("Threshold", threshold_text(report, check.threshold)), ("Evidence", evidence_text(check.evidence))]
    return [(label, text) for label, text in facts if text]


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def baseline_of(r: Result) -> tuple[float | None, float | None]:
    """(known-good value, % of it) when the row was judged against its GPU model's known-good row
    (gpulab.validation.known_good writes params["known_good"])."""
    known = r.params.get("known_good") if isinstance(r.params, dict) else None
    if not isinstance(known, dict):
        return None, None
    return _finite(known.get("value")), _finite(known.get("pct"))


def key_figure_groups(results: Sequence[Result]) -> list[list[Result]]:
    """Results with a reference figure, the per-device rows of one measurement grouped together."""
    groups: dict[tuple[str, ...], list[Result]] = {}
    for r in results:
        if r.spec_value is None and baseline_of(r)[0] is None:
            continue
        groups.setdefault((r.series(), r.framework, r.launcher, str(r.n), r.precision, r.unit), []).append(r)
    return list(groups.values())


def _span(values: Sequence[float | None], unit: str, fmt: Any = fmt_num) -> str:
    """ "lo – hi unit" over the devices (the worst device matters), one value when they agree."""
    nums = sorted(v for v in values if v is not None)
    if not nums:
        return DASH
    lo, hi = fmt(nums[0]), fmt(nums[-1])
    return f"{lo} {unit}" if lo == hi else f"{lo} – {hi} {unit}"


def key_figure_headers(with_baseline: bool) -> tuple[str, ...]:
    head = ("Measurement", "Devices", "Measured", "Datasheet", "% of datasheet")
    return (*head, "Known-good", "% of known-good") if with_baseline else head


def key_figure_row(rows: Sequence[Result], with_baseline: bool) -> tuple[str, ...]:
    r = rows[0]
    devices = (r.device or f"all {r.n}") if len(rows) == 1 else f"{len(rows)} devices"
    spec = next((x.spec_value for x in rows if x.spec_value is not None), None)
    row = (
        f"{r.series()} {r.precision} ({r.framework} {r.launcher}, n={r.n})",
        devices,
        _span([x.value for x in rows], r.unit),
        fmt_num(spec, r.unit) if spec is not None else DASH,
        _span([x.pct_of_spec for x in rows], "%", _pct1),
    )
    if not with_baseline:
        return row
    base = next((b for b in (baseline_of(x)[0] for x in rows) if b is not None), None)
    return (
        *row,
        fmt_num(base, r.unit) if base is not None else DASH,
        _span([baseline_of(x)[1] for x in rows], "%", _pct1),
    )


def has_baselines(results: Sequence[Result]) -> bool:
    return any(baseline_of(r)[0] is not None for r in results)


def _kind(where: str) -> str:
    return where.split(":", 1)[0]


def headline_speedups(report: Report) -> list[Speedup]:
    """One speedup per workload and precision across device kinds (CPU → GPU), against the strongest
    baseline: the smallest ratio is the honest one."""
    best: dict[tuple[str, str, str, str], Speedup] = {}
    for s in report.speedups:
        if _kind(s.from_) == _kind(s.to) or not math.isfinite(s.ratio):
            continue
        key = (s.workload, s.framework, s.precision, s.to)
        if key not in best or s.ratio < best[key].ratio:
            best[key] = s
    return list(best.values())


def headline_scaling(report: Report) -> list[Scaling]:
    """The widest point of each device (not CPU-thread) scaling series."""
    return [
        max(pts, key=lambda s: s.n)
        for key, pts in _scaling_groups(report).items()
        if key[2] != "cpu" and max(s.n for s in pts) > 1
    ]


SPEEDUP_HEADERS = ("Workload", "Framework", "Precision", "From", "To", "Speedup")


def speedup_row(s: Speedup) -> tuple[str, ...]:
    return (s.workload, s.framework, s.precision, s.from_, s.to, f"{s.ratio:.2f}x")


THRESHOLD_HEADERS = ("Name", "Value", "Source", "Basis")


def threshold_rows(report: Report) -> list[tuple[str, ...]]:
    return [(t.name, f"{fmt_num(t.value)} {t.unit}", t.source, _s(t.basis)) for t in report.thresholds]


def _scaling_groups(report: Report) -> dict[tuple[str, str, str, str], list[Scaling]]:
    groups: dict[tuple[str, str, str, str], list[Scaling]] = defaultdict(list)
    for s in report.scaling:
        groups[(s.workload, s.framework, s.launcher, s.precision)].append(s)
    return groups


# --- Markdown -------------------------------------------------------------------------------------


def _md_cell(value: Any) -> str:
    text = str(value).replace("\\", "\\\\").replace("|", "\\|")
    return " ".join(text.replace("\r", "").split("\n")).strip() or " "


def _md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines


def _md_verdict(report: Report) -> list[str]:
    out = ["## Verdict", "", f"**{_md_cell(verdict_text(report))}**", "", _md_cell(run_text(report)), ""]
    if stand_ins := stand_ins_text(report):
        out += [f"> **{_md_cell(stand_ins)}**", ""]
    if report.interrupted:
        out += ["> **Interrupted:** the run was stopped before every test ran; results are partial.", ""]
    return out


def _md_failures(report: Report) -> list[str]:
    if not report.checks:
        return []
    failures = _failures(report)
    if not failures:
        return ["## Failures", "", "No check failed or errored.", ""]
    out = ["## Failures", ""]
    for c in failures:
        out.append(f"- **{c.status.upper()}** `{c.name}`: {_md_cell(c.message)}")
        out += [f"  - {label}: {_md_cell(text)}" for label, text in failure_facts(report, c)]
    return [*out, ""]


def _md_key_figures(report: Report) -> list[str]:
    groups = key_figure_groups(report.results)
    if not groups:
        return []
    base = has_baselines(report.results)
    return ["## Key figures", "", *_md_table(key_figure_headers(base), (key_figure_row(g, base) for g in groups)), ""]


def _md_headlines(report: Report) -> list[str]:
    speedups, scaling = headline_speedups(report), headline_scaling(report)
    if not speedups and not scaling:
        return []
    out = ["## Speedups and scaling", ""]
    if speedups:
        out += [
            "GPU over CPU, against the fastest CPU run:",
            "",
            *_md_table(SPEEDUP_HEADERS, map(speedup_row, speedups)),
        ]
        out.append("")
    if scaling:
        out += ["Multi-GPU scaling at the most GPUs:", "", *_md_table(SCALING_HEADERS, map(scaling_row, scaling)), ""]
    return out


def _md_machine(report: Report) -> list[str]:
    fp = report.fingerprint
    out = ["### Machine", "", *_md_table(("", ""), _overview(report)), "", "### GPUs", ""]
    gpus = gpu_rows(fp)
    if gpus:
        out += _md_table(GPU_HEADERS, gpus)
    else:
        out.append(f"No GPU found{': ' + fp['gpu_absent_reason'] if fp.get('gpu_absent_reason') else '.'}")
    topo = topology_table(fp)
    if topo:
        out += ["", "GPU topology:", "", *_md_table(*topo)]
    out += ["", "### Software", "", *_md_table(("Component", "Version"), software_rows(fp))]
    env = (fp.get("software") or {}).get("env") or {}
    if env:
        out += ["", "Environment: " + ", ".join(f"`{k}={v}`" for k, v in sorted(env.items()))]
    return [*out, ""]


def _md_checks(report: Report) -> list[str]:
    out = ["### Checks", ""]
    if not report.checks:
        return [*out, "No checks ran.", ""]
    out += [f"**{_counts_text(report.checks)}**", ""]
    rows = ((c.status, c.name, c.message, _s(c.threshold)) for c in report.checks)
    return [*out, *_md_table(("Status", "Check", "Message", "Threshold"), rows), ""]


def _md_measurements(report: Report) -> list[str]:
    out = ["### Results", ""]
    if report.results:
        out += _md_table(RESULT_HEADERS, (result_row(r) for r in report.results))
    else:
        out.append("No measurements.")
    out.append("")
    if report.speedups:
        out += ["### Speedups", "", *_md_table(SPEEDUP_HEADERS, map(speedup_row, report.speedups)), ""]
    if report.scaling:
        out += ["### Scaling", "", *_md_table(SCALING_HEADERS, map(scaling_row, report.scaling)), ""]
    if report.thresholds:
        out += ["### Thresholds", "", *_md_table(THRESHOLD_HEADERS, threshold_rows(report)), ""]
    return out


def to_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown: the front page (verdict, failures with their fixes, key
    figures, speedups and scaling) first, then every detail."""
    out = [f"# {_title(report)}", ""]
    out += _md_verdict(report) + _md_failures(report) + _md_key_figures(report) + _md_headlines(report)
    out += ["## Details", "", *_md_machine(report), *_md_checks(report), *_md_measurements(report)]
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


# timeline key, axis label, factor from the sampled unit to the plotted one
TIMELINE_METRICS = (("util", "GPU util (%)", 1.0), ("mem_mib", "memory (GiB)", 1 / 1024), ("power_w", "power (W)", 1.0))


def _timeline_series(result: Result) -> dict[int, list[dict[str, Any]]]:
    """The timeline's samples by GPU index, those without a time or an index left out."""
    series: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for sample in result.telemetry.timeline if result.telemetry else []:
        if isinstance(sample.get("t"), (int, float)) and isinstance(sample.get("index"), int):
            series[sample["index"]].append(sample)
    return series


def _plot_metric(ax: Any, series: dict[int, list[dict[str, Any]]], key: str, label: str, scale: float) -> None:
    for index in sorted(series):
        pts = sorted((s["t"], s[key] * scale) for s in series[index] if isinstance(s.get(key), (int, float)))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1, label=f"GPU {index}")
    ax.set_ylabel(label)
    if key == "util":
        ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=min(8, max(1, len(series))), loc="lower right")


def plot_timeline(result: Result) -> str | None:
    """Utilisation, memory and power against time, one line per GPU; None when the result has no timeline."""
    series = _timeline_series(result)
    metrics = [
        m for m in TIMELINE_METRICS if any(isinstance(s.get(m[0]), (int, float)) for ss in series.values() for s in ss)
    ]
    if not metrics:
        return None
    fig = _figure(8, 2.0 * len(metrics) + 0.6)
    axes = [fig.add_subplot(len(metrics), 1, i + 1) for i in range(len(metrics))]
    for ax, (key, label, scale) in zip(axes, metrics, strict=True):
        _plot_metric(ax, series, key, label, scale)
    axes[-1].set_xlabel("t (s)")
    axes[0].set_title(_result_label(result), fontsize=10)
    return _png(fig)


def _result_label(r: Result) -> str:
    dev = f" {r.device}" if r.device else ""
    return f"{r.series()} {r.framework} {r.launcher} n={r.n} {r.precision}{dev}"


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


# --- inline SVG charts ----------------------------------------------------------------------------


class Markup(str):
    """Text that is already HTML (an inline chart): `_e` passes it through unescaped."""


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
    mean, peak = _finite(stats.get("util_mean")), _finite(stats.get("util_max"))
    text = DASH if mean is None and peak is None else f"{_n0(mean)} % mean, {_n0(peak)} % max"
    return Gauge(mean, peak, 100.0, text)


def memory_gauge(stats: dict[str, Any], gpu: dict[str, Any]) -> Gauge:
    mean, peak = _finite(stats.get("mem_mean_mib")), _finite(stats.get("mem_max_mib"))
    total, shown = _finite(gpu.get("memory_total_mib")), peak if peak is not None else mean
    gib = None if shown is None else shown / 1024
    text = DASH if gib is None else f"{gib:.1f} GiB max" + _of(gib, total and total / 1024, "GiB")
    return Gauge(mean, peak, total, text)


def power_gauge(stats: dict[str, Any], gpu: dict[str, Any]) -> Gauge:
    mean, peak = _finite(stats.get("power_mean_w")), _finite(stats.get("power_max_w"))
    limit = _finite(gpu.get("power_limit_w"))
    text = DASH if mean is None and peak is None else f"{_n0(mean)} W mean, {_n0(peak)} max"
    return Gauge(mean, peak, limit, text + _of(mean, limit, "W"))


# metric id, panel title, bar colour, gauge
LOAD_METRICS = (
    ("util", "GPU utilisation", "#4c78a8", util_gauge),
    ("mem", "Memory used", "#2a9d8f", memory_gauge),
    ("power", "Power", "#e07b00", power_gauge),
)
LABEL_W, PANEL_W, BAR_W, BAR_H, ROW_H, HEAD_H = 52, 360, 130, 12, 18, 18


def _gpu_facts(fp: dict[str, Any]) -> dict[Any, dict[str, Any]]:
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

    attrs = f'data-metric="{name}" data-gpu="{_e(gpu)}" data-mean="{_e(gauge.mean)}" data-max="{_e(gauge.peak)}"'
    return (
        f"<g {attrs}><title>GPU {_e(gpu)} {_e(title)}: {_e(gauge.text)}</title>"
        f'<rect x="{x}" y="{y}" width="{BAR_W}" height="{BAR_H}" fill="#eef1f4"/>'
        f'<rect x="{x}" y="{y}" width="{width(gauge.peak)}" height="{BAR_H}" fill="{colour}" opacity="0.35"/>'
        f'<rect x="{x}" y="{y}" width="{width(gauge.mean)}" height="{BAR_H}" fill="{colour}"/>'
        f'<text x="{x + BAR_W + 6}" y="{y + BAR_H - 2}">{_e(gauge.text)}</text></g>'
    )


def load_chart(result: Result, gpus: dict[Any, dict[str, Any]]) -> str | None:
    """Per GPU, bars of utilisation, memory and power side by side (dark: mean, light: peak); an inline
    SVG, or None when the result has no per-GPU telemetry."""
    rows = _load_rows(result, gpus)
    if not rows:
        return None
    w, h = LABEL_W + PANEL_W * len(LOAD_METRICS), HEAD_H + ROW_H * len(rows)
    parts = [
        f'<svg class="load" role="img" aria-label="GPU load: {_e(_result_label(result))}" '
        f'viewBox="0 0 {w} {h}" width="{w}" height="{h}">',
        *(
            f'<text class="head" x="{LABEL_W + k * PANEL_W}" y="12">{_e(m[1])}</text>'
            for k, m in enumerate(LOAD_METRICS)
        ),
    ]
    scales = _scales(rows)
    for r, (gpu, gauges) in enumerate(rows):
        y = HEAD_H + r * ROW_H
        parts.append(f'<text x="0" y="{y + BAR_H - 2}">GPU {_e(gpu)}</text>')
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


# --- HTML -----------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1200px;
color:#222;padding:0 1rem;line-height:1.4}
h1{font-size:1.6rem;border-bottom:2px solid #4c78a8;padding-bottom:.3rem}
h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ddd}
h2.part{font-size:1.4rem;margin-top:3rem;border-bottom:2px solid #4c78a8}
h3{font-size:1.1rem;margin-top:1.6rem}
.tw{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.5rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f6f8}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{color:#2e7d32;font-weight:600}.fail,.error{color:#c62828;font-weight:600}.skip{color:#777}
.banner{background:#fff3cd;border:1px solid #e0c36c;padding:.5rem 1rem}
.counts span{margin-right:1rem}
nav.toc{background:#f4f6f8;padding:.5rem 1rem;font-size:.9rem;display:flex;flex-wrap:wrap;gap:.2rem .9rem}
nav.toc a{white-space:nowrap}
.verdict{font-size:1.2rem;padding:.6rem 1rem;border-left:.5rem solid;margin:.5rem 0}
.verdict .word{font-weight:700;margin-right:.6rem}
.v-pass{border-color:#2e7d32;background:#edf7ee}.v-fail{border-color:#c62828;background:#fdecea}
.v-interrupted,.v-empty,.v-inconclusive{border-color:#e0a800;background:#fff8e1}
.run{color:#555;margin:.2rem 0 .8rem}
.failure{border:1px solid #f1c4c4;border-left:.3rem solid #c62828;padding:.4rem .8rem;margin:.6rem 0}
.failure p{margin:.3rem 0}
.failure dl{display:grid;grid-template-columns:max-content 1fr;gap:.2rem .8rem;margin:.3rem 0;font-size:.9rem}
.failure dt{color:#555}.failure dd{margin:0;overflow-wrap:anywhere}
figure.load{margin:.8rem 0}figure.load figcaption{font-weight:600;font-size:.9rem}
svg.load{max-width:100%;height:auto;font-size:11px;display:block}
svg.load text{fill:#333}svg.load text.head{font-weight:600}
svg.pct{vertical-align:middle}
.note{color:#555;font-size:.9rem}
img.plot{max-width:100%;display:block;margin:.5rem 0}
code{background:#f4f6f8;padding:0 .2rem;overflow-wrap:anywhere}
"""


def _e(value: Any) -> str:
    return str(value) if isinstance(value, Markup) else html.escape(str(value), quote=True)


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
    return f'<div class="tw"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _img(png: str | None, alt: str) -> str:
    if png is None:
        return ""
    return f'<img class="plot" alt="{_e(alt)}" src="data:image/png;base64,{png}">'


def _html_verdict(report: Report) -> str:
    word, _, detail = verdict_text(report).partition(": ")
    out = (
        f'<div class="verdict v-{verdict(report)}"><span class="word">{_e(word)}</span> {_e(detail)}</div>'
        f'<p class="run">{_e(run_text(report))}</p>'
    )
    if stand_ins := stand_ins_text(report):
        out += f'<p class="banner">{_e(stand_ins)}</p>'
    if report.interrupted:
        out += (
            '<p class="banner"><strong>Interrupted:</strong> the run was stopped before every test ran; '
            "results are partial.</p>"
        )
    return out


def _html_failure(report: Report, c: Check) -> str:
    facts = "".join(f"<dt>{_e(label)}</dt><dd>{_e(text)}</dd>" for label, text in failure_facts(report, c))
    return (
        f'<div class="failure"><span class="{c.status}">{_e(c.status.upper())}</span> <code>{_e(c.name)}</code>'
        f"<p>{_e(c.message)}</p>" + (f"<dl>{facts}</dl>" if facts else "") + "</div>"
    )


def _html_failures(report: Report) -> str:
    if not report.checks:
        return ""
    failures = _failures(report)
    if not failures:
        return '<p class="note">No check failed or errored.</p>'
    return "".join(_html_failure(report, c) for c in failures)


def _html_key_figures(report: Report) -> str:
    groups = key_figure_groups(report.results)
    if not groups:
        return ""
    base = has_baselines(report.results)
    rows = [(*key_figure_row(g, base), Markup(pct_bar([r.pct_of_spec for r in g]))) for g in groups]
    note = '<p class="note">Per-device rows are summarised as worst – best; the bar marks 100 %.</p>'
    return note + _html_table((*key_figure_headers(base), "vs datasheet"), rows, num_cols=range(2, 7))


def _html_headlines(report: Report) -> str:
    speedups, scaling = headline_speedups(report), headline_scaling(report)
    out = ""
    if speedups:
        out += '<p class="note">GPU over CPU, against the fastest CPU run:</p>'
        out += _html_table(SPEEDUP_HEADERS, map(speedup_row, speedups), num_cols=(5,))
    if scaling:
        out += '<p class="note">Multi-GPU scaling at the most GPUs:</p>'
        out += _html_table(SCALING_HEADERS, map(scaling_row, scaling), num_cols=(4, 5, 6, 7, 8))
    return out


def _html_load(report: Report) -> str:
    gpus = _gpu_facts(report.fingerprint)
    charts = [(r, load_chart(r, gpus)) for r in report.results]
    figures = [
        f'<figure class="load"><figcaption>{_e(_result_label(r))}</figcaption>{svg}</figure>'
        for r, svg in charts
        if svg
    ]
    if not figures:
        return ""
    note = (
        '<p class="note">Per GPU over each workload: dark bar = mean, light bar = peak; memory against the '
        "GPU's total, power against its limit.</p>"
    )
    return note + "".join(figures)


def _html_machine(report: Report) -> str:
    fp = report.fingerprint
    out = _html_table(("Field", "Value"), _overview(report))
    gpus = gpu_rows(fp)
    if gpus:
        out += _html_table(GPU_HEADERS, gpus)
    else:
        reason = fp.get("gpu_absent_reason")
        out += f"<p>No GPU found{': ' + _e(reason) if reason else '.'}</p>"
    topo = topology_table(fp)
    if topo:
        out += "<p>GPU topology (NV# = bonded NVLinks; PIX/PXB/PHB/NODE/SYS = PCIe paths):</p>"
        out += _html_table(*topo)
    return out


def _html_software(report: Report) -> str:
    fp = report.fingerprint
    out = _html_table(("Component", "Version"), software_rows(fp))
    env = (fp.get("software") or {}).get("env") or {}
    if env:
        pairs = ", ".join(f"<code>{_e(k)}={_e(v)}</code>" for k, v in sorted(env.items()))
        out += f"<p>Environment: {pairs}</p>"
    return out


def _check_row(c: Check) -> tuple[str, ...]:
    return (c.status, c.name, c.message, _s(c.threshold), DASH if c.seconds is None else f"{c.seconds:.1f}")


def _html_checks(report: Report) -> str:
    if not report.checks:
        return "<p>No checks ran.</p>"
    counts = status_counts(report.checks)
    spans = "".join(f'<span class="{s}">{n} {s}</span>' for s, n in counts.items())
    headers = ("Status", "Check", "Message", "Threshold", "Seconds")
    return f'<p class="counts">{spans}</p>' + _html_table(
        headers, map(_check_row, report.checks), num_cols=(4,), status_col=0
    )


def _html_results(report: Report) -> str:
    if not report.results:
        return "<p>No measurements.</p>"
    table = _html_table(RESULT_HEADERS, (result_row(r) for r in report.results), num_cols=(3, 6, 7, 8))
    return table + _img(plot_pct_of_spec(report), "results as percent of spec")


def _html_speedups(report: Report) -> str:
    if not report.speedups:
        return ""
    table = _html_table(SPEEDUP_HEADERS, map(speedup_row, report.speedups), num_cols=(5,))
    return table + _img(plot_speedups(report), "speedups")


def _html_scaling(report: Report) -> str:
    if not report.scaling:
        return ""
    out = _html_table(SCALING_HEADERS, map(scaling_row, report.scaling), num_cols=(4, 5, 6, 7, 8))
    groups = _scaling_groups(report)
    devices = [(key, pts) for key, pts in groups.items() if key[2] != "cpu"]
    out += "".join(_img(plot_scaling(pts), "scaling " + " ".join(key)) for key, pts in devices[:MAX_SCALING_PLOTS])
    return out + _img(plot_cpu_threads(groups), "CPU thread scaling")


def _html_timelines(report: Report) -> str:
    timelines = [r for r in report.results if r.telemetry is not None and r.telemetry.timeline]
    out = "".join(_img(plot_timeline(r), "telemetry " + _result_label(r)) for r in timelines[:MAX_TIMELINE_PLOTS])
    if len(timelines) > MAX_TIMELINE_PLOTS:
        out += f"<p>{len(timelines) - MAX_TIMELINE_PLOTS} more timelines are in the JSON report.</p>"
    return out


def _html_thresholds(report: Report) -> str:
    return _html_table(THRESHOLD_HEADERS, threshold_rows(report)) if report.thresholds else ""


Section = tuple[str, str, Any]  # anchor, heading, body builder (Report -> HTML, "" = leave out)

FRONT_SECTIONS: tuple[Section, ...] = (
    ("verdict", "Verdict", _html_verdict),
    ("failures", "Failures", _html_failures),
    ("key-figures", "Key figures", _html_key_figures),
    ("headlines", "Speedups and scaling", _html_headlines),
    ("gpu-load", "GPU load", _html_load),
)
DETAIL_SECTIONS: tuple[Section, ...] = (
    ("machine", "Machine", _html_machine),
    ("software", "Software", _html_software),
    ("checks", "Checks", _html_checks),
    ("results", "Results", _html_results),
    ("speedups", "Speedups", _html_speedups),
    ("scaling", "Scaling", _html_scaling),
    ("telemetry", "GPU telemetry", _html_timelines),
    ("thresholds", "Thresholds", _html_thresholds),
)


def _built(report: Report, sections: Sequence[Section]) -> list[tuple[str, str, str]]:
    return [(anchor, title, body) for anchor, title, build in sections if (body := build(report))]


def _html_toc(front: list[tuple[str, str, str]], details: list[tuple[str, str, str]]) -> str:
    def links(items: list[tuple[str, str, str]]) -> str:
        return "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t, _ in items)

    return f'<nav class="toc">{links(front)}<a href="#details"><strong>Details:</strong></a>{links(details)}</nav>'


def _html_head(report: Report) -> str:
    title = _e(_title(report))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title><style>{CSS}</style></head><body>\n<h1>{title}</h1>"
    )


def to_html(report: Report) -> str:
    """One self-contained HTML page (inline CSS, PNG plots and SVG charts, no external resource): the front
    page (verdict, failures, key figures, speedups and scaling, GPU load) first, the details below."""
    front, details = _built(report, FRONT_SECTIONS), _built(report, DETAIL_SECTIONS)
    parts = [_html_head(report), _html_toc(front, details)]
    parts += [f'<section id="{a}"><h2>{_e(t)}</h2>{body}</section>' for a, t, body in front]
    parts.append('<h2 class="part" id="details">Details</h2>')
    parts += [f'<section id="{a}"><h3>{_e(t)}</h3>{body}</section>' for a, t, body in details]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


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
