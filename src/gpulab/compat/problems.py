"""The problems a stack resolution finds, each a line `[component] reason Fix: fix`, in order, without repeats."""

from __future__ import annotations


class Problems(list[str]):
    def add(self, component: str, reason: str, fix: str) -> None:
        line = f"[{component}] {reason} Fix: {fix}"
        if line not in self:
            self.append(line)
