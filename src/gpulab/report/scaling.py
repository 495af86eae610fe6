"""Speedup and scaling figures derived from a report's results (pure functions).

Speedups, per workload × framework × precision (same unit):
    cpu:1 → gpu:1     one CPU thread against one GPU
    cpu:T → gpu:1     all T CPU threads (the largest cpu row) against one GPU
    cpu:1 → cpu:T     what the CPU threads themselves bring

Scaling, per workload × framework × launcher × precision, for every n: speedup = throughput(n) / base and
efficiency = speedup / n. The base is the same launcher's n=1 row (DDP on one GPU, as scaling efficiency is
usually quoted: the cost of DDP itself shows in the results, ddp:1 against gpu:1); a multi-GPU launcher (ddp,
dataparallel, sweep, mirrored) without one is measured against the one-GPU row (launcher "gpu", n=1) of the same
workload × framework × precision, and one-thread CPU processes (ddp over gloo, a CPU sweep) against the cpu
launcher's 1-thread row. The cpu launcher scales over threads against its 1-thread row. A row with no base is
left out.

When a report holds several rows for the same key (a run repeated and appended), the median row counts (the lower
of the two middle ones for an even count, so it is always a measured row), as in `gpulab compare`.

`expected` gives the expected efficiency (a fraction, 0.98 = 98 %) per row, looked up by the most specific key
first: "workload:launcher:n", "workload:launcher", "launcher:n", "launcher", "*". A value is a number (source
"expected efficiency") or {"efficiency": 0.98, "source": "NVIDIA DDP ResNet50 figures, 4× H200"}.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpulab.names import Framework, Launcher, Precision, ReportPrecision
from gpulab.records import Result, Scaling, Speedup
from gpulab.report import spread

_Group = tuple[str, Framework, ReportPrecision, str]  # workload, framework, precision, unit


def _on_cpu(result: Result) -> bool:
    return bool(result.devices) and all(d.startswith("cpu") for d in result.devices)


def _median_rows(results: Iterable[Result]) -> dict[tuple[_Group, Launcher, int], Result]:
    """(group, launcher, n) -> the median usable row with that key; a row that measures its transport (an
    all-reduce probe) is neither a speedup's nor a scaling's."""
    repeats: dict[tuple[_Group, Launcher, int], list[Result]] = {}
    for r in results:
        if r.value is None or r.value <= 0 or r.n < 1 or r.measures_transport():
            continue
        repeats.setdefault(((r.series(), r.framework, r.precision, r.unit), r.launcher, r.n), []).append(r)
    return {key: sorted(rows, key=lambda r: r.value or 0.0)[(len(rows) - 1) // 2] for key, rows in repeats.items()}


def speedups(results: Iterable[Result]) -> list[Speedup]:
    """cpu:1 → gpu:1, cpu:T → gpu:1 and cpu:1 → cpu:T for every workload × framework × precision.

    A GPU row is compared with the CPU rows of its own precision when there are some, else with the fp32 CPU rows
    (a CPU's native precision: bf16 autocast on a CPU without bf16 units is slower than fp32 and would flatter the
    GPU); the CPU end is then labelled with its precision ("cpu:1 fp32").
    """
    rows = _median_rows(results)
    groups = sorted({g for g, _, _ in rows})

    def cpu_ends(group: _Group) -> tuple[Result | None, Result | None]:
        ns = [n for g, launcher, n in rows if g == group and launcher == Launcher.CPU and n > 1]
        return rows.get((group, Launcher.CPU, 1)), rows.get((group, Launcher.CPU, max(ns))) if ns else None

    out: list[Speedup] = []
    for group in groups:
        workload, framework, precision, unit = group
        cpu1, cpu_all = cpu_ends(group)
        gpu1 = rows.get((group, Launcher.GPU, 1))
        suffix = ""
        if gpu1 is not None and cpu1 is None and cpu_all is None and precision != Precision.FP32:
            cpu1, cpu_all = cpu_ends((workload, framework, Precision.FP32, unit))
            suffix = " fp32"
        pairs = [(cpu1, gpu1, f"cpu:1{suffix}", "gpu:1")]
        if cpu_all is not None:
            pairs.append((cpu_all, gpu1, f"cpu:{cpu_all.n}{suffix}", "gpu:1"))
            if not suffix:  # the CPU-only pair belongs to the CPU rows' own group
                pairs.append((cpu1, cpu_all, "cpu:1", f"cpu:{cpu_all.n}"))
        for frm, to, frm_label, to_label in pairs:
            if frm is not None and to is not None:
                out.append(Speedup(workload, framework, precision, frm_label, to_label, to.value / frm.value))
    return out


def _expected(
    expected: Mapping[str, Any] | None, workload: str, launcher: Launcher, n: int
) -> tuple[float | None, str | None]:
    if not expected:
        return None, None
    for key in (f"{workload}:{launcher}:{n}", f"{workload}:{launcher}", f"{launcher}:{n}", launcher, "*"):
        if key not in expected:
            continue
        value = expected[key]
        if isinstance(value, Mapping):
            eff = value.get("efficiency")
            return (float(eff) if eff is not None else None), value.get("source") or "expected efficiency"
        return float(value), "expected efficiency"
    return None, None


def scaling(results: Iterable[Result], expected: Mapping[str, Any] | None = None) -> list[Scaling]:
    """Throughput, speedup and efficiency of every cpu/ddp/dataparallel/sweep/mirrored row against its base."""
    rows = _median_rows(results)
    out: list[Scaling] = []
    for (group, launcher, n), row in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        if not (launcher == Launcher.CPU or launcher.multi_gpu):  # a one-GPU row is only ever a base
            continue
        own = rows.get((group, launcher, 1))
        base = own if own is not None and _on_cpu(own) == _on_cpu(row) else None
        if base is None and launcher.multi_gpu:
            if not _on_cpu(row):
                base = rows.get((group, Launcher.GPU, 1))
            elif row.params.get("threads") == 1:
                base = rows.get((group, Launcher.CPU, 1))  # N one-thread CPU processes against one thread
        if base is None:
            continue
        workload, framework, precision, _unit = group
        speedup = row.value / base.value
        eff, source = _expected(expected, workload, launcher, n)
        interval = None
        if row.spread is not None and base.spread is not None:
            interval = spread.of_ratio(row.spread.windows, base.spread.windows, 1 / n, "fraction")
        out.append(
            Scaling(
                workload=workload,
                framework=framework,
                launcher=launcher,
                precision=precision,
                n=n,
                throughput=row.value,
                speedup=speedup,
                efficiency=speedup / n,
                expected=eff,
                expected_source=source,
                spread=interval,
            )
        )
    return out
