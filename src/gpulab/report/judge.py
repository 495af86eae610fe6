"""How `gpulab compare` judges one row: what sets its pace (the GPU or the host), how closely related the compared
machines are, which work each side did, and the noise band a drop must leave before it counts as a regression.

- Relation: the same GPUs (same UUIDs: a regression check), other units of the same model (a consistency check: the
  band widens by the unit-to-unit spread) or other models (a comparison, no verdict).
- Side: CPU rows measure the host; a GPU row whose GPU was mostly idle (mean utilisation below 80 % in the
  baseline's telemetry: a small model fed by Python and the data loader) is host-bound; the rest are GPU rows.
- Band: the larger of the threshold and the spread the baseline measured over its own repeats. Host and host-bound
  rows on a host whose load was not recorded, or was busy or stolen from, or that is a VM (steal and load average
  do not show the neighbours' use of its caches, memory bandwidth and clocks), also get HOST_NOISE_PCT.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from gpulab.names import Launcher
from gpulab.records import Report, Result, Spread
from gpulab.report import spread

GPU_BOUND_UTIL_PCT = 80.0  # below this mean GPU utilisation the host, not the GPU, sets a row's pace
# Timings of CPU work on a shared host move by 25-40 % with the neighbours' load (measured on the CI machines).
HOST_NOISE_PCT = 30.0
UNIT_SPREAD_PCT = 5.0  # units of one GPU model differ by a few % (clock and power binning): a consistency margin
STEAL_QUIET_PCT = 2.0  # CPU steal above this: the hypervisor gave the host's CPUs to others while it measured
LOAD_QUIET_PER_CPU = 0.5  # load average per CPU before the run above this: others were already busy

SIDE_NAMES = {"gpu": "GPU", "host-bound": "host-bound GPU", "host": "host"}
SAME_MACHINE, SAME_MODEL, SAME_KIND, OTHER_MODELS = "same machine", "same model", "same kind", "other models"
RELATION_TEXT = {
    SAME_MACHINE: "the same GPUs (same UUIDs): a regression check",
    SAME_MODEL: "other units of the same GPU model: a consistency check against the unit-to-unit spread",
    SAME_KIND: "the same GPU model, units not recorded: a regression check",
    OTHER_MODELS: "other GPU models: a comparison, no verdict",
}
# Parameters that fix how much work one measurement is: rows that differ in them are not the same experiment.
WORK_KEYS = ("size", "iterations", "image_width", "epochs", "classes")


def side(results: Sequence[Result]) -> str:
    """What sets a row's pace, from its measurements (the baseline's first): "host", "host-bound" or "gpu"."""
    first = results[0]
    if first.launcher == Launcher.CPU or first.device == "cpu":
        return "host"
    utils = [
        float(g.util_mean)
        for r in results
        for g in (r.telemetry.per_gpu if r.telemetry else [])
        if isinstance(g.util_mean, int | float)
    ]
    if utils and statistics.median(utils) < GPU_BOUND_UTIL_PCT:
        return "host-bound"
    return "gpu"


def _uuids(fp: dict[str, Any]) -> frozenset[str]:
    return frozenset(str(g["uuid"]) for g in fp.get("gpus") or [] if str(g.get("uuid") or "").startswith("GPU-"))


def relation(reports: Sequence[Report], mode: str) -> str:
    """How the reports' machines relate (see RELATION_TEXT); `mode` "different" is always OTHER_MODELS."""
    if mode != "same":
        return OTHER_MODELS
    ids = [_uuids(rep.fingerprint) for rep in reports]
    if not all(ids):
        return SAME_KIND
    return SAME_MACHINE if len(set(ids)) == 1 else SAME_MODEL


def quiet_host(report: Report) -> tuple[bool | None, str]:
    """(quiet?, why) from the host load a report recorded: None when it recorded none."""
    loads = report.host_load or []
    if not loads:
        return None, "host load not recorded"
    for load in loads:
        steal = load.get("steal_pct")
        if isinstance(steal, int | float) and steal > STEAL_QUIET_PCT:
            return False, f"CPU steal {steal:.0f} %"
        avg, cpus = load.get("loadavg_start") or [], load.get("cpus")
        if avg and cpus and avg[0] / cpus > LOAD_QUIET_PER_CPU:
            return False, f"load average {avg[0]:.1f} on {cpus} CPUs before the run"
    hypervisor = (report.fingerprint.get("host") or {}).get("hypervisor")
    if hypervisor:  # measured: a quiet KVM guest's CPU rows moved -18…+13 % two minutes apart, steal 0.02 %
        return False, f"a {hypervisor} guest: its neighbours share the CPUs' caches, memory and clocks unseen"
    return True, "host quiet"


