"""A comparison as sections (mode and speedups first), rendered as text, Markdown or a self-contained HTML page."""

from __future__ import annotations

import html
import io
from dataclasses import dataclass, field

from gpulab.report.compare import Comparison, _names, _num, _ratio_pct, key_text, short_labels


@dataclass
class Section:
    title: str
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _row_name(key: tuple[str, str, str, int, str, str]) -> str:
    return key_text(key)


def sections(c: Comparison) -> list[Section]:
    names = short_labels(c.labels)
    labels = [chr(ord("A") + i) if len(names) <= 26 else name for i, name in enumerate(names)]
    legend = ", ".join(f"{x} = {name}" for x, name in zip(labels, names, strict=True))
    out = [
        Section("verdict", lines=[c.verdict, *c.regressions]),
        Section("mode", lines=[c.mode_line, c.relation_line, f"reports: {legend} (ratios against {labels[0]})"]),
    ]
    if c.speedups:
        out.append(
            Section(
                "speedups (one CPU thread -> all threads -> one GPU)",
                ["workload", "framework", "precision", "step", *labels],
                [
                    [s.workload, s.framework, s.precision, s.step, *[s.cell(i) for i in range(len(labels))]]
                    for s in c.speedups
                ],
            )
        )
    if c.scaling:
        out.append(
            Section(
                "scaling (1 -> N)",
                ["workload", "framework", "launcher", "precision", *labels],
                [
                    [s.workload, s.framework, s.launcher, s.precision, *[s.cell(i) for i in range(len(labels))]]
                    for s in c.scaling
                ],
            )
        )
    multi = any(r.per_gpu(i) != r.values[i] for r in c.rows for i in range(len(labels)))
    power = any(r.per_watt(i) for r in c.rows for i in range(len(labels)))
    headers = ["result", "unit"]
    for i, label in enumerate(labels):
        headers.append(label)
        if i:
            headers.append(f"{label} vs {labels[0]}")
            if c.vm[i]:
                headers.append(f"{label} VM/host")
    if multi:
        headers += [f"{label} per GPU" for label in labels] + [
            f"{label} vs {labels[0]} per GPU" for label in labels[1:]
        ]
    if power:
        headers += [f"{label} per W" for label in labels]
    if c.prices:
        headers += [f"{labels[i]} samples per $ (${p:g}/h)" for i, p in sorted(c.prices.items())]
    rows = []
    for r in c.rows:
        cells = [_row_name(r.key), r.unit]
        for i in range(len(labels)):
            found = r.found(i)
            cells.append(
                r.cell(i) if c.mode == "same" or len(found) < 2 else f"{_num(r.values[i])} (median of {len(found)})"
            )
            if i:
                cells.append(_ratio_pct(r.ratios[i]))
                if c.vm[i]:
                    vm = c.vm_ratio(r, i)
                    cells.append("-" if vm is None else f"{vm:.3f}")
        if multi:
            per = [r.per_gpu(i) for i in range(len(labels))]
            cells += [_num(v) for v in per]
            cells += [
                _ratio_pct(v / per[0]) if v is not None and per[0] and r.ratios[i] is not None else "-"
                for i, v in enumerate(per[1:], start=1)
            ]
        if power:
            cells += [_num(r.per_watt(i)) for i in range(len(labels))]
        for i, price in sorted(c.prices.items()):
            v = r.values[i]
            cells.append(_num(v * 3600 / price) if v is not None and r.unit == "samples/s" and price > 0 else "-")
        if c.mode == "same":
            cells.append(r.status.upper() if r.regression else r.status)
        rows.append(cells)
    if c.mode == "same":
        headers.append("status")
    notes = list(c.vm_overhead)
    notes += [f"{_row_name(r.key)}: {r.status}" for r in c.rows if "no ratio" in r.status]
    if c.mode != "same":
        notes.append("CPU rows: n=all is every thread of each machine; 'each GPU' rows are the median over its GPUs")
    if power:
        notes.append(
            "per W: the value over the summed mean board power of the row's GPUs (samples/s per W = samples/J)"
        )
    if c.prices:
        notes.append("per $: value x 3600 / USD per hour (samples per dollar)")
    out.append(Section("throughputs", headers, rows, notes))
    changed = [ch for ch in c.checks if len(set(ch.statuses)) > 1 and ch.name not in c.not_comparable]
    if changed:
        out.append(
            Section(
                "checks that differ",
                ["check", *labels],
                [[ch.name, *[s or "-" for s in ch.statuses]] for ch in changed],
            )
        )
    if c.not_comparable:
        out.append(
            Section(
                "not comparable",
                lines=[f"checks not run under the same name in every report: {_names(c.not_comparable)}"],
            )
        )
    if c.notes:
        out.append(Section("fingerprint differences", lines=list(c.notes)))
    return out


def to_text(c: Comparison, width: int = 160) -> str:
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False)
    for sec in sections(c):
        if sec.headers:
            table = Table(title=sec.title, title_justify="left")
            for j, h in enumerate(sec.headers):
                table.add_column(h, overflow="fold", no_wrap=j == 0)
            for row in sec.rows:
                table.add_row(*row)
            console.print(table)
        elif sec.title not in ("mode", "verdict"):
            console.print(f"{sec.title}:")
        for line in sec.lines:
            indent = "" if sec.title in ("mode", "verdict") or sec.headers else "  - "
            console.print(f"{indent}{line}", soft_wrap=True)
    return buf.getvalue()


def to_markdown(c: Comparison) -> str:
    parts = ["# gpulab comparison", ""]
    for sec in sections(c):
        parts += [f"## {sec.title}", ""]
        if sec.headers:
            parts.append("| " + " | ".join(sec.headers) + " |")
            parts.append("|" + "---|" * len(sec.headers))
            parts += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in sec.rows]
            parts.append("")
        parts += [f"- {line}" for line in sec.lines]
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.4em}
table{border-collapse:collapse;font-size:.85em;margin:.4em 0}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;white-space:nowrap}
th{background:#f0f0f0;white-space:normal;vertical-align:bottom}td.num{text-align:right}
.wide{overflow-x:auto}
.mode{font-size:1.05em;background:#eef4ff;border-left:4px solid #36c;padding:.5em .8em}
.regression{background:#fdd}ul{margin:.3em 0}
"""


def _td(cell: str) -> str:
    numeric = cell[:1].isdigit() or cell == "-" or (cell[:1] in "+-" and cell[1:2].isdigit())
    return f'<td class="num">{html.escape(cell)}</td>' if numeric else f"<td>{html.escape(cell)}</td>"


def to_html(c: Comparison) -> str:
    e = html.escape
    body = [f"<h1>gpulab comparison: {e(' vs '.join(short_labels(c.labels)))}</h1>"]
    for sec in sections(c):
        body.append(f'<section id="{e(sec.title.split()[0])}"><h2>{e(sec.title)}</h2>')
        if sec.title in ("mode", "verdict"):
            body += [f'<p class="mode">{e(line)}</p>' for line in sec.lines]
            body.append("</section>")
            continue
        if sec.headers:
            body.append('<div class="wide"><table><tr>' + "".join(f"<th>{e(h)}</th>" for h in sec.headers) + "</tr>")
            for row in sec.rows:
                cls = ' class="regression"' if row and row[-1] == "REGRESSION" else ""
                body.append(f"<tr{cls}>" + "".join(_td(cell) for cell in row) + "</tr>")
            body.append("</table></div>")
        if sec.lines:
            body.append("<ul>" + "".join(f"<li>{e(line)}</li>" for line in sec.lines) + "</ul>")
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>gpulab comparison</title>'
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
