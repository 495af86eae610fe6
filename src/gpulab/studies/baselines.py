"""Placeholder replaced below."""

from __future__ import annotations

from typing import Any


def compare_line(study: Any, runs: Any) -> str | None:
    return None
