"""Formatters shared by the comparison, the report views and the study reports."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def name_list(names: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def ratio_pct(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{(ratio - 1) * 100:+.1f} %"


def stand_ins_summary(rows: Iterable[tuple[str, Iterable[str]]], noun: str = "run") -> str | None:
    """ "random VGG19 weights (style_transfer, 3 runs); …" over (workload, stand-ins) rows; None when none."""
    counts: dict[str, dict[str, int]] = {}
    for workload, items in rows:
        for item in items:
            counts.setdefault(item, {}).setdefault(workload, 0)
            counts[item][workload] += 1
    if not counts:
        return None
    parts = []
    for item, per in counts.items():
        runs = sum(per.values())
        parts.append(f"{item} ({', '.join(per)}; {runs} {noun}{'s' if runs != 1 else ''})")
    return "; ".join(parts)
