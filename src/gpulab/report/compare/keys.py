"""How compare lines reports up: the row key, the key across different machines, rates relative to one GPU,
the precision each machine trains in, and the speedup and scaling rows found in every report."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpulab.names import Launcher
from gpulab.records import Report, Result

ResultKey = tuple[str, str, str, int, str, str]
KEY_FIELDS = ("workload", "framework", "launcher", "n", "precision", "device")


def key_text(key: ResultKey) -> str:
    workload, framework, launcher, n, precision, device = key
    return f"{workload}/{framework}/{launcher} n={n or 'all'} {precision}" + (f" {device}" if device else "")


def index_results(
    results: Sequence[Result], keyer: Callable[[Result], ResultKey] = Result.key
) -> dict[ResultKey, list[Result]]:
    """Every measurement per key, in report order (a repeated run is a second measurement, not a duplicate)."""
    out: dict[ResultKey, list[Result]] = {}
    for r in results:
        out.setdefault(keyer(r), []).append(r)
    return out


def keys_summary(keys: Sequence[ResultKey], limit: int = 6) -> str:
    if not keys:
        return "no results"
    shown = ", ".join(key_text(k) for k in sorted(keys, key=str)[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def normal_key(r: Result) -> ResultKey:
    """A row's key across different machines: all CPU threads as n=0, a per-GPU row as "each GPU"."""
    workload, framework, launcher, n, precision, device = r.key()
    if r.launcher == Launcher.CPU and n > 1:
        n = 0
    if device.startswith("cuda:"):
        device = "each GPU"
    return (workload, framework, launcher, n, precision, device)


OWN_PRECISION = "own"  # a workload row in the precision its machine trains in
RELATIVE_UNIT = "x one GPU"  # a published figure given only as a ratio to the same run on one GPU
WORKLOAD_UNITS = ("samples/s", "epochs/h", RELATIVE_UNIT)


def relative_rates(
    labels: Sequence[str], indexes: list[dict[ResultKey, list[Result]]]
) -> tuple[list[dict[ResultKey, list[Result]]], list[str]]:
    """Rows of one workload and launcher whose units differ between reports (a study's samples/s against a
    write-up's epochs/h or "x one GPU") compare as what both can give: each report's rate over its own one-GPU
    rate of the same series. Reports lacking the one-GPU row keep their rows (they show as "unit differs")."""

    def group(key: ResultKey) -> tuple[Any, ...]:
        return (key[0], key[1], key[2], key[5])

    units: dict[tuple[Any, ...], set[str]] = {}
    for idx in indexes:
        for key, rs in idx.items():
            if rs[0].unit in WORKLOAD_UNITS:
                units.setdefault(group(key), set()).add(rs[0].unit)
    mixed = {g for g, found in units.items() if len(found) > 1}
    if not mixed:
        return indexes, []
    out, converted = [], set()
    for idx in indexes:
        renamed = dict(idx)
        for g in mixed:
            keys = [k for k in idx if group(k) == g]
            ones = [k for k in keys if k[3] == 1]
            if len(ones) != 1 or len({k[4] for k in keys}) != 1 or idx[ones[0]][0].unit == RELATIVE_UNIT:
                continue
            one = statistics.median(r.value for r in idx[ones[0]])
            if one <= 0:
                continue
            for k in keys:
                renamed[k] = [
                    dataclasses.replace(r, value=r.value / one, unit=RELATIVE_UNIT, telemetry=None) for r in idx[k]
                ]
            converted.add(g)
        out.append(renamed)
    notes = [
        f"{g[0]}/{g[1]}/{g[2]}: units differ between the reports; compared as speedup over each report's own one-GPU "
        f"rate ({RELATIVE_UNIT})"
        for g in sorted(converted, key=str)
    ]
    return out, notes


def own_precision_rows(
    labels: Sequence[str], indexes: list[dict[ResultKey, list[Result]]]
) -> tuple[list[dict[ResultKey, list[Result]]], list[str]]:
    """Across machines, a workload row found in one precision on one machine and another on the next (a P100's
    fp32, an H100's TF32) is the same experiment run each machine's way: such rows meet under precision "own", and
    a note says which precision each side used. Rows a machine has in several precisions stay apart."""

    def bare(key: ResultKey) -> tuple[Any, ...]:
        return (*key[:4], key[5])

    def workload_rows(idx: dict[ResultKey, list[Result]]) -> dict[tuple[Any, ...], list[ResultKey]]:
        out: dict[tuple[Any, ...], list[ResultKey]] = {}
        for key, rs in idx.items():
            if not rs[0].measures_transport() and rs[0].unit in WORKLOAD_UNITS:
                out.setdefault(bare(key), []).append(key)
        return out

    per_report = [workload_rows(idx) for idx in indexes]
    shared = set.intersection(*(set(p) for p in per_report)) if per_report else set()
    merge = {b for b in shared if all(len(p[b]) == 1 for p in per_report) and len({p[b][0][4] for p in per_report}) > 1}
    notes = []
    out = []
    for idx, found in zip(indexes, per_report, strict=True):
        renamed = dict(idx)
        for b in merge:
            (key,) = found[b]
            own: ResultKey = (key[0], key[1], key[2], key[3], OWN_PRECISION, key[5])
            renamed[own] = renamed.pop(key)
        out.append(renamed)
    for b in sorted(merge, key=str):
        used = ", ".join(f"{lab} {p[b][0][4]}" for lab, p in zip(labels, per_report, strict=True))
        notes.append(f"{b[0]}/{b[1]}/{b[2]} compared in each machine's own precision: {used}")
    return out, notes


