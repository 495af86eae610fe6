"""A comparison as sections (mode and speedups first), rendered as text or Markdown; the HTML page
(`gpulab.report.compare.page`) renders the same sections from a template."""

from __future__ import annotations

import io
import shutil
import sys
from dataclasses import dataclass, field

from gpulab.report.compare.comparison import MEDIAN_NOTE, Comparison, short_labels
from gpulab.report.compare.keys import key_text
from gpulab.report.compare.rows import ratio_cell
from gpulab.report.formatting import name_list, num, ratio_pct
from gpulab.report.markdown import md_table, md_text


@dataclass
class Section:
    title: str
    headers: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _row_name(key: tuple[str, str, str, int, str, str]) -> str:
    return key_text(key)


def _throughputs(c: Comparison, labels: list[str]) -> Section:
    """The results table: each report's value and ratio to the baseline, per GPU, per W and per $ when known."""
    multi = any(r.value_per_gpu(i) != r.values[i] for r in c.rows for i in range(len(labels)))
    power = any(r.value_per_watt(i) for r in c.rows for i in range(len(labels)))
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
                r.cell(i) if c.mode == "same" or len(found) < 2 else f"{num(r.values[i])} (median of {len(found)})"
            )
            if i:
                cells.append(ratio_cell(r, i))
                if c.vm[i]:
                    vm = c.vm_ratio(r, i)
                    cells.append("-" if vm is None else f"{vm:.3f}")
        if multi:
            per = [r.value_per_gpu(i) for i in range(len(labels))]
            cells += [num(v) for v in per]
            cells += [
                ratio_pct(v / per[0]) if v is not None and per[0] and r.ratios[i] is not None else "-"
                for i, v in enumerate(per[1:], start=1)
            ]
        if power:
            cells += [num(r.value_per_watt(i)) for i in range(len(labels))]
        for i, price in sorted(c.prices.items()):
            v = r.values[i]
            cells.append(num(v * 3600 / price) if v is not None and r.unit == "samples/s" and price > 0 else "-")
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
    return Section("throughputs", headers, rows, notes)


def labels_of(c: Comparison) -> list[str]:
    """The reports' column labels: A, B, C… (their names when more than 26)."""
    names = short_labels(c.labels)
    return [chr(ord("A") + i) if len(names) <= 26 else name for i, name in enumerate(names)]


def sections(c: Comparison) -> list[Section]:
    names = short_labels(c.labels)
    labels = labels_of(c)
    legend = ", ".join(f"{x} = {name}" for x, name in zip(labels, names, strict=True))
    out = [
        Section("verdict", lines=[c.verdict, *c.regressions, *c.host_contended]),
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
    out.append(_throughputs(c, labels))
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
                lines=[f"checks not run under the same name in every report: {name_list(c.not_comparable)}"],
            )
        )
    if c.notes:
        out.append(Section("fingerprint differences", lines=list(c.notes)))
    return out


WIDTH = 160  # into a pipe or a file (no terminal to fit)


def terminal_width(default: int = WIDTH) -> int:
    """The terminal's columns where stdout is one (COLUMNS, then the tty's size); `default` into a pipe or a file,
    whose reader has no width (a log keeps the whole table), whatever COLUMNS says there."""
    if not sys.stdout.isatty():
        return default
    return max(60, shutil.get_terminal_size((default, 24)).columns)


def to_text(c: Comparison, width: int = WIDTH) -> str:
    """For the same machine kind the comparison table and verdict; for different machines the side-by-side
    sections."""
    if c.mode == "same":
        return _same_machine_text(c, width)
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
    """The comparison as Markdown; every text from the reports HTML-escaped, as the HTML page has it."""
    parts = ["# gpulab comparison", ""]
    for sec in sections(c):
        parts += [f"## {md_text(sec.title)}", ""]
        if sec.headers:
            parts += [*md_table(sec.headers, sec.rows), ""]
        parts += [f"- {md_text(line)}" for line in sec.lines]
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def _same_machine_text(cmp: Comparison, width: int) -> str:
    """The verdict and mode lines, the comparison table, changed checks and fingerprint notes."""
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False)
    console.print(cmp.verdict, soft_wrap=True)
    console.print(cmp.mode_line, soft_wrap=True)
    console.print(cmp.relation_line, soft_wrap=True)
    table = Table(title=f"results (baseline: {cmp.baseline})", title_justify="left")
    for col in ("workload", "framework", "launcher", "n", "precision", "device", "unit"):
        table.add_column(col, justify="right" if col == "n" else "left")
    for i, label in enumerate(cmp.labels):
        table.add_column(label, justify="right", overflow="fold")
        if i:
            table.add_column(f"{label} vs base", justify="right")
            if cmp.vm[i]:
                table.add_column(f"{label} VM/host", justify="right")
    table.add_column("side, band", no_wrap=True)
    table.add_column("status")
    for row in cmp.rows:
        cells = [*map(str, row.key[:5]), row.key[5] or "all", row.unit]
        for i in range(len(row.values)):
            cells.append(row.cell(i))
            if i:
                cells.append(ratio_cell(row, i))
                if cmp.vm[i]:
                    vm = cmp.vm_ratio(row, i)
                    cells.append("-" if vm is None else f"{vm:.3f} ({ratio_pct(vm)})")
        band = f" {row.band_pct:.0f}%" if row.band_pct is not None else " not judged" if row.band_why else ""
        cells.append(row.side + band)
        cells.append(row.status.upper() if row.regression else row.status)
        table.add_row(*cells)
    if cmp.rows:
        console.print(table)
        if cmp.repeated:
            console.print(f"note: {MEDIAN_NOTE}", soft_wrap=True)
        for line in cmp.vm_overhead:
            console.print(line, soft_wrap=True)
    else:
        console.print("no results to compare")
    changed = [c for c in cmp.checks if len({s for s in c.statuses}) > 1 and c.name not in cmp.not_comparable]
    if changed:
        ctable = Table(title="checks that differ", title_justify="left")
        ctable.add_column("check", overflow="fold")
        for label in cmp.labels:
            ctable.add_column(label)
        ctable.add_column("status")
        for c in changed:
            ctable.add_row(c.name, *[s or "-" for s in c.statuses], "REGRESSION" if c.regression else "")
        console.print(ctable)
    if cmp.not_comparable:
        console.print(
            f"not comparable (checks not run under the same name in every report): {name_list(cmp.not_comparable)}",
            soft_wrap=True,
        )
    spreads = cmp.wide_spreads
    if spreads:
        console.print(f"repeated measurements more than {cmp.threshold_pct:g} % apart (check these runs):")
        for line in spreads:
            console.print(f"  - {line}", soft_wrap=True)
    regs = cmp.regressions
    if regs:
        console.print("regressions:")
        for line in regs:
            console.print(f"  - {line}", soft_wrap=True)
    if cmp.host_contended:
        console.print("fell with the contended host (see the verdict's host figures), not regressions:")
        for line in cmp.host_contended:
            console.print(f"  - {line}", soft_wrap=True)
    if cmp.notes:
        console.print("fingerprint differences beside the verdict:")
        for note in cmp.notes:
            console.print(f"  - {note}", soft_wrap=True)
    return buf.getvalue()
