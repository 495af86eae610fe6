"""The GPU verdict kept apart from the host's in `gpulab compare`.

A report whose host-load entries say the host was contended (gpulab.report.contention: CPU pressure, steal, a CPU
calibration slower at one end of the run) measured its CPU rows, and the GPU rows the host paces, on a host busy with
other work: those rows of it (and of any report compared against it) that fell below their band are "host contended",
shown with the figures, and not regressions. GPU-bound rows and checks are judged as always: they give the GPU verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpulab.report.compare.keys import ResultKey, key_text
from gpulab.report.formatting import ratio_pct
from gpulab.report.judge import SIDE_NAMES

HOST_CONTENDED = "host contended"  # a row's status when it fell with a contended host
HOST_UNSTEADY = "host unsteady"  # ... with a host whose CPUs' own speed moved within a run (contention.unsteady)
HOST_SIDES = ("host", "host-bound")  # the rows a contended host excuses; "gpu" rows are judged as always


class _Row(Protocol):
    key: ResultKey
    side: str
    ratios: list[float | None]
    status: str
    regressed_in: list[str]
    contended_in: list[str]


def excuse_contended(
    rows: Sequence[_Row], labels: Sequence[str], contention: Sequence[str | None], status: str = HOST_CONTENDED
) -> None:
    """Move the host and host-bound rows' regressions of a report compared on a contended host (its own or the
    baseline's: `contention[i]` is report i's reason, or None) to `contended_in`, the row's status `status` (with
    HOST_UNSTEADY: `contention` says why each host was unsteady)."""
    for row in rows:
        if row.side not in HOST_SIDES:
            continue
        excused = [lab for lab in row.regressed_in if contention[0] or contention[labels.index(lab)]]
        if not excused:
            continue
        row.contended_in = [*row.contended_in, *excused]
        row.regressed_in = [lab for lab in row.regressed_in if lab not in excused]
        if not row.regressed_in:
            row.status = status


def contended_lines(rows: Sequence[_Row], labels: Sequence[str]) -> list[str]:
    """One line per row that fell with a contended host: what, how far, and that it is not a regression."""
    return [
        f"{key_text(row.key)}: {lab} {ratio_pct(row.ratios[labels.index(lab)])} ({SIDE_NAMES[row.side]} row): "
        f"{HOST_UNSTEADY if row.status == HOST_UNSTEADY else HOST_CONTENDED}, not a regression"
        for row in rows
        for lab in row.contended_in
    ]


def gpu_verdict(rows: Sequence[_Row], n_checks: int, baseline: str) -> str:
    """The GPUs' verdict: GPU and host-bound rows below their band (those a contended host excused aside) and checks
    that passed in the baseline and fail now."""
    by_side = {side: sum(len(r.regressed_in) for r in rows if r.side == side) for side in ("gpu", "host-bound")}
    n_rows = sum(by_side.values())
    if not n_rows and not n_checks:
        return f"GPU: no regression against {baseline}"
    parts = []
    if n_rows:
        sides = ", ".join(f"{SIDE_NAMES[side]} {n}" for side, n in by_side.items() if n)
        parts.append(f"{n_rows} result(s) below their noise band ({sides})")
    if n_checks:
        parts.append(f"{n_checks} check(s) passed in the baseline and fail now")
    return f"GPU: REGRESSION: {', '.join(parts)} (baseline {baseline})"


def host_verdict(
    rows: Sequence[_Row],
    labels: Sequence[str],
    names: Sequence[str],
    contention: Sequence[str | None],
    measured: Sequence[bool],
    unsteady: Sequence[str | None] = (),
) -> str:
    """The host's verdict: contended (each contended report's figures, and how far the rows it excused moved), else
    unsteady (the same for hosts whose CPU calibration moved within a run, when that excused a row), else a
    regression of host rows on a steady uncontended host, else quiet (or not measured where a report recorded
    nothing). `names` are the labels as shown; `measured[i]`: report i recorded any contention figure."""
    named = [f"{name}: {why}" for name, why in zip(names, contention, strict=True) if why]
    shaky = [f"{name}: {why}" for name, why in zip(names, unsteady, strict=False) if why]
    if not named and shaky and any(row.status == HOST_UNSTEADY or row.contended_in for row in rows):
        moved = [r for row in rows for lab in row.contended_in if (r := row.ratios[labels.index(lab)]) is not None]
        lo, hi = ratio_pct(min(moved)), ratio_pct(max(moved))
        return (
            f"host: unsteady — {'; '.join(shaky)}; {len(moved)} host and host-bound result(s) moved "
            f"({lo if lo == hi else f'{lo}…{hi}'}), not judged: the CPUs' own speed moved more than the host band"
        )
    if named:
        moved = [r for row in rows for lab in row.contended_in if (r := row.ratios[labels.index(lab)]) is not None]
        text = f"host: contended — {'; '.join(named)}"
        if moved:
            lo, hi = ratio_pct(min(moved)), ratio_pct(max(moved))
            text += f"; {len(moved)} host and host-bound result(s) moved with it ({lo if lo == hi else f'{lo}…{hi}'})"
            text += ", not regressions"
        return text
    n_host = sum(len(r.regressed_in) for r in rows if r.side == "host")
    if n_host:
        return f"host: REGRESSION: {n_host} host result(s) below their noise band on an uncontended host"
    unmeasured = [name for name, m in zip(names, measured, strict=True) if not m]
    return f"host: contention not measured in {', '.join(unmeasured)}" if unmeasured else "host: quiet"
