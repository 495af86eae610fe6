"""Compare validation reports: per-measurement ratios against a baseline, check regressions, and the
fingerprint differences that may explain them.

The first report is the baseline. Every measured value is "higher is better", so a row regresses when
`value / baseline < 1 - threshold_pct / 100`.

A report can hold several measurements of one row (the same configuration run and appended again). All of
them are kept: a row compares the median of each report's measurements, so one outlier neither hides nor fakes
a regression, and the count and the spread (min–max) are shown; a spread wider than the threshold is listed.
"""

from __future__ import annotations

import io
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpulab.errors import GpulabError
from gpulab.report.model import Check, Report, Result

ResultKey = tuple[str, str, str, int, str, str]
KEY_FIELDS = ("workload", "framework", "launcher", "n", "precision", "device")
MEDIAN_NOTE = "a row measured more than once in a report compares its median; regressions are judged on the median"


def parse_threshold(text: str | float) -> float:
    """A regression threshold in percent: "5%" and "5" both mean five percent.

    A bare number between 0 and 1 ("0.05") is ambiguous (a fraction or a percent?) and is refused; write
    "5%" or "0.05%". Negative, non-finite and >= 100 values are refused too.
    """
    raw = str(text).strip()
    has_pct = raw.endswith("%")
    number = raw[:-1].strip() if has_pct else raw
    try:
        value = float(number)
    except ValueError:
        raise GpulabError(f"bad --threshold {raw!r}: expected a percentage such as '5%' or '5'") from None
    if not math.isfinite(value) or value < 0:
        raise GpulabError(f"bad --threshold {raw!r}: it must be a percentage from 0 to below 100, e.g. '5%'")
    if value >= 100:
        raise GpulabError(f"bad --threshold {raw!r}: 100 % or more never flags a regression; use e.g. '5%'")
    if not has_pct and 0 < value < 1:
        raise GpulabError(
            f"ambiguous --threshold {raw!r}: write '{value * 100:g}%' for {value * 100:g} percent "
            f"or '{raw}%' if you mean {raw} percent"
        )
    return value


def key_text(key: ResultKey) -> str:
    workload, framework, launcher, n, precision, device = key
    return f"{workload}/{framework}/{launcher} n={n} {precision}" + (f" {device}" if device else "")


@dataclass
class Row:
    """One measured configuration across the reports; `values[i]` (the median of `measurements[i]`) and
    `ratios[i]` belong to report i (None when absent)."""

    key: ResultKey
    unit: str
    values: list[float | None]
    ratios: list[float | None]
    status: str  # "ok", "regression", "only in A", "missing in B, C", "unit differs", "no baseline value"
    regressed_in: list[str] = field(default_factory=list)
    measurements: list[list[float]] = field(default_factory=list)  # every value per report, in report order

    @property
    def regression(self) -> bool:
        return bool(self.regressed_in)

    def found(self, i: int) -> list[float]:
        """Every measurement report i holds for this row (its median alone when built without them)."""
        if i < len(self.measurements):
            return self.measurements[i]
        value = self.values[i]
        return [] if value is None else [value]

    def spread(self, i: int) -> tuple[float, float] | None:
        """(min, max) of report i's measurements; None when it has none."""
        found = self.found(i)
        return (min(found), max(found)) if found else None

    def spread_pct(self, i: int) -> float | None:
        """(max - min) / median of report i's measurements, in percent; None with fewer than two."""
        found = self.found(i)
        median = self.values[i]
        if len(found) < 2 or not median:
            return None
        return (max(found) - min(found)) / abs(median) * 100

    def cell(self, i: int) -> str:
        """Report i's value for a table: the median, with the count and min–max when measured more than once."""
        found = self.found(i)
        if len(found) < 2:
            return _num(self.values[i])
        return f"{_num(self.values[i])} (median of {len(found)}: {_num(min(found))}–{_num(max(found))})"

    def to_dict(self, labels: Sequence[str]) -> dict[str, Any]:
        spreads = [self.spread(i) for i in range(len(labels))]
        found = [self.found(i) for i in range(len(labels))]
        return {
            **dict(zip(KEY_FIELDS, self.key, strict=True)),
            "unit": self.unit,
            "values": dict(zip(labels, self.values, strict=True)),
            "ratios": dict(zip(labels, self.ratios, strict=True)),
            "counts": {label: len(m) for label, m in zip(labels, found, strict=True)},
            "spread": {
                label: {"min": s[0], "max": s[1]} if s else None for label, s in zip(labels, spreads, strict=True)
            },
            "measurements": dict(zip(labels, found, strict=True)),
            "status": self.status,
            "regressed_in": self.regressed_in,
        }


