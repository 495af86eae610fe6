"""Cell formatters shared by the comparison and its renderers."""

from __future__ import annotations

from collections.abc import Sequence


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
