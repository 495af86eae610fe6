"""How a study session sized its work: runs per GPU (gpulab.studies.packing) and runs per batch
(gpulab.studies.batching). One record for both: what was asked, what was chosen, why, and the probe it came from,
each probe run a typed record (PackingProbe, BatchProbe)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeAlias


def measured(value: Any) -> float | None:
    """A measured figure as JSON or a study database's row holds it: a finite number, else None (not measured, or
    unreadable)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


@dataclass(frozen=True)
class PackingProbe:
    """What one packing probe run measured on its GPU (sessions.json: a session's `packing.probe` entries)."""

    footprint_mib: float | None  # the run's process on the GPU: context, cached blocks, peak tensors
    total_mib: float | None  # the GPU's memory
    busy: float | None  # 0..1: NVML utilisation over the run's timed loop
    run_s: float | None  # the timed loop

    def to_json(self) -> dict[str, float | None]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> PackingProbe | None:
        """The probe a sessions.json entry holds (a figure it lacks or cannot read is None); None for no mapping."""
        if not isinstance(data, dict):
            return None
        return cls(*(measured(data.get(f.name)) for f in fields(cls)))


@dataclass(frozen=True)
class BatchProbe:
    """What one run of a batching probe batch measured (gpulab.studies.batching sizes the batch from them)."""

    finished: bool  # the run ended well; the sizing reads only those
    run_s: float | None  # its timed loop
    batch_memory_mib: float | None  # the batch's peak GPU memory
    batch_runs: float | None  # runs in its batch
    total_mib: float | None  # the GPU's memory
    context_mib: float | None  # the worker's CUDA context

    @property
    def memory(self) -> tuple[float, float] | None:
        """(the batch's peak MiB per run, the MiB its worker's context leaves free) where all four were measured."""
        peak, runs, total, context = self.batch_memory_mib, self.batch_runs, self.total_mib, self.context_mib
        if peak is None or runs is None or total is None or context is None:
            return None
        return peak / max(1.0, runs), total - context

    def to_json(self) -> dict[str, bool | float | None]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> BatchProbe | None:
        if not isinstance(data, dict):
            return None
        return cls(data.get("finished") is True, *(measured(data.get(f.name)) for f in fields(cls)[1:]))


SizingProbe: TypeAlias = PackingProbe | BatchProbe
_PROBES: dict[str, type[PackingProbe] | type[BatchProbe]] = {"per_gpu": PackingProbe, "batch_runs": BatchProbe}


@dataclass(frozen=True)
class Sizing:
    """One sizing decision of a study session, as sessions.json keeps it (`key` names the chosen count there:
    per_gpu for packing, batch_runs for batching)."""

    key: str
    asked: int | str  # "auto" or the number given
    chosen: int
    why: str
    probe: tuple[SizingProbe, ...] = field(default_factory=tuple)  # what each probe run measured
    probe_runs: int | None = None  # runs done by the probe (they count as the session's own)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"asked": self.asked, self.key: self.chosen, "why": self.why}
        if self.probe:
            out["probe"] = [p.to_json() for p in self.probe]
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
        kind = _PROBES.get(key, PackingProbe)
        probes = [kind.from_json(p) for p in probe] if isinstance(probe, list) else []
        return cls(
            key,
            asked if isinstance(asked, (int, str)) else "?",
            int(data[key]),
            str(data.get("why") or ""),
            tuple(p for p in probes if p is not None),
            int(data["probe_runs"]) if isinstance(data.get("probe_runs"), int) else None,
        )
