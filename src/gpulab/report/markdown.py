"""A report as Markdown: the front page (verdict, failures, key figures, headlines) then every detail."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

from gpulab.records import Report
from gpulab.report.views import (
    GPU_HEADERS,
    RESULT_HEADERS,
    SCALING_HEADERS,
    SPEEDUP_HEADERS,
    THRESHOLD_HEADERS,
    cell_text,
    counts_text,
    failed_checks,
    failure_facts,
    gpu_rows,
    has_baselines,
    headline_scaling,
    headline_speedups,
    host_verdict,
    host_verdict_text,
    key_figure_groups,
    key_figure_headers,
    key_figure_row,
    marginal_checks,
    overview_rows,
    page_title,
    result_row,
    run_text,
    scaling_row,
    software_rows,
    speedup_row,
    stand_ins_text,
    threshold_rows,
    topology_table,
    verdict_text,
)

# --- Markdown -------------------------------------------------------------------------------------


def md_text(value: Any) -> str:
    """Text from a report (a host name, a message, a GPU name) as Markdown shows it: HTML escaped as the HTML page
    escapes it (`<script>` stays text: Markdown passes raw HTML through), `\\` and `|` escaped for tables, one line."""
    text = html.escape(str(value), quote=False).replace("\\", "\\\\").replace("|", "\\|")
    return " ".join(text.replace("\r", "").split("\n")).strip() or " "


def md_code(value: Any) -> str:
    """Text from a report as inline code: a code span, or an HTML <code> element with the text escaped where a code
    span could not hold it (a backtick would end it; `<`, `&` kept raw would be HTML to a reader of the file)."""
    text = " ".join(str(value).split())
    if any(c in text for c in "`<>&|\\"):
        return f"<code>{md_text(text)}</code>"
    return f"`{text}`"


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(md_text(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in rows]
    return lines


def _md_verdict(report: Report) -> list[str]:
    host = md_text(host_verdict_text(report))
    out = ["## Verdict", "", f"**{md_text(verdict_text(report))}**", ""]
    out += [f"**{host}**" if host_verdict(report) == "contended" else host, "", md_text(run_text(report)), ""]
    if stand_ins := stand_ins_text(report):
        out += [f"> **{md_text(stand_ins)}**", ""]
    if report.interrupted:
        out += ["> **Interrupted:** the run was stopped before every test ran; results are partial.", ""]
    return out


def _md_failures(report: Report) -> list[str]:
    if not report.checks:
        return []
    failures = marginal_checks(report) + failed_checks(report)
    if not failures:
        return ["## Failures", "", "No check failed or errored.", ""]
    out = ["## Failures", ""]
    for c in failures:
        out.append(f"- **{c.status.upper()}** {md_code(c.name)}: {md_text(c.message)}")
        out += [f"  - {md_text(label)}: {md_text(text)}" for label, text in failure_facts(report, c)]
    return [*out, ""]


def _md_key_figures(report: Report) -> list[str]:
    groups = key_figure_groups(report.results)
    if not groups:
        return []
    base = has_baselines(report.results)
    return ["## Key figures", "", *md_table(key_figure_headers(base), (key_figure_row(g, base) for g in groups)), ""]


def _md_headlines(report: Report) -> list[str]:
    speedups, scaling = headline_speedups(report), headline_scaling(report)
    if not speedups and not scaling:
        return []
    out = ["## Speedups and scaling", ""]
    if speedups:
        out += [
            "GPU over CPU, against the fastest CPU run:",
            "",
            *md_table(SPEEDUP_HEADERS, map(speedup_row, speedups)),
        ]
        out.append("")
    if scaling:
        out += ["Multi-GPU scaling at the most GPUs:", "", *md_table(SCALING_HEADERS, map(scaling_row, scaling)), ""]
    return out


def _md_machine(report: Report) -> list[str]:
    fp = report.fingerprint
    out = ["### Machine", "", *md_table(("", ""), overview_rows(report)), "", "### GPUs", ""]
    gpus = gpu_rows(fp)
    if gpus:
        out += md_table(GPU_HEADERS, gpus)
    else:
        out.append(f"No GPU found{': ' + md_text(fp['gpu_absent_reason']) if fp.get('gpu_absent_reason') else '.'}")
    topo = topology_table(fp)
    if topo:
        out += ["", "GPU topology:", "", *md_table(*topo)]
    out += ["", "### Software", "", *md_table(("Component", "Version"), software_rows(fp))]
    env = (fp.get("software") or {}).get("env") or {}
    if env:
        out += ["", "Environment: " + ", ".join(md_code(f"{k}={v}") for k, v in sorted(env.items()))]
    return [*out, ""]


def _md_checks(report: Report) -> list[str]:
    out = ["### Checks", ""]
    if not report.checks:
        return [*out, "No checks ran.", ""]
    out += [f"**{counts_text(report.checks)}**", ""]
    rows = ((c.status, c.name, c.message, cell_text(c.threshold)) for c in report.checks)
    return [*out, *md_table(("Status", "Check", "Message", "Threshold"), rows), ""]


def _md_measurements(report: Report) -> list[str]:
    out = ["### Results", ""]
    if report.results:
        out += md_table(RESULT_HEADERS, (result_row(r) for r in report.results))
    else:
        out.append("No measurements.")
    out.append("")
    if report.speedups:
        out += ["### Speedups", "", *md_table(SPEEDUP_HEADERS, map(speedup_row, report.speedups)), ""]
    if report.scaling:
        out += ["### Scaling", "", *md_table(SCALING_HEADERS, map(scaling_row, report.scaling)), ""]
    if report.thresholds:
        out += ["### Thresholds", "", *md_table(THRESHOLD_HEADERS, threshold_rows(report)), ""]
    return out


def to_markdown(report: Report) -> str:
    """The report as GitHub-flavoured Markdown: the front page (verdict, failures with their fixes, key
    figures, speedups and scaling) first, then every detail."""
    out = [f"# {md_text(page_title(report))}", ""]
    out += _md_verdict(report) + _md_failures(report) + _md_key_figures(report) + _md_headlines(report)
    out += ["## Details", "", *_md_machine(report), *_md_checks(report), *_md_measurements(report)]
    return "\n".join(out).rstrip() + "\n"