@dataclass
class CheckRow:
    name: str
    statuses: list[str | None]  # per report; None when the check did not run there
    messages: list[str | None]
    regressed_in: list[str] = field(default_factory=list)

    @property
    def regression(self) -> bool:
        return bool(self.regressed_in)

    def to_dict(self, labels: Sequence[str]) -> dict[str, Any]:
        return {
            "name": self.name,
            "statuses": dict(zip(labels, self.statuses, strict=True)),
            "messages": dict(zip(labels, self.messages, strict=True)),
            "regressed_in": self.regressed_in,
        }


@dataclass
class Comparison:
    labels: list[str]
    threshold_pct: float
    rows: list[Row]
    checks: list[CheckRow]
    notes: list[str]

    @property
    def baseline(self) -> str:
        return self.labels[0]

    @property
    def regressions(self) -> list[str]:
        """One line per regression: a result below the threshold or a check that passed and now fails."""
        out = []
        for row in self.rows:
            for label in row.regressed_in:
                i = self.labels.index(label)
                ratio = row.ratios[i]
                out.append(
                    f"{key_text(row.key)}: {label} {row.cell(i)} vs {row.cell(0)} {row.unit} ({_ratio_pct(ratio)})"
                )
        for check in self.checks:
            for label in check.regressed_in:
                i = self.labels.index(label)
                msg = check.messages[i] or ""
                out.append(f"check {check.name}: pass → {check.statuses[i]} in {label}" + (f": {msg}" if msg else ""))
        return out

    @property
    def wide_spreads(self) -> list[str]:
        """One line per report whose repeated measurements of a row lie further apart than the threshold."""
        out = []
        for row in self.rows:
            for i, label in enumerate(self.labels):
                pct = row.spread_pct(i)
                if pct is None or pct <= self.threshold_pct:
                    continue
                found = row.found(i)
                out.append(
                    f"{key_text(row.key)}: {label} has {len(found)} measurements "
                    f"({', '.join(_num(v) for v in found)} {row.unit}), {pct:.0f} % apart; "
                    f"median {_num(row.values[i])} compared"
                )
        return out

    @property
    def repeated(self) -> bool:
        return any(len(row.found(i)) > 1 for row in self.rows for i in range(len(self.labels)))

    @property
    def verdict(self) -> str:
        regs = self.regressions
        if not regs:
            return f"verdict: no regression (threshold {self.threshold_pct:g} % below {self.baseline})"
        n_rows = sum(len(r.regressed_in) for r in self.rows)
        n_checks = sum(len(c.regressed_in) for c in self.checks)
        parts = []
        if n_rows:
            parts.append(f"{n_rows} result(s) more than {self.threshold_pct:g} % below the baseline")
        if n_checks:
            parts.append(f"{n_checks} check(s) passed in the baseline and fail now")
        return f"verdict: REGRESSION: {', '.join(parts)} (baseline {self.baseline})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "reports": self.labels,
            "threshold_pct": self.threshold_pct,
            "rows": [r.to_dict(self.labels) for r in self.rows],
            "checks": [c.to_dict(self.labels) for c in self.checks],
            "aggregate": "median",
            "regressions": self.regressions,
            "wide_spreads": self.wide_spreads,
            "notes": self.notes,
            "regression": bool(self.regressions),
            "verdict": self.verdict,
        }

    def to_text(self, width: int = 160) -> str:
        """The comparison table, changed checks, fingerprint notes and the verdict line, as plain text."""
        from rich.console import Console
        from rich.table import Table

        buf = io.StringIO()
        console = Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False)
        table = Table(title=f"results (baseline: {self.baseline})", title_justify="left")
        for col in ("workload", "framework", "launcher", "n", "precision", "device", "unit"):
            table.add_column(col, justify="right" if col == "n" else "left")
        for i, label in enumerate(self.labels):
            table.add_column(label, justify="right", overflow="fold")
            if i:
                table.add_column(f"{label} vs base", justify="right")
        table.add_column("status")
        for row in self.rows:
            cells = [*map(str, row.key[:5]), row.key[5] or "all", row.unit]
            for i in range(len(row.values)):
                cells.append(row.cell(i))
                if i:
                    cells.append(_ratio_pct(row.ratios[i]))
            cells.append(row.status.upper() if row.regression else row.status)
            table.add_row(*cells)
        if self.rows:
            console.print(table)
            if self.repeated:
                console.print(f"note: {MEDIAN_NOTE}", soft_wrap=True)
        else:
            console.print("no results to compare")
        changed = [c for c in self.checks if len({s for s in c.statuses}) > 1]
        if changed:
            ctable = Table(title="checks that differ", title_justify="left")
            ctable.add_column("check", overflow="fold")
            for label in self.labels:
                ctable.add_column(label)
            ctable.add_column("status")
            for c in changed:
                ctable.add_row(c.name, *[s or "-" for s in c.statuses], "REGRESSION" if c.regression else "")
            console.print(ctable)
        if self.notes:
            console.print("fingerprint differences:")
            for note in self.notes:
                console.print(f"  - {note}", soft_wrap=True)
        spreads = self.wide_spreads
        if spreads:
            console.print(f"repeated measurements more than {self.threshold_pct:g} % apart (check these runs):")
            for line in spreads:
                console.print(f"  - {line}", soft_wrap=True)
        regs = self.regressions
        if regs:
            console.print("regressions:")
            for line in regs:
                console.print(f"  - {line}", soft_wrap=True)
        console.print(self.verdict, soft_wrap=True)
        return buf.getvalue()


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _ratio_pct(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{(ratio - 1) * 100:+.1f} %"


def _unique_labels(labels: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return out


def _index(results: Sequence[Result]) -> dict[ResultKey, list[Result]]:
    """Every measurement per key, in report order (a repeated run is a second measurement, not a duplicate)."""
    out: dict[ResultKey, list[Result]] = {}
    for r in results:
        out.setdefault(r.key(), []).append(r)
    return out


def _summary(keys: Sequence[ResultKey], limit: int = 6) -> str:
    if not keys:
        return "no results"
    shown = ", ".join(key_text(k) for k in sorted(keys, key=str)[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def compare(reports: list[tuple[str, Report]], threshold_pct: float = 5.0) -> Comparison:
    """Compare reports against the first (the baseline); raises GpulabError when they share nothing."""
    if len(reports) < 2:
        raise GpulabError("compare needs at least two reports: the baseline first, then the runs to compare")
    if not math.isfinite(threshold_pct) or not 0 <= threshold_pct < 100:
        raise GpulabError(f"bad threshold {threshold_pct!r}: it must be a percentage from 0 to below 100")
    labels = _unique_labels([label for label, _ in reports])
    indexes = [_index(rep.results) for _, rep in reports]
    base = indexes[0]

    base_checks = {c.name for c in reports[0][1].checks}
    for label, idx, (_, rep) in zip(labels[1:], indexes[1:], reports[1:], strict=True):
        if base.keys() & idx.keys():
            continue
        checks_only = not base and not idx and base_checks & {c.name for c in rep.checks}
        if checks_only:
            continue
        raise GpulabError(
            f"{labels[0]} and {label} share no results ({labels[0]} has: {_summary(list(base))}; "
            f"{label} has: {_summary(list(idx))}): compare runs of the same tier/workloads"
        )

    limit = 1 - threshold_pct / 100
    keys: list[ResultKey] = []
    for idx in indexes:
        keys += [k for k in idx if k not in keys]
    rows = []
    for key in keys:
        found = [idx.get(key, []) for idx in indexes]
        measurements = [[r.value for r in rs] for rs in found]
        values = [statistics.median(m) if m else None for m in measurements]
        units = {r.unit for rs in found for r in rs}
        unit = next(rs[0].unit for rs in found if rs)
        ratios: list[float | None] = [None] * len(found)
        regressed: list[str] = []
        present = [lab for lab, r in zip(labels, found, strict=True) if r]
        missing = [lab for lab, r in zip(labels, found, strict=True) if not r]
        if missing:
            status = f"only in {', '.join(present)}" if len(present) == 1 else f"missing in {', '.join(missing)}"
        elif len(units) > 1:
            status = "unit differs"
        else:
            status = "ok"
        base_value = values[0]
        if base_value is not None and base_value > 0 and len(units) == 1:
            ratios[0] = 1.0
            for i in range(1, len(found)):
                value = values[i]
                if value is None:
                    continue
                ratio = value / base_value
                ratios[i] = ratio
                if ratio < limit:
                    regressed.append(labels[i])
        elif base_value is not None and len(units) == 1 and status == "ok":
            status = "no baseline value"
        if regressed:
            status = "regression"
        rows.append(
            Row(
                key=key,
                unit=unit,
                values=values,
                ratios=ratios,
                status=status,
                regressed_in=regressed,
                measurements=measurements,
            )
        )

    checks = _compare_checks(labels, [rep.checks for _, rep in reports])
    notes: list[str] = []
    base_fp = reports[0][1].fingerprint
    for label, (_, rep) in zip(labels[1:], reports[1:], strict=True):
        found_notes = fingerprint_notes(base_fp, rep.fingerprint)
        if len(reports) > 2:
            found_notes = [f"{label} vs {labels[0]}: {n}" for n in found_notes]
        notes += found_notes
    return Comparison(labels=labels, threshold_pct=threshold_pct, rows=rows, checks=checks, notes=notes)


def _compare_checks(labels: Sequence[str], checks: Sequence[Sequence[Check]]) -> list[CheckRow]:
    by_name: list[dict[str, Check]] = []
    names: list[str] = []
    for cs in checks:
        d: dict[str, Check] = {}
        for c in cs:
            d.setdefault(c.name, c)
            if c.name not in names:
                names.append(c.name)
        by_name.append(d)
    rows = []
    for name in names:
        found = [d.get(name) for d in by_name]
        statuses: list[str | None] = [c.status if c else None for c in found]
        messages = [c.message if c else None for c in found]
        regressed = [
            labels[i] for i in range(1, len(found)) if statuses[0] == "pass" and statuses[i] in ("fail", "error")
        ]
        rows.append(CheckRow(name=name, statuses=statuses, messages=messages, regressed_in=regressed))
    return rows


# --- fingerprint differences ----------------------------------------------------------------------


def _fp(value: Report | dict[str, Any]) -> dict[str, Any]:
    return value.fingerprint if isinstance(value, Report) else value


def _show(value: Any) -> str:
    if value is None or value == "":
        return "unknown"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _link(pcie: dict[str, Any] | None, which: str) -> str:
    pcie = pcie or {}
    gen, width = pcie.get(f"gen_{which}"), pcie.get(f"width_{which}")
    if gen is None and width is None:
        return "unknown"
    return f"gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def _platform(fp: dict[str, Any]) -> str:
    hyp = (fp.get("host") or {}).get("hypervisor")
    return f"VM ({hyp})" if hyp else "bare metal"


def _frameworks(fp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(f.get("name")): f for f in (fp.get("software") or {}).get("frameworks") or []}


def _gpu_models(fp: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for g in fp.get("gpus") or []:
        counts[str(g.get("name"))] = counts.get(str(g.get("name")), 0) + 1
    return ", ".join(f"{n}x {name}" for name, n in sorted(counts.items())) or "no GPU"


def _per_gpu(fp: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(g.get("index", i)): g for i, g in enumerate(fp.get("gpus") or [])}


def _gpu_flag_note(what: str, a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]], key: str) -> str | None:
    changed = [i for i in sorted(a.keys() & b.keys()) if a[i].get(key) != b[i].get(key)]
    if not changed:
        return None
    before = {_show(a[i].get(key)) for i in changed}
    after = {_show(b[i].get(key)) for i in changed}
    gpus = ", ".join(str(i) for i in changed)
    return f"{what} on GPU {gpus}: {'/'.join(sorted(before))} → {'/'.join(sorted(after))}"


def fingerprint_notes(a: Report | dict[str, Any], b: Report | dict[str, Any]) -> list[str]:
    """Differences between two fingerprints (baseline `a`, then `b`) that can explain a performance change."""
    fa, fb = _fp(a), _fp(b)
    ha, hb = fa.get("host") or {}, fb.get("host") or {}
    sa, sb = fa.get("software") or {}, fb.get("software") or {}
    notes: list[str] = []

    def diff(label: str, va: Any, vb: Any) -> None:
        if va != vb:
            notes.append(f"{label}: {_show(va)} → {_show(vb)}")

    diff("host", ha.get("hostname"), hb.get("hostname"))
    diff("platform", _platform(fa), _platform(fb))
    ga, gb = fa.get("gpus") or [], fb.get("gpus") or []
    diff("GPU count", len(ga), len(gb))
    if _gpu_models(fa) != _gpu_models(fb) and {g.get("name") for g in ga} != {g.get("name") for g in gb}:
        notes.append(f"GPU model: {_gpu_models(fa)} → {_gpu_models(fb)}")
    diff("NVIDIA driver", sa.get("driver_version"), sb.get("driver_version"))
    diff("CUDA (driver)", sa.get("cuda_driver_version"), sb.get("cuda_driver_version"))
    diff("nvcc", sa.get("nvcc_version"), sb.get("nvcc_version"))
    diff("cuDNN", sa.get("cudnn_version"), sb.get("cudnn_version"))
    diff("NCCL", sa.get("nccl_version"), sb.get("nccl_version"))
    fwa, fwb = _frameworks(fa), _frameworks(fb)
    for name in sorted(fwa.keys() | fwb.keys()):
        x, y = fwa.get(name) or {}, fwb.get(name) or {}
        diff(name, x.get("version") if x else "not installed", y.get("version") if y else "not installed")
        if x and y:
            diff(f"{name} built with CUDA", x.get("built_cuda"), y.get("built_cuda"))
            diff(f"{name} cuDNN", x.get("built_cudnn"), y.get("built_cudnn"))
    diff("python", sa.get("python"), sb.get("python"))

    ca, cb = ha.get("cpu") or {}, hb.get("cpu") or {}
    diff("CPU model", ca.get("model"), cb.get("model"))
    diff("CPU threads", ca.get("threads"), cb.get("threads"))
    diff("NUMA nodes", len(ha.get("numa_nodes") or []), len(hb.get("numa_nodes") or []))
    diff("kernel", ha.get("kernel"), hb.get("kernel"))

    pa, pb = _per_gpu(fa), _per_gpu(fb)
    for i in sorted(pa.keys() & pb.keys()):
        la, lb = _link(pa[i].get("pcie"), "current"), _link(pb[i].get("pcie"), "current")
        if la != lb:
            notes.append(f"GPU {i} PCIe link: {la} → {lb} (max {_link(pb[i].get('pcie'), 'max')})")
    for what, key in (
        ("NUMA node", "numa_node"),
        ("ECC", "ecc_enabled"),
        ("persistence mode", "persistence_mode"),
        ("power limit (W)", "power_limit_w"),
        ("max SM clock (MHz)", "max_sm_clock_mhz"),
        ("virtualization mode", "virtualization_mode"),
    ):
        note = _gpu_flag_note(what, pa, pb, key)
        if note:
            notes.append(note)

    ea, eb = sa.get("env") or {}, sb.get("env") or {}
    for var in sorted(ea.keys() | eb.keys()):
        if ea.get(var) != eb.get(var):
            notes.append(f"env {var}: {ea.get(var, '(unset)')} → {eb.get(var, '(unset)')}")
    return notes
