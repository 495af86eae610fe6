"""Compare validation reports: per-measurement ratios against a baseline, check regressions, and the
fingerprint differences that may explain them.

The first report is the baseline. Every measured value is "higher is better", so a row regresses when
`value / baseline < 1 - threshold_pct / 100`.

Which comparison applies is read from the fingerprints: reports of the same GPU model and count compare in
"same" mode (a regression check; a VM against its bare-metal host also gets the VM/host ratio per row), any
other pair in "different" mode (side by side, no verdict: speedups, throughputs per GPU, per watt and per
dollar). `--mode` forces one.

A report can hold several measurements of one row (the same configuration run and appended again). All of
them are kept: a row compares the median of each report's measurements, so one outlier neither hides nor fakes
a regression, and the count and the spread (min–max) are shown; a spread wider than the threshold is listed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpulab import names
from gpulab.errors import GpulabError
from gpulab.records import Check, Report, Result
from gpulab.report import judge
from gpulab.report.compare import host as compare_host
from gpulab.report.compare.fingerprint import cpu_kind, fingerprint_notes, gpu_models, vm_sides
from gpulab.report.compare.keys import (
    ResultKey,
    ScalingRow,
    SpeedupRow,
    index_results,
    key_text,
    keys_summary,
    median_watts,
    normal_key,
    own_precision_rows,
    relative_rates,
    scaling_rows,
    speedup_rows,
)
from gpulab.report.compare.rows import CheckRow, Row
from gpulab.report.contention import measured, report_contention, report_unsteady
from gpulab.report.formatting import num, ratio_pct

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


MODES = ("same", "different")


@dataclass
class Comparison:
    labels: list[str]
    threshold_pct: float
    rows: list[Row]
    checks: list[CheckRow]
    notes: list[str]
    mode: str = "same"
    mode_reason: str = ""
    speedups: list[SpeedupRow] = field(default_factory=list)
    scaling: list[ScalingRow] = field(default_factory=list)
    not_comparable: list[str] = field(default_factory=list)  # check names not present in every report
    vm: list[int | None] = field(default_factory=list)  # per report: +1 VM vs bare-metal baseline, -1 reverse
    prices: dict[int, float] = field(default_factory=dict)  # report index -> USD per hour
    relation: str = judge.SAME_KIND  # judge.RELATION_TEXT's keys: same machine, same model, same kind, other models
    hosts: list[str] = field(default_factory=list)  # per report: how busy its host was (judge.quiet_host)
    contention: list[str | None] = field(default_factory=list)  # per report: why its host was contended, or None
    host_measured: list[bool] = field(default_factory=list)  # per report: whether it measured contention at all
    unsteady: list[str | None] = field(default_factory=list)  # per report: why its host CPUs moved within a run

    @property
    def mode_line(self) -> str:
        what = "same machine kind" if self.mode == "same" else "different machines"
        return f"mode: {what} ({self.mode_reason})"

    @property
    def relation_line(self) -> str:
        hosts = "; ".join(f"{lab}: {h}" for lab, h in zip(short_labels(self.labels), self.hosts, strict=False))
        return f"machines: {judge.RELATION_TEXT[self.relation]}" + (f" (host load: {hosts})" if hosts else "")

    def vm_ratio(self, row: Row, i: int) -> float | None:
        """VM value / host value for report i against the baseline, when exactly one of them is a VM."""
        side = self.vm[i] if i < len(self.vm) else None
        ratio = row.ratios[i]
        if not side or not ratio:
            return None
        return ratio if side > 0 else 1 / ratio

    @property
    def vm_overhead(self) -> list[str]:
        """One line per VM-against-host pair: the virtualisation overhead (median VM/host ratio over the rows)."""
        out = []
        for i, label in enumerate(self.labels):
            ratios = [r for r in (self.vm_ratio(row, i) for row in self.rows) if r is not None]
            side = self.vm[i] if i < len(self.vm) else None
            if i and side and ratios:
                vm, host = (label, self.baseline) if side > 0 else (self.baseline, label)
                med = statistics.median(ratios)
                out.append(
                    f"virtualisation overhead: VM {vm} / host {host} = {med:.3f} (median over {len(ratios)} rows, "
                    f"{min(ratios):.3f}–{max(ratios):.3f}; VM/host column per row)"
                )
        return out

    @property
    def baseline(self) -> str:
        return self.labels[0]

    @property
    def regressions(self) -> list[str]:
        """One line per regression: a result below the threshold or a check that passed and now fails (same
        mode only; different machines get no verdict)."""
        out: list[str] = []
        if self.mode != "same":
            return out
        for row in self.rows:
            for label in row.regressed_in:
                i = self.labels.index(label)
                ratio = row.ratios[i]
                side = judge.SIDE_NAMES[row.side]
                out.append(
                    f"{key_text(row.key)}: {label} {row.cell(i)} vs {row.cell(0)} {row.unit} ({ratio_pct(ratio)}; "
                    f"{side} row, band {row.band_pct or self.threshold_pct:.0f} %: {row.band_why or 'threshold'})"
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
                    f"({', '.join(num(v) for v in found)} {row.unit}), {pct:.0f} % apart; "
                    f"median {num(row.values[i])} compared"
                )
        return out

    @property
    def repeated(self) -> bool:
        return any(len(row.found(i)) > 1 for row in self.rows for i in range(len(self.labels)))

    def side_summary(self) -> str:
        """Per side (GPU, host-bound GPU, host): how many rows, their change against the baseline and band."""
        parts = []
        for side, name in judge.SIDE_NAMES.items():
            rows = [r for r in self.rows if r.side == side]
            ratios = [x for r in rows for x in r.ratios[1:] if x is not None]
            if not ratios:
                continue
            bands = sorted({round(r.band_pct) for r in rows if r.band_pct is not None})
            if not bands:
                band = f"band: {judge.NOT_JUDGED}"
            else:
                band = f"band {bands[0]} %" if len(bands) == 1 else f"band {bands[0]}–{bands[-1]} %"
            lo, hi = ratio_pct(min(ratios)), ratio_pct(max(ratios))
            spread = lo if lo == hi else f"{lo}…{hi}"
            parts.append(f"{name} rows: {len(rows)}, {spread}, {band}")
        return "; ".join(parts)

    @property
    def verdict(self) -> str:
        """The GPU verdict and the host's, side by side (compare_host), then the change per side."""
        if self.mode != "same":
            return f"verdict: none ({judge.RELATION_TEXT[self.relation]}: side by side, not judged)"
        summary = self.side_summary()
        gpu = compare_host.gpu_verdict(self.rows, sum(len(c.regressed_in) for c in self.checks), self.baseline)
        names, n = short_labels(self.labels), len(self.labels)
        contention, measured = self.contention or [None] * n, self.host_measured or [False] * n
        host = compare_host.host_verdict(self.rows, self.labels, names, contention, measured, self.unsteady)
        return f"verdict: {gpu} · {host}" + (f" ({summary})" if summary else "")

    @property
    def host_contended(self) -> list[str]:
        """One line per row that fell with a contended host: shown, not a regression."""
        return compare_host.contended_lines(self.rows, self.labels)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "mode": self.mode,
            "mode_reason": self.mode_reason,
            "relation": self.relation,
            "host_load": dict(zip(self.labels, self.hosts, strict=False)),
            "speedups": [sp.to_dict(self.labels) for sp in self.speedups],
            "scaling": [sc.to_dict(self.labels) for sc in self.scaling],
            "not_comparable_checks": self.not_comparable,
            "baseline": self.baseline,
            "reports": self.labels,
            "threshold_pct": self.threshold_pct,
            "rows": [r.to_dict(self.labels) for r in self.rows],
            "checks": [c.to_dict(self.labels) for c in self.checks],
            "aggregate": "median",
            "regressions": self.regressions,
            "host_contended": self.host_contended,
            "host_contention": dict(zip(self.labels, self.contention, strict=False)),
            "host_unsteady": dict(zip(self.labels, self.unsteady, strict=False)),
            "wide_spreads": self.wide_spreads,
            "notes": self.notes,
            "regression": bool(self.regressions),
        }