def median_watts(rs: Sequence[Result]) -> float | None:
    """Median over a row's measurements of the summed mean board power of its GPUs."""
    found = []
    for r in rs:
        gpus = r.telemetry.per_gpu if r.telemetry else []
        powers = [float(g.power_mean_w) for g in gpus if isinstance(g.power_mean_w, int | float)]
        if powers:
            found.append(sum(powers))
    return statistics.median(found) if found else None


def _stage(text: str) -> str:
    """ "cpu:64 fp32" -> "cpu:all fp32": one CPU thread, all threads, or one GPU, whatever the machine."""
    head, _, rest = text.partition(" ")
    kind, _, n = head.partition(":")
    if kind == "cpu" and n not in ("", "1"):
        head = "cpu:all"
    return f"{head} {rest}".strip()


_STAGE_ORDER = {"cpu:1": 0, "cpu:all": 1, "gpu:1": 2}


@dataclass
class SpeedupRow:
    """One speedup (one CPU thread -> all threads -> one GPU) across reports; `found[i]` = (from, to, ratio)."""

    workload: str
    framework: str
    precision: str
    step: str  # "cpu:1 -> cpu:all"
    found: list[tuple[str, str, float] | None]

    def cell(self, i: int) -> str:
        f = self.found[i]
        if f is None:
            return "-"
        return f"{f[2]:,.1f}x ({f[0]} -> {f[1]})" if "cpu:all" in self.step else f"{f[2]:,.1f}x"

    def to_dict(self, labels: Sequence[str]) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "framework": self.framework,
            "precision": self.precision,
            "step": self.step,
            "found": {
                label: {"from": f[0], "to": f[1], "ratio": f[2]} if f else None
                for label, f in zip(labels, self.found, strict=True)
            },
        }


@dataclass
class ScalingRow:
    """1 -> N scaling of one workload/launcher per report: (n, speedup, efficiency) at its largest n."""

    workload: str
    framework: str
    launcher: str
    precision: str
    found: list[tuple[int, float, float] | None]

    def cell(self, i: int) -> str:
        f = self.found[i]
        return "-" if f is None else f"1->{f[0]}: {f[1]:.2f}x ({f[2] * 100:.0f} % efficient)"

    def to_dict(self, labels: Sequence[str]) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "framework": self.framework,
            "launcher": self.launcher,
            "precision": self.precision,
            "found": {
                label: {"n": f[0], "speedup": f[1], "efficiency": f[2]} if f else None
                for label, f in zip(labels, self.found, strict=True)
            },
        }


def speedup_rows(reports: Sequence[Report]) -> list[SpeedupRow]:
    keys: list[tuple[str, str, str, str]] = []
    found: list[dict[tuple[str, str, str, str], tuple[str, str, float]]] = []
    for rep in reports:
        d: dict[tuple[str, str, str, str], tuple[str, str, float]] = {}
        for sp in rep.speedups:
            key = (sp.workload, sp.framework, sp.precision, f"{_stage(sp.from_)} -> {_stage(sp.to)}")
            d.setdefault(key, (sp.from_, sp.to, sp.ratio))
            if key not in keys:
                keys.append(key)
        found.append(d)

    def order(key: tuple[str, str, str, str]) -> tuple[str, int, int, str]:
        a, _, b = key[3].partition(" -> ")
        return (key[0], _STAGE_ORDER.get(b.split()[0], 9), _STAGE_ORDER.get(a.split()[0], 9), key[2])

    return [SpeedupRow(*key, found=[d.get(key) for d in found]) for key in sorted(keys, key=order)]


def scaling_rows(reports: Sequence[Report]) -> list[ScalingRow]:
    keys: list[tuple[str, str, str, str]] = []
    found: list[dict[tuple[str, str, str, str], tuple[int, float, float]]] = []
    for rep in reports:
        d: dict[tuple[str, str, str, str], tuple[int, float, float]] = {}
        for sc in rep.scaling:
            key = (sc.workload, sc.framework, sc.launcher, sc.precision)
            if sc.n > 1 and (key not in d or sc.n > d[key][0]):
                d[key] = (sc.n, sc.speedup, sc.efficiency)
            if sc.n > 1 and key not in keys:
                keys.append(key)
        found.append(d)
    keys.sort(key=lambda k: (k[2] == Launcher.CPU, k))
    return [ScalingRow(*key, found=[d.get(key) for d in found]) for key in keys]
