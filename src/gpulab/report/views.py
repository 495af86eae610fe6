"""The report prepared for reading: the front page's verdict, counts and key figures, and the table rows.

Plain values and rows shared by the Markdown and HTML views (`gpulab.report.markdown`,
`gpulab.report.html_page`); nothing here writes markup.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpulab.names import Launcher
from gpulab.records import STATUSES, Check, Report, Result, Scaling, Speedup
from gpulab.report import contention, spread
from gpulab.report.formatting import stand_ins_summary

DASH = "—"
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


def cell_text(value: Any) -> str:
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


def counts_text(checks: Sequence[Check]) -> str:
    """ "6 pass · 1 fail · 1 skip · 1 error", with "· 2 marginal" only when there are some."""
    return " · ".join(f"{n} {s}" for s, n in status_counts(checks).items() if n or s != "marginal")


def software_rows(fp: dict[str, Any]) -> list[tuple[str, str]]:
    sw = fp.get("software") or {}
    rows = [
        ("NVIDIA driver", cell_text(sw.get("driver_version"))),
        ("CUDA (driver supports)", cell_text(sw.get("cuda_driver_version"))),
        ("nvcc", cell_text(sw.get("nvcc_version"))),
        ("cuDNN", cell_text(sw.get("cudnn_version"))),
        ("NCCL", cell_text(sw.get("nccl_version"))),
        ("Python", cell_text(sw.get("python"))),
    ]
    for tk in sw.get("toolkits") or []:
        rows.append((f"CUDA toolkit {tk.get('path', '')}".strip(), cell_text(tk.get("version"))))
    for fw in sw.get("frameworks") or []:
        extra = []
        for key, label in (("built_cuda", "CUDA"), ("built_cudnn", "cuDNN"), ("nccl", "NCCL")):
            if fw.get(key):
                extra.append(f"{label} {fw[key]}")
        if fw.get("sees_gpus") is not None:
            extra.append(f"sees {fw['sees_gpus']} GPU(s)")
        if fw.get("error"):
            extra.append(f"error: {fw['error']}")
        text = cell_text(fw.get("version")) + (f" ({', '.join(extra)})" if extra else "")
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
                cell_text(g.get("index")),
                cell_text(g.get("name")),
                cell_text(g.get("bus_id")),
                DASH if mem is None else f"{mem / 1024:.0f} GiB",
                pcie_text(g.get("pcie"), "current"),
                pcie_text(g.get("pcie"), "max"),
                cell_text(g.get("numa_node")),
                _yes_no(g.get("ecc_enabled")),
                _yes_no(g.get("persistence_mode")),
                cell_text(g.get("virtualization_mode")),
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
        r.launched(),
        str(r.n),
        r.precision,
        r.device or "all",
        figure_text(r),
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


def figure_text(r: Result) -> str:
    """A row's figure: `median [low–high] (windows) unit` when it kept its timed windows, else its value."""
    if r.spread is None or len(r.spread.windows) < 2:
        return fmt_num(r.value, r.unit)
    return f"{spread.text(r.spread, fmt_num)} {r.unit}"


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
        f"{s.efficiency * 100:.1f} %{verdict}"
        + (f" [{s.spread.low * 100:.1f}–{s.spread.high * 100:.1f}] ({len(s.spread.windows)})" if s.spread else ""),
        DASH if s.expected is None else f"{s.expected * 100:.0f} %",
        cell_text(s.expected_source),
    )


def page_title(report: Report) -> str:
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


