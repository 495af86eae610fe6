"""A study's runs as a gpulab report (`STUDY_DIR/report.json`), so `gpulab compare` puts them beside another
machine's or a study's published figures (`baseline:NAME`).

One result row per device that ran the study's successful runs: its median samples/s (iterations/s for style
transfer) over those runs, the median seconds of a run's own iterations; a whole-machine run is a row of its
launcher and GPU count. The report holds this machine's fingerprint; it is rewritten whole after each session.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpulab import names
from gpulab.records import Report, Result, measured

REPORT_JSON = "report.json"


def _one_batch(members: list[dict[str, Any]]) -> int | None:
    """The runs' batch where they share one (a varied batch is told apart in the runs table, not here)."""
    batches = {int(b) for b in (measured(r.get("batch")) for r in members) if b is not None}
    return batches.pop() if len(batches) == 1 else None


def _group(row: dict[str, Any]) -> tuple[names.Launcher, int, str]:
    """(launcher, n, device) of a run: a GPU worker's runs are gpu×1 on it, a CPU worker's cpu×threads."""
    launcher = row.get("launcher_used")
    if isinstance(launcher, str):
        used = names.Launcher.parse(launcher, "the study database's launcher_used")
        return used, int(measured(row.get("gpus_used")) or 1), ""
    device = str(row.get("device") or "cpu")
    if device.startswith("gpu"):
        return names.Launcher.GPU, 1, device.split()[0]
    return names.Launcher.CPU, int(measured(row.get("threads")) or 1), "cpu"


def study_work(study: Any, members: list[dict[str, Any]]) -> dict[str, Any]:
    """How much work one run did (gpulab.report.judge.WORK_KEYS), so that compare sets it only beside the same
    work (a tiny variant is never set against the published full-size figures): the study's size and, where the
    runs share one value, iterations, image width, epochs and classes."""

    def shared(key: str, fixed: Any) -> Any:
        found = {row.get(key) for row in members if row.get(key) is not None} or (
            {fixed} if fixed is not None else set()
        )
        return found.pop() if len(found) == 1 else None

    work = {
        "size": study.size,
        "iterations": shared("iterations", study.fixed.get("iterations")),
        "image_width": shared("width", study.fixed.get("width")),
        "epochs": (study.epochs or {}).get("epochs"),
        "classes": shared("num_classes", study.fixed.get("num_classes")),
    }
    return {k: v for k, v in work.items() if v is not None}


def study_results(rows: Iterable[dict[str, Any]], study: Any) -> list[Result]:
    groups: dict[tuple[names.Launcher, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("status") == "ok" and measured(row.get("samples_per_s")):
            groups.setdefault(_group(row), []).append(row)
    results = []
    gpu_devices = sorted({d for (_, _, d) in groups if d.startswith("gpu")})
    for (launcher, n, device), members in sorted(groups.items()):
        rates = [measured(r["samples_per_s"]) or 0.0 for r in members]
        timed = [t for t in (measured(r.get("timed_s")) for r in members) if t is not None]
        steps = [s for s in (measured(r.get("steps_run")) for r in members) if s is not None]
        precisions = sorted({str(r.get("precision_used")) for r in members if r.get("precision_used")})
        label = f"cuda:{gpu_devices.index(device)}" if device in gpu_devices else (device or None)
        results.append(
            Result(
                workload=study.workload,
                framework=study.framework,
                launcher=launcher,
                n=n,
                precision=names.Precision.parse(precisions[0]) if len(precisions) == 1 else names.Precision.FP32,
                value=statistics.median(rates),
                unit="samples/s",
                device=label if launcher.one_device else None,
                devices=[label] if label else [],
                batch=_one_batch(members),
                seconds=statistics.median(timed) if timed else None,
                iterations=int(statistics.median(steps)) if steps else None,
                params={
                    "study": study.name,
                    "variant": study.variant,
                    "runs": len(members),
                    "worker_device": device or None,
                    "samples_per_s_min_max": [min(rates), max(rates)],
                    "precisions": precisions,
                    "work": study_work(study, members),
                    "stand_ins": sorted({str(s) for r in members for s in r.get("stand_ins") or []}),
                    **({"mode": "epochs"} if study.epochs else {}),  # an epoch series, apart from timed steps
                },
            )
        )
    return results


def write_study_report(study_dir: Path, study: Any, df: Any, command: str | None) -> Path | None:
    """Write STUDY_DIR/report.json from the database's successful runs (none: no report)."""
    from gpulab.report.append import merge_results, this_host
    from gpulab.report.io import write_report
    from gpulab.studies.task import outcome

    rows = [outcome(r) for _, r in df.iterrows() if r.get("study") == study.name] if len(df) else []
    results = study_results(rows, study)
    if not results:
        return None
    report = Report(fingerprint=this_host(), tier=names.RUN_REPORT_TIER, command=command)
    path = Path(study_dir) / REPORT_JSON
    write_report(merge_results(report, results), path)
    return path
