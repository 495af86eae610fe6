"""How a study session sized its work: runs per GPU (gpulab.studies.packing) and runs per batch
(gpulab.studies.batching). One record for both: what was asked, what was chosen, why, and the probe it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sizing:
    """One sizing decision of a study session, as sessions.json keeps it (`key` names the chosen count there:
    per_gpu for packing, batch_runs for batching)."""

    key: str
    asked: int | str  # "auto" or the number given
    chosen: int
    why: str
    probe: list[dict[str, Any]] = field(default_factory=list)  # what each probe run or batch measured
    probe_runs: int | None = None  # runs done by the probe (they count as the session's own)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"asked": self.asked, self.key: self.chosen, "why": self.why}
        if self.probe:
            out["probe"] = self.probe
        if self.probe_runs is not None:
            out["probe_runs"] = self.probe_runs
        return out

    @classmethod
    def from_json(cls, key: str, data: Any) -> Sizing | None:
        """The record sessions.json holds under a session's `packing` or `batching`; None where it holds none."""
        if not isinstance(data, dict) or not isinstance(data.get(key), int) or isinstance(data.get(key), bool):
            return None
        asked = data.get("asked")
        probe = data.get("probe")
        return cls(
            key,
            asked if isinstance(asked, (int, str)) else "?",
            int(data[key]),
            str(data.get("why") or ""),
            [p for p in probe if isinstance(p, dict)] if isinstance(probe, list) else [],
            int(data["probe_runs"]) if isinstance(data.get("probe_runs"), int) else None,
        )
