"""The original studies' published figures, shipped as reports (tier `published`, with their provenance).

`gpulab compare STUDY_DIR/report.json baseline:neural-style-2018` puts this machine beside the study's machine;
a study's report says it in one line ("1× Tesla P100-PCIE-16GB (2018): 60 s per run; this machine: 5.37 s, 11×").
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.names import Launcher
from gpulab.records import Report, Result

FOLDER = Path(__file__).parent / "baselines"
PREFIX = "baseline:"


def names() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.json"))


def path(name: str) -> Path:
    """The shipped baseline `name` (with or without the baseline: prefix)."""
    name = name.removeprefix(PREFIX)
    found = FOLDER / f"{name}.json"
    if not found.is_file():
        raise GpulabError(f"no shipped baseline {name!r}; shipped: {', '.join(names())}")
    return found


def resolve(argument: str) -> str:
    """A compare argument: `baseline:NAME` becomes the shipped file's path; anything else is left as it is."""
    return str(path(argument)) if argument.startswith(PREFIX) else argument


def load(name: str) -> Report:
    from gpulab.report.io import load_report

    return load_report(path(name))


def _gpu_row(report: Report, workload: str) -> Result | None:
    rows = [r for r in report.results if r.workload == workload and r.launcher == Launcher.GPU and r.n == 1]
    return rows[0] if rows else None


def _hardware(report: Report) -> str:
    gpus = report.fingerprint.get("gpus") or []
    name = f"1× {gpus[0].get('name')}" if gpus else "the study's GPU"
    year = (report.provenance or {}).get("published", "")
    return f"{name} ({year})" if year and year[:1].isdigit() else name


def compare_line(study: Any, runs: list[Any]) -> str | None:
    """One line: the study's published time per run on its GPU against this study's median on a GPU worker.

    Only for the same work (same iterations and image width as the published run); otherwise it says why not."""
    if not study.baseline:
        return f"no published figures are shipped for this study (shipped baselines: {', '.join(names())})"
    try:
        report = load(study.baseline)
    except GpulabError as err:
        return f"baseline {study.baseline}: {err}"
    scaling = _scaling_line(report, study, runs)
    if scaling:
        return scaling
    row = _gpu_row(report, study.workload)
    if row is None or not row.seconds:
        return f"baseline {study.baseline} has no one-GPU figure for {study.workload}"
    published = row.params or {}
    ours = [r for r in runs if r.status == "ok" and r.timed_s and (r.device or "").startswith("gpu")]
    if not ours:
        return f"{_hardware(report)}: {row.seconds:g} s per run; no run of this study ran on a GPU to compare"
    same = all(
        study.fixed.get(k) == published.get(p) for k, p in (("iterations", "iterations"), ("width", "image_width"))
    )
    if not same:
        return (
            f"{_hardware(report)}: {row.seconds:g} s per run of {published.get('iterations')} iterations at "
            f"{published.get('image_width')} px; this study's runs do other work (variant {study.variant}): no ratio"
        )
    median = statistics.median(r.timed_s for r in ours)
    return (
        f"{_hardware(report)}: {row.seconds:g} s per run; this machine: {median:.2f} s median over {len(ours)} runs "
        f"({ours[0].precision or 'own precision'}), {row.seconds / median:.1f}× faster (baseline {study.baseline})"
    )


def _devices(run: Any) -> int:
    """How many devices a run took: a whole-machine run's `gpulab run` says; a worker's run takes one."""
    return getattr(run, "gpus_used", None) or 1


def _epoch_seconds(run: Any) -> float | None:
    """Median seconds per epoch, the first left out when there are more (it holds the warm-up)."""
    seconds = [e["seconds"] for e in run.epochs if isinstance(e.get("seconds"), (int, float))]
    return statistics.median(seconds[1:] if len(seconds) > 1 else seconds) if seconds else None


def _scaling_line(report: Report, study: Any, runs: list[Any]) -> str | None:
    """For a baseline that publishes 1 and N GPUs: its speedup beside this study's, per epoch, launcher by launcher.

    Frameworks and GPUs differ, so the figures compared are each machine's own ratio of N GPUs to one."""
    gpu_rows = (r for r in report.results if r.workload == study.workload and r.launcher != Launcher.CPU)
    rows = sorted(gpu_rows, key=lambda r: r.n)
    if len(rows) < 2 or rows[0].n != 1 or not rows[0].value:
        return None
    top = rows[-1]
    published = top.value / rows[0].value
    timed = [(r, _devices(r), _epoch_seconds(r)) for r in runs if r.status == "ok" and getattr(r, "epochs", None)]
    ones = [t for _, n, t in timed if n == 1 and t]
    many = [(r, n, t) for r, n, t in timed if n > 1 and t]
    theirs = (
        f"published ({top.framework} {top.launcher}): {published:.2f}× on {top.n} GPUs ({published / top.n:.0%} "
        "per GPU)"
    )
    if not ones or not many:
        return f"{theirs}; this study has no epoch runs on one and on several GPUs to set beside it"
    one = min(ones)
    ours = ", ".join(
        f"{r.values.get('launcher') or 'run'} {one / t:.2f}× on {n} ({one / t / n:.0%})"
        for r, n, t in sorted(many, key=lambda m: (m[1], m[2]))
    )
    return f"{theirs}; this machine, per epoch against {one:.2f} s on one GPU: {ours} (baseline {study.baseline})"
