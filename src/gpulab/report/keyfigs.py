"""The key figures as the validation page shows them: each with its measured value, interval, bound and verdict.

A key figure is one measurement with a reference (datasheet or known-good row), its per-device rows grouped
(`views.key_figure_groups`). Its bound and verdict come from the checks that judged those rows: a check judged a row
when its evidence carries the row's value. Scaling rows without a bound say that they are for comparison only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpulab.records import Check, Report, Result, Scaling, Threshold
from gpulab.report.views import DASH, finite_or_none

# worst first: the verdict of a figure judged by several checks (its devices, datasheet and known-good) is the worst
_ORDER = ("fail", "error", "marginal", "pass")


@dataclass(frozen=True)
class Judgement:
    word: str  # "pass", "fail", "error", "marginal", "not judged", "informational"
    bound: str  # "≥ 60 % of datasheet"; DASH when none
    interval: str  # "65.1 – 68.3 %" (the checks' intervals of the % of the reference); DASH when none
    why: str  # the judging check's message (a tooltip), or why nothing judged it

    @property
    def css(self) -> str:
        return self.word.replace(" ", "-") if self.word in (*_ORDER, "not judged") else "info"


def bound_text(t: Threshold) -> str:
    if t.unit == "%":
        ref = "known-good" if "known_good" in t.name else "datasheet" if "spec" in t.name else ""
        return f"≥ {t.value:g} % of {ref}".rstrip(" of")
    if t.unit == "fraction":
        return f"≥ {t.value * 100:g} % efficiency"
    if t.unit == "x":
        return f"≥ {t.value:g}x"
    return f"≥ {t.value:g} {t.unit}"


def _same(a: object, b: float) -> bool:
    x = finite_or_none(a)
    return x is not None and math.isclose(x, b, rel_tol=1e-9, abs_tol=0.0)


def judging_checks(report: Report, rows: Sequence[Result]) -> list[Check]:
    """The checks whose evidence carries one of these rows' values (the probe checks, the known-good checks)."""
    return [c for c in report.checks if any(_same(c.evidence.get("value"), r.value) for r in rows)]


def _interval(checks: Sequence[Check], key: str = "pct_interval") -> str:
    spans = [c.evidence.get(key) for c in checks]
    pairs = [(float(s[0]), float(s[1])) for s in spans if isinstance(s, (list, tuple)) and len(s) == 2]
    if not pairs:
        return DASH
    lo, hi = min(p[0] for p in pairs), max(p[1] for p in pairs)
    return f"{lo:.1f} – {hi:.1f} %"


def _threshold(report: Report, name: str | None) -> Threshold | None:
    return next((t for t in report.thresholds if t.name == name), None) if name else None


def judge(report: Report, checks: Sequence[Check]) -> Judgement:
    """The verdict of a figure from the checks that judged it: the worst of those with a bound."""
    judged = [c for c in checks if c.status in _ORDER]
    bounded = [c for c in judged if c.threshold] or judged
    if not bounded:
        why = next((c.message for c in checks), "no check judged this figure")
        return Judgement("not judged", DASH, _interval(checks), why)
    worst = min(bounded, key=lambda c: _ORDER.index(c.status))
    bounds = sorted({bound_text(t) for c in bounded if (t := _threshold(report, c.threshold))})
    interval = _interval([c for c in bounded if c.threshold] or bounded)
    return Judgement(worst.status, "; ".join(bounds) or DASH, interval, worst.message)


def key_figure_judgement(report: Report, rows: Sequence[Result]) -> Judgement:
    return judge(report, judging_checks(report, rows))


def scaling_check(report: Report, s: Scaling) -> Check | None:
    """The check that judged a scaling point: `scaling.<launcher>[<workload>,<n>]`."""
    name = f"scaling.{s.launcher}[{s.workload},{s.n}]"
    return next((c for c in report.checks if c.name == name), None)


def scaling_judgement(report: Report, s: Scaling) -> Judgement:
    """A scaling point's verdict; one without a bound (DataParallel beside DDP) is informational and says so."""
    check = scaling_check(report, s)
    if check is not None and check.threshold:
        return dataclasses.replace(judge(report, [check]), interval=_scaling_interval(check))
    if s.expected is not None:
        word = "pass" if s.efficiency >= s.expected else "fail"
        return Judgement(word, f"≥ {s.expected * 100:.0f} % efficiency", DASH, s.expected_source or "")
    why = "measured for comparison only, not judged: no bound applies to this launcher"
    return Judgement("informational", DASH, _scaling_interval(check) if check else DASH, why)


def _scaling_interval(check: Check) -> str:
    span = check.evidence.get("interval")
    if isinstance(span, (list, tuple)) and len(span) == 2:
        return f"{float(span[0]) * 100:.1f} – {float(span[1]) * 100:.1f} %"
    return DASH
