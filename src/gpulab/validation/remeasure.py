"""Measure again when an interval straddles its bound: more windows, merged with the first, judged once more.

A check whose figure's interval lies wholly above (pass) or below (fail) its bound is settled at once. One that
straddles it comes back "marginal" from its judge (a scaling efficiency wholly above 100 %, a measurement fault, is
measured again the same way); the row is then measured again with more windows, the windows of
both measurements are merged into the one row (its median and interval recomputed), and the judge runs again.
Still straddling, the check stays "marginal": its own status, listed first, never a FAIL and never a silent PASS.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gpulab.records import Check, Result
from gpulab.report import spread

AGAIN_FACTOR = 2  # the re-measure runs this many times the first measurement's windows


REMEASURED = "the first interval straddled its bound or lay above 100 % efficiency"


def merge_into(row: Result, again: Result, why: str | None = REMEASURED) -> Result:
    """`again`'s windows added to `row` (the row the report already holds), its figure recomputed in place; `why`
    is recorded as the row's re-measure (None: `again` is more of the same measurement, not a second look)."""
    if row.spread is None or again.spread is None:
        return row
    row.spread = spread.merged(row.spread, again.spread)
    row.value = row.spread.median
    if row.seconds is not None and again.seconds is not None:
        row.seconds += again.seconds
    if row.iterations is not None and again.iterations is not None:
        row.iterations += again.iterations
    if row.spec_value:
        row.pct_of_spec = round(100 * row.value / row.spec_value, 2)
    if why is not None:
        row.params["remeasured"] = {"windows_added": len(again.spread.windows), "why": why}
    return row


def settle(judge: Callable[[], Check], remeasure: Callable[[], object]) -> Check:
    """The judge's check; a "marginal" one, or a scaling figure above 100 % beyond its noise (a measurement fault,
    which a second look often clears), is measured again once (`remeasure`) and judged again."""
    check = judge()
    if check.status != "marginal" and not check.evidence.get("superlinear"):
        return check
    remeasure()
    check = judge()
    check.evidence["remeasured"] = True
    if check.status == "marginal":
        check.message += "; measured again with more windows, still straddling"
    elif check.evidence.get("superlinear"):
        check.message += "; measured again with more windows, still above 100 %"
    return check


class _Contended(Protocol):
    def host_contention(self) -> str | None: ...


def unless_contended(check: Check, lab: _Contended) -> Check:
    """A figure that leans on the host's CPUs (NCCL's proxy threads drive the all-reduce) failing while the host is
    contended is marginal, not a GPU failure: beside 32 busy loops a healthy 2x H200 pair's all-reduce fell from
    263-281 to 101 GB/s. On a quiet host the failure stands."""
    if check.status != "fail":
        return check
    why = lab.host_contention()
    if not why:
        return check
    check.status = "marginal"
    check.evidence["host_contended"] = why
    check.message += f"; but the host is contended ({why}): measure again on a quiet host"
    return check
