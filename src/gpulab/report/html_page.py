"""A report as one self-contained HTML page: inline CSS, PNG plots and SVG charts, no external URL.

The front page (verdict, failures, key figures, speedups and scaling, GPU load) comes first, the details
below; all text from the report is HTML-escaped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from gpulab.report.model import Check, Report
from gpulab.report.plots import (
    plot_cpu_threads,
    plot_pct_of_spec,
    plot_scaling,
    plot_speedups,
    plot_timeline,
    result_label,
)
from gpulab.report.svg import Markup, escape, gpu_facts, load_chart, pct_bar
from gpulab.report.views import (
    DASH,
    GPU_HEADERS,
    MAX_SCALING_PLOTS,
    MAX_TIMELINE_PLOTS,
    RESULT_HEADERS,
    SCALING_HEADERS,
    SPEEDUP_HEADERS,
    THRESHOLD_HEADERS,
    cell_text,
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
    scaling_groups,
    scaling_row,
    software_rows,
    speedup_row,
    stand_ins_text,
    status_counts,
    threshold_rows,
    topology_table,
    verdict,
    verdict_text,
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
.pass{color:#2e7d32;font-weight:600}.fail,.error{color:#c62828;font-weight:600}.marginal{color:#b26a00;font-weight:600}.skip{color:#777}
.banner{background:#fff3cd;border:1px solid #e0c36c;padding:.5rem 1rem}
.counts span{margin-right:1rem}
nav.toc{background:#f4f6f8;padding:.5rem 1rem;font-size:.9rem;display:flex;flex-wrap:wrap;gap:.2rem .9rem}
nav.toc a{white-space:nowrap}
.verdict{font-size:1.2rem;padding:.6rem 1rem;border-left:.5rem solid;margin:.5rem 0}
.verdict .word{font-weight:700;margin-right:.6rem}
.v-pass{border-color:#2e7d32;background:#edf7ee}.v-fail{border-color:#c62828;background:#fdecea}
.v-interrupted,.v-empty,.v-inconclusive{border-color:#e0a800;background:#fff8e1}
.verdict.host{font-size:1rem}.h-quiet{border-color:#2e7d32}.h-not-measured{border-color:#999}
.h-contended{border-color:#e0a800;background:#fff8e1}.h-unsteady{border-color:#b0b0b0;background:#f6f6f6}
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


def html_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], num_cols: Sequence[int] = (), status_col: int = -1
) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = []
            if i in num_cols:
                cls.append("num")
            if i == status_col:
                cls.append(escape(cell))
            attr = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{escape(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<div class="tw"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def img_tag(png: str | None, alt: str) -> str:
    if png is None:
        return ""
    return f'<img class="plot" alt="{escape(alt)}" src="data:image/png;base64,{png}">'


def _html_verdict(report: Report) -> str:
    word, _, detail = verdict_text(report).partition(": ")
    out = (
        f'<div class="verdict v-{verdict(report)}"><span class="word">{escape(word)}</span> {escape(detail)}</div>'
        f"{_html_host_verdict(report)}"
        f'<p class="run">{escape(run_text(report))}</p>'
    )
    if stand_ins := stand_ins_text(report):
        out += f'<p class="banner">{escape(stand_ins)}</p>'
    if report.interrupted:
        out += (
            '<p class="banner"><strong>Interrupted:</strong> the run was stopped before every test ran; '
            "results are partial.</p>"
        )
    return out


def _html_host_verdict(report: Report) -> str:
    """The host's verdict beside the GPU verdict: quiet, contended (with its figures) or not measured."""
    word, detail = host_verdict(report), host_verdict_text(report).removeprefix("host: ")
    return f'<div class="verdict host h-{word.replace(" ", "-")}"><span class="word">host</span> {escape(detail)}</div>'


def _html_failure(report: Report, c: Check) -> str:
    facts = "".join(f"<dt>{escape(label)}</dt><dd>{escape(text)}</dd>" for label, text in failure_facts(report, c))
    return (
        f'<div class="failure"><span class="{c.status}">{escape(c.status.upper())}</span> <code>{escape(c.name)}</code>'
        f"<p>{escape(c.message)}</p>" + (f"<dl>{facts}</dl>" if facts else "") + "</div>"
    )


def _html_failures(report: Report) -> str:
    if not report.checks:
        return ""
    failures = marginal_checks(report) + failed_checks(report)
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
    return note + html_table((*key_figure_headers(base), "vs datasheet"), rows, num_cols=range(2, 7))