def short_labels(labels: Sequence[str]) -> list[str]:
    """Each label's file name where those are unique (for narrow tables), else the labels as they are."""
    names = [label.rsplit("/", 1)[-1] for label in labels]
    return names if len(set(names)) == len(names) else list(labels)


def _unique_labels(labels: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label}#{seen[label]}")
    return out


def gpu_kind(fp: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """(GPU model, count) pairs of a fingerprint, sorted: what decides the comparison mode."""
    counts: dict[str, int] = {}
    for g in fp.get("gpus") or []:
        counts[str(g.get("name"))] = counts.get(str(g.get("name")), 0) + 1
    return tuple(sorted(counts.items()))


def choose_mode(labels: Sequence[str], reports: Sequence[Report], forced: str | None = None) -> tuple[str, str]:
    """("same" | "different", why): same when every report has the same GPU models and counts.

    A pseudo-report with no host in its fingerprint (`--known-good`) holds per-GPU rows: only its model counts.
    """
    fps = [rep.fingerprint for rep in reports]
    kinds = [gpu_models(fp) for fp in fps]
    real = [gpu_kind(fp) for fp in fps if fp.get("host") is not None]
    models = {tuple(name for name, _ in gpu_kind(fp)) for fp in fps}
    # Reports without GPUs (CPU-only runs) are the same kind of machine when their CPUs are.
    cpus = {cpu_kind(fp) for fp in fps}
    same = len(set(real)) <= 1 and len(models) == 1 and (bool(models - {()}) or len(cpus) == 1)
    listed = "; ".join(f"{label}: {kind}" for label, kind in zip(short_labels(labels), kinds, strict=True))
    if same:
        hosts = [fp for fp in fps if fp.get("host") is not None] or fps
        why = f"every report has {gpu_models(hosts[0])}"
    else:
        why = f"GPU models or counts differ ({listed})"
    if forced and forced not in MODES:
        raise GpulabError(f"bad --mode {forced!r}: choose one of {', '.join(MODES)}")
    if forced and forced != ("same" if same else "different"):
        why = f"forced with --mode {forced}; the fingerprints say {'same' if same else 'different'}: {why}"
    mode = forced or ("same" if same else "different")
    if mode == "different":
        why += "; no regression verdict, values side by side"
    else:
        why += "; regression check against the baseline"
    return mode, why


def compare(
    reports: list[tuple[str, Report]],
    threshold_pct: float = 5.0,
    mode: str | None = None,
    prices: dict[int, float] | None = None,
) -> Comparison:
    """Compare reports against the first (the baseline); raises GpulabError when they share nothing.

    `mode` "same" judges regressions; "different" lines the values up without a verdict; None reads it from
    the fingerprints. `prices` maps a report's index to its USD per hour (per-dollar figures).
    """
    if len(reports) < 2:
        raise GpulabError("compare needs at least two reports: the baseline first, then the runs to compare")
    if not math.isfinite(threshold_pct) or not 0 <= threshold_pct < 100:
        raise GpulabError(f"bad threshold {threshold_pct!r}: it must be a percentage from 0 to below 100")
    labels = _unique_labels([label for label, _ in reports])
    mode, why = choose_mode(labels, [rep for _, rep in reports], mode)
    keyer = Result.key if mode == "same" else normal_key
    indexes = [index_results(rep.results, keyer) for _, rep in reports]
    indexes, relative = relative_rates(labels, indexes)
    own_precision: list[str] = []
    if mode == "different":
        indexes, own_precision = own_precision_rows(labels, indexes)
    rel = judge.relation([rep for _, rep in reports], mode)
    quiet = [judge.quiet_host(rep) for _, rep in reports]
    contention = [report_contention(rep.host_load) for _, rep in reports]  # compare_host: why each host was contended
    unsteady = [report_unsteady(rep.host_load) for _, rep in reports]  # ... and why its CPUs moved within a run
    published = [rep.tier == names.PUBLISHED_TIER for _, rep in reports]

    _require_shared(labels, indexes, reports)
    keys: list[ResultKey] = []
    for idx in indexes:
        keys += [k for k in idx if k not in keys]
    rows = [
        _result_row(
            key,
            [idx.get(key, []) for idx in indexes],
            labels,
            threshold_pct=threshold_pct,
            mode=mode,
            rel=rel,
            quiet=quiet,
            published=published,
        )
        for key in keys
    ]

    if mode == "same":
        compare_host.excuse_contended(rows, labels, contention)
        compare_host.excuse_contended(rows, labels, unsteady, compare_host.HOST_UNSTEADY)
    all_checks = [rep.checks for _, rep in reports]
    checks = _compare_checks(labels, all_checks)
    not_comparable = [c.name for c in checks if any(s is None for s in c.statuses)]
    if mode != "same":
        for c in checks:
            c.regressed_in = []
    notes: list[str] = [*relative, *own_precision, *_machine_notes(labels, reports)]
    return Comparison(
        labels=labels,
        threshold_pct=threshold_pct,
        rows=rows,
        checks=checks,
        notes=notes,
        mode=mode,
        mode_reason=why,
        speedups=speedup_rows([rep for _, rep in reports]),
        scaling=scaling_rows([rep for _, rep in reports]),
        not_comparable=not_comparable,
        vm=vm_sides([rep for _, rep in reports]) if mode == "same" else [None] * len(reports),
        prices=dict(prices or {}),
        relation=rel,
        hosts=[why for _, why in quiet],
        contention=contention,
        host_measured=[measured(rep.host_load) for _, rep in reports],
        unsteady=unsteady,
    )


def _require_shared(
    labels: Sequence[str], indexes: Sequence[dict[ResultKey, list[Result]]], reports: Sequence[tuple[str, Report]]
) -> None:
    """Raise GpulabError when a report shares no result with the baseline (and not only checks)."""
    base = indexes[0]
    base_checks = {c.name for c in reports[0][1].checks}
    for label, idx, (_, rep) in zip(labels[1:], indexes[1:], reports[1:], strict=True):
        if base.keys() & idx.keys():
            continue
        checks_only = not base and not idx and base_checks & {c.name for c in rep.checks}
        if checks_only:
            continue
        raise GpulabError(
            f"{labels[0]} and {label} share no results ({labels[0]} has: {keys_summary(list(base))}; "
            f"{label} has: {keys_summary(list(idx))}): compare runs of the same tier/workloads"
        )


def _result_row(
    key: ResultKey,
    found: list[list[Result]],
    labels: Sequence[str],
    *,
    threshold_pct: float,
    mode: str,
    rel: str,
    quiet: Sequence[tuple[bool | None, str]],
    published: Sequence[bool],
) -> Row:
    """One row of the comparison: the median per report, the ratio to the baseline and the row's status."""
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
        status = f"unit differs ({' vs '.join(sorted(units))}): no ratio"
    else:
        status = "ok"
    base_value = values[0]
    side = judge.side(next(rs for rs in found if rs))
    intervals = [judge.interval(rs) for rs in found]
    ratio_intervals = [None] + [judge.ratio_interval(found[0], rs) if found[0] and rs else None for rs in found[1:]]
    # With windows on both sides the interval carries the noise; without, the baseline's repeats widen the band.
    noise = None if intervals[0] is not None else judge.repeat_noise_pct(found[0]) if found[0] else None
    row_band, row_why = judge.band(threshold_pct, side, rel, noise, quiet)
    limit = 1 - row_band / 100
    judged = mode == "same" and judge.judged(side, rel)
    other_work = [
        judge.work_difference(found[0], found[i], (published[0], published[i])) if found[0] and found[i] else ""
        for i in range(len(found))
    ]
    if base_value is not None and base_value > 0 and len(units) == 1:
        ratios[0] = 1.0
        for i in range(1, len(found)):
            value = values[i]
            if value is None or other_work[i]:
                continue
            ratio = value / base_value
            ratios[i] = ratio
            if judged and judge.regressed(ratio, ratio_intervals[i], limit):
                regressed.append(labels[i])
    elif base_value is not None and len(units) == 1 and status == "ok":
        status = "no baseline value"
    works = sorted({w for w in other_work if w})
    if works:
        status = f"{'; '.join(works)}: no ratio"
    if regressed:
        status = "regression"
    return Row(
        key=key,
        unit=unit,
        values=values,
        ratios=ratios,
        status=status,
        regressed_in=regressed,
        measurements=measurements,
        ns=[rs[0].n if rs else None for rs in found],
        watts=[median_watts(rs) for rs in found],
        side=side,
        band_pct=row_band if judged else None,
        band_why=row_why if judged else judge.NOT_JUDGED if mode == "same" else "",
        intervals=intervals,
        ratio_intervals=ratio_intervals,
    )


def _machine_notes(labels: Sequence[str], reports: Sequence[tuple[str, Report]]) -> list[str]:
    """The fingerprint differences of each report from the baseline, labelled when there are several."""
    notes: list[str] = []
    base_fp = reports[0][1].fingerprint
    for label, (_, rep) in zip(labels[1:], reports[1:], strict=True):
        found_notes = fingerprint_notes(base_fp, rep.fingerprint)
        if len(reports) > 2:
            found_notes = [f"{label} vs {labels[0]}: {n}" for n in found_notes]
        notes += found_notes
    return notes


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