def repeat_noise_pct(results: Sequence[Result]) -> float | None:
    """The spread (max - min) / median in % the baseline measured for a row: over its repeated measurements of
    the row, and within a measurement (`repeat_spread_pct`, a probe's timed batches); None when never repeated."""
    found = [float(s) for r in results if isinstance(s := r.params.get("repeat_spread_pct"), int | float)]
    values = [r.value for r in results]
    if len(values) > 1 and statistics.median(values):
        found.append((max(values) - min(values)) / abs(statistics.median(values)) * 100)
    return max(found) if found else None


def band(
    threshold_pct: float, row_side: str, rel: str, noise_pct: float | None, quiet: Sequence[tuple[bool | None, str]]
) -> tuple[float, str]:
    """(band in %, why): how far below the baseline a row may fall before it is a regression; `quiet` is each
    report's quiet_host()."""
    pct, why = threshold_pct, f"threshold {threshold_pct:g} %"
    if noise_pct is not None and noise_pct > pct:
        pct, why = noise_pct, f"baseline's repeats {noise_pct:.1f} % apart"
    busy = sorted({why for q, why in quiet if q is not True})
    if row_side != "gpu" and busy and pct < HOST_NOISE_PCT:
        pct, why = HOST_NOISE_PCT, f"shared-host noise {HOST_NOISE_PCT:g} % ({'; '.join(busy)})"
    if rel == SAME_MODEL:
        pct, why = pct + UNIT_SPREAD_PCT, f"{why} + unit-to-unit spread {UNIT_SPREAD_PCT:g} %"
    return pct, why


def windows(results: Sequence[Result]) -> list[float]:
    """Every timed window of a report's measurements of a row (a measurement without windows: its value)."""
    return [w for r in results for w in spread.windows_of(r)]


def kept_windows(results: Sequence[Result]) -> bool:
    """Whether every measurement of a row kept its timed windows."""
    return bool(results) and all(r.spread is not None for r in results)


def interval(results: Sequence[Result]) -> Spread | None:
    """The interval of a report's median for a row, when its measurements kept their windows."""
    if not kept_windows(results):
        return None
    return spread.of_windows(windows(results), results[0].unit)  # windows_of: scaled to each row's value


def ratio_interval(base: Sequence[Result], other: Sequence[Result]) -> Spread | None:
    """The interval of other / base from both sides' windows; None unless both kept windows."""
    if not (kept_windows(base) and kept_windows(other)):
        return None
    return spread.of_ratio(windows(other), windows(base))


def regressed(ratio: float, between: Spread | None, limit: float) -> bool:
    """A drop is a regression when the ratio's interval lies below the limit (1 - band): a median below it whose
    interval reaches it is noise. Rows measured without windows are judged on the ratio of medians."""
    return (between.high if between is not None else ratio) < limit


NOT_JUDGED = "other hosts: compared, not judged"


def judged(row_side: str, rel: str) -> bool:
    """Whether a row can regress: a host row of other units of a GPU model measured other machines' CPUs (a shared
    VM's neighbours move them by tens of %), so it says nothing about this machine and is shown, not judged."""
    return not (row_side == "host" and rel == SAME_MODEL)


def work_of(result: Result) -> dict[str, Any]:
    """The work parameters a row records (WORK_KEYS), from its params or their `work` mapping."""
    params = result.params or {}
    work = {**params, **(params.get("work") or {})}
    return {k: work[k] for k in WORK_KEYS if work.get(k) is not None}


def work_difference(base: Sequence[Result], other: Sequence[Result], published: tuple[bool, bool]) -> str:
    """Why two rows did different work ("" when they did the same, as far as both record it). A published
    figure's work (`published`: base, other) that the other row does not record is unknown, never assumed equal."""
    a, b = work_of(base[0]), work_of(other[0])
    diffs = [f"{k} {a[k]} → {b[k]}" for k in WORK_KEYS if k in a and k in b and a[k] != b[k]]
    if diffs:
        return "other work: " + ", ".join(diffs)
    for pub, mine, theirs in ((published[0], a, b), (published[1], b, a)):
        unknown = [k for k in ("iterations", "image_width", "epochs") if k in mine and k not in theirs]
        if pub and unknown:
            shown = ", ".join(f"{k} {mine[k]}" for k in unknown)
            return f"work not recorded (the published run: {shown})"
    return ""
