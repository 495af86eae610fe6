"""A plan's checks: each names what it looked at, its outcome (ok, warn, fail) and, when not ok, the fix."""

from __future__ import annotations

from dataclasses import dataclass

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class PlanCheck:
    name: str
    status: str  # ok | warn | fail
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "message": self.message}