def overview_rows(report: Report) -> list[tuple[str, str]]:
    fp = report.fingerprint
    host = fp.get("host") or {}
    mem = host.get("memory_total_mib")
    numa = host.get("numa_nodes") or []
    rows = [
        ("Host", cell_text(host.get("hostname"))),
        ("Platform", platform_text(fp)),
        ("OS", cell_text(host.get("os"))),
        ("Kernel", cell_text(host.get("kernel"))),
        ("CPU", cpu_text(fp)),
        ("Memory", DASH if mem is None else f"{mem / 1024:.0f} GiB"),
        ("NUMA nodes", str(len(numa)) if numa else DASH),
        ("IOMMU", _yes_no(host.get("iommu_enabled"))),
        ("GPU source", cell_text(fp.get("gpu_source"))),
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


def failed_checks(report: Report) -> list[Check]:
    return [c for c in report.checks if c.status in ("fail", "error")]


def marginal_checks(report: Report) -> list[Check]:
    """Checks whose interval still straddled the bound after a re-measure: neither failed nor passed, listed first."""
    return [c for c in report.checks if c.status == "marginal"]


MARGINAL_ADVICE = (
    "the interval of the figure straddled its bound twice: run again on a quiet machine with longer windows "
    "(--tier full), or compare with the last report (gpulab compare) before acting"
)


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


def _board_checks(report: Report) -> list[Check]:
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
    boards = _board_checks(report) if report.fingerprint.get("gpus") else []  # a machine without GPUs: none to judge
    board_defining = [c for c in boards if c.name.split("[")[0] in DEFINING_CHECKS]  # absent when -k left them out
    if board_defining and all(c.status == "skip" and not c.evidence.get("judged_elsewhere") for c in boards):
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
    if failed_checks(report):
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
    if counts["marginal"]:
        names = ", ".join(c.name for c in marginal_checks(report))
        lead += f", {counts['marginal']} marginal ({names})"
    if verdict(report) == "inconclusive":
        lead = inconclusive_text(report)
    text = f"{word}: {lead} ({counts_text(report.checks)})"
    if report.interrupted and bad:  # both matter: the failures and that more checks never ran
        text += "; the run was interrupted"
    return text


def _host_verdict(report: Report) -> tuple[str, str]:
    if report.fingerprint.get("host") is None:  # a capture: the load of the machine that judged it is not its host's
        return "not measured", "host: not measured (judged from a capture)"
    return contention.host_verdict(report.host_load)


def host_verdict(report: Report) -> str:
    """The host's verdict beside the GPU verdict: "contended", "unsteady", "quiet" or "not measured"
    (gpulab.report.contention);
    it never turns the GPU verdict."""
    return _host_verdict(report)[0]


def host_verdict_text(report: Report) -> str:
    """ "host: quiet — CPUs 1.2 % of the run under pressure, calibration steady (within 5 %), steal 0.0 %" or
    "host: contended — <the figures>"."""
    return _host_verdict(report)[1]


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
    if check.status == "marginal":
        facts.append(("What to do", MARGINAL_ADVICE))
    return [(label, text) for label, text in facts if text]


def finite_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def baseline_of(r: Result) -> tuple[float | None, float | None]:
    """(known-good value, % of it) when the row was judged against its GPU model's known-good row
    (gpulab.validation.known_good writes params["known_good"])."""
    known = r.params.get("known_good") if isinstance(r.params, dict) else None
    if not isinstance(known, dict):
        return None, None
    return finite_or_none(known.get("value")), finite_or_none(known.get("pct"))


def key_figure_groups(results: Sequence[Result]) -> list[list[Result]]:
    """Results with a reference figure, the per-device rows of one measurement grouped together."""
    groups: dict[tuple[str, ...], list[Result]] = {}
    for r in results:
        if r.spec_value is None and baseline_of(r)[0] is None:
            continue
        groups.setdefault((r.series(), r.framework, r.launched(), str(r.n), r.precision, r.unit), []).append(r)
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
        f"{r.series()} {r.precision} ({r.framework} {r.launched()}, n={r.n})",
        devices,
        figure_text(r) if len(rows) == 1 else _span([x.value for x in rows], r.unit),
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
        for key, pts in scaling_groups(report).items()
        if key[2] != Launcher.CPU and max(s.n for s in pts) > 1
    ]


SPEEDUP_HEADERS = ("Workload", "Framework", "Precision", "From", "To", "Speedup")


def speedup_row(s: Speedup) -> tuple[str, ...]:
    return (s.workload, s.framework, s.precision, s.from_, s.to, f"{s.ratio:.2f}x")


THRESHOLD_HEADERS = ("Name", "Value", "Source", "Basis")


def threshold_rows(report: Report) -> list[tuple[str, ...]]:
    return [(t.name, f"{fmt_num(t.value)} {t.unit}", t.source, cell_text(t.basis)) for t in report.thresholds]


def scaling_groups(report: Report) -> dict[tuple[str, str, str, str], list[Scaling]]:
    groups: dict[tuple[str, str, str, str], list[Scaling]] = defaultdict(list)
    for s in report.scaling:
        groups[(s.workload, s.framework, s.launcher, s.precision)].append(s)
    return groups