def _html_headlines(report: Report) -> str:
    speedups, scaling = headline_speedups(report), headline_scaling(report)
    out = ""
    if speedups:
        out += '<p class="note">GPU over CPU, against the fastest CPU run:</p>'
        out += html_table(SPEEDUP_HEADERS, map(speedup_row, speedups), num_cols=(5,))
    if scaling:
        out += '<p class="note">Multi-GPU scaling at the most GPUs:</p>'
        out += html_table(SCALING_HEADERS, map(scaling_row, scaling), num_cols=(4, 5, 6, 7, 8))
    return out


def _html_load(report: Report) -> str:
    gpus = gpu_facts(report.fingerprint)
    charts = [(r, load_chart(r, gpus)) for r in report.results]
    figures = [
        f'<figure class="load"><figcaption>{escape(result_label(r))}</figcaption>{svg}</figure>'
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
    out = html_table(("Field", "Value"), overview_rows(report))
    gpus = gpu_rows(fp)
    if gpus:
        out += html_table(GPU_HEADERS, gpus)
    else:
        reason = fp.get("gpu_absent_reason")
        out += f"<p>No GPU found{': ' + escape(reason) if reason else '.'}</p>"
    topo = topology_table(fp)
    if topo:
        out += "<p>GPU topology (NV# = bonded NVLinks; PIX/PXB/PHB/NODE/SYS = PCIe paths):</p>"
        out += html_table(*topo)
    return out


def _html_software(report: Report) -> str:
    fp = report.fingerprint
    out = html_table(("Component", "Version"), software_rows(fp))
    env = (fp.get("software") or {}).get("env") or {}
    if env:
        pairs = ", ".join(f"<code>{escape(k)}={escape(v)}</code>" for k, v in sorted(env.items()))
        out += f"<p>Environment: {pairs}</p>"
    return out


def _check_row(c: Check) -> tuple[str, ...]:
    return (c.status, c.name, c.message, cell_text(c.threshold), DASH if c.seconds is None else f"{c.seconds:.1f}")


def _html_checks(report: Report) -> str:
    if not report.checks:
        return "<p>No checks ran.</p>"
    counts = status_counts(report.checks)
    spans = "".join(f'<span class="{s}">{n} {s}</span>' for s, n in counts.items())
    headers = ("Status", "Check", "Message", "Threshold", "Seconds")
    return f'<p class="counts">{spans}</p>' + html_table(
        headers, map(_check_row, report.checks), num_cols=(4,), status_col=0
    )


def _html_results(report: Report) -> str:
    if not report.results:
        return "<p>No measurements.</p>"
    table = html_table(RESULT_HEADERS, (result_row(r) for r in report.results), num_cols=(3, 6, 7, 8))
    return table + img_tag(plot_pct_of_spec(report), "results as percent of spec")


def _html_speedups(report: Report) -> str:
    if not report.speedups:
        return ""
    table = html_table(SPEEDUP_HEADERS, map(speedup_row, report.speedups), num_cols=(5,))
    return table + img_tag(plot_speedups(report), "speedups")


def _html_scaling(report: Report) -> str:
    if not report.scaling:
        return ""
    out = html_table(SCALING_HEADERS, map(scaling_row, report.scaling), num_cols=(4, 5, 6, 7, 8))
    groups = scaling_groups(report)
    devices = [(key, pts) for key, pts in groups.items() if key[2] != "cpu"]
    out += "".join(img_tag(plot_scaling(pts), "scaling " + " ".join(key)) for key, pts in devices[:MAX_SCALING_PLOTS])
    return out + img_tag(plot_cpu_threads(groups), "CPU thread scaling")


def _html_timelines(report: Report) -> str:
    timelines = [r for r in report.results if r.telemetry is not None and r.telemetry.timeline]
    out = "".join(img_tag(plot_timeline(r), "telemetry " + result_label(r)) for r in timelines[:MAX_TIMELINE_PLOTS])
    if len(timelines) > MAX_TIMELINE_PLOTS:
        out += f"<p>{len(timelines) - MAX_TIMELINE_PLOTS} more timelines are in the JSON report.</p>"
    return out


def _html_thresholds(report: Report) -> str:
    return html_table(THRESHOLD_HEADERS, threshold_rows(report)) if report.thresholds else ""


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
        return "".join(f'<a href="#{a}">{escape(t)}</a>' for a, t, _ in items)

    return f'<nav class="toc">{links(front)}<a href="#details"><strong>Details:</strong></a>{links(details)}</nav>'


def _html_head(report: Report) -> str:
    title = escape(page_title(report))
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
    parts += [f'<section id="{a}"><h2>{escape(t)}</h2>{body}</section>' for a, t, body in front]
    parts.append('<h2 class="part" id="details">Details</h2>')
    parts += [f'<section id="{a}"><h3>{escape(t)}</h3>{body}</section>' for a, t, body in details]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
