"""The report's records, as typed dataclasses.

One report per run, `schema: "gpulab.report/5"`; the JSON shape is fixed by `gpulab/report/schema.json`
(validated on write and on load). Every measured number is "higher is better" (throughput, TFLOP/s, GB/s),
so compare can treat all rows alike.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, Literal

from gpulab import __version__
from gpulab.names import (
    COMM_BACKENDS,
    DEFAULT_TIER,
    OLD_PROBE_LAUNCHERS,
    CommBackend,
    Framework,
    Launcher,
    Precision,
    ReportPrecision,
    ReportTier,
    ValidationTier,
)

SCHEMA_ID = "gpulab.report/5"
# Versions this gpulab reads: /1 is /2 without `host_load`; /2 is /3 without spreads (a timed figure's windows and
# interval) and without the "marginal" status; /3 is /4 with a DDP row's backend in params["backend"] instead of
# its `comm_backend`; /4 is /5 with the all-reduce probes' transport (nccl, gloo) as their launcher instead of
# launcher ddp and the transport in `comm_backend`. An older report is read as a /5 one with none of the later
# fields recorded.
BEFORE_COMM_BACKEND: tuple[str, ...] = ("gpulab.report/1", "gpulab.report/2", "gpulab.report/3")
BEFORE_PROBE_DDP: tuple[str, ...] = (*BEFORE_COMM_BACKEND, "gpulab.report/4")
READABLE_SCHEMAS: tuple[str, ...] = (*BEFORE_PROBE_DDP, SCHEMA_ID)
# Rows that measure their transport (the all-reduce probes' bus bandwidth): shown and compared with it
TRANSPORT_WORKLOADS: tuple[str, ...] = ("allreduce",)

# "marginal": the figure's interval still straddled its bound after a re-measure with more windows: neither shown
# below it (fail) nor above it (pass). It never fails the run (exit status 0) but is listed first.
Status = Literal["pass", "fail", "skip", "error", "marginal"]
STATUSES: tuple[str, ...] = ("pass", "fail", "skip", "error", "marginal")


@dataclass
class Spread:
    """A timed figure as its windows (each a rate in `unit`), their median and an interval of the median."""

    windows: list[float]
    median: float
    low: float
    high: float
    confidence: float  # the interval's coverage: 0.9, or what the range of a few windows reaches
    method: str  # "order statistics" | "bootstrap" | "range"
    unit: str = ""


@dataclass
class Threshold:
    """A pass/fail bound with where it came from, so a verdict can be argued with."""

    name: str  # "matmul_bf16.min_pct_of_spec"
    value: float
    unit: str  # "%", "GB/s", "x"
    source: str  # "NVIDIA H200 datasheet (989 TFLOP/s dense bf16)", "gpulab default"
    basis: str | None = None  # how the value was derived: "0.6 x spec", "measured 785 on H200, x0.8"


@dataclass
class Check:
    name: str  # "health.pcie_link[0000:00:06.0]"
    status: Status
    message: str  # the cause and the fix when it is not "pass"
    evidence: dict[str, Any] = field(default_factory=dict)
    threshold: str | None = None  # Threshold.name this check was judged against
    seconds: float | None = None


@dataclass
class GpuTelemetry:
    """One GPU's NVML statistics over a row's timed window (gpulab.telemetry): means and extremes of what was
    sampled, None where nothing was; a report's `telemetry.per_gpu` entry, field for key."""

    index: int
    samples: int = 0  # polls inside the window
    util_mean: float | None = None  # %
    util_max: float | None = None
    mem_mean_mib: float | None = None
    mem_max_mib: float | None = None
    power_mean_w: float | None = None
    power_max_w: float | None = None
    sm_mhz_mean: float | None = None
    sm_mhz_min: float | None = None
    sm_mhz_max: float | None = None
    temp_mean_c: float | None = None
    temp_max_c: float | None = None
    throttle_reasons: list[str] = field(default_factory=list)  # most often seen first
    throttle_counts: dict[str, int] = field(default_factory=dict)  # polls that saw each reason
    # [start, end] in seconds since sampling began (an end None: open); None: the whole run, and the key is not written
    window_s: list[float | None] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _gpu_telemetry_json(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuTelemetry:
        return cls(**data)


def _gpu_telemetry_json(data: dict[str, Any]) -> dict[str, Any]:
    """A GpuTelemetry's `asdict` form as reports hold it: a summary over the whole run has no `window_s`."""
    return {k: v for k, v in data.items() if k != "window_s" or v is not None}


@dataclass
class TelemetrySummary:
    samples: int
    interval_s: float
    per_gpu: list[GpuTelemetry] = field(default_factory=list)  # one per sampled GPU, in index order
    # timeline: {t, index, util, mem_mib, power_w, sm_mhz, temp_c}
    timeline: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TelemetrySummary:
        d = dict(data)
        gpus = [GpuTelemetry.from_dict(g) for g in d.pop("per_gpu", None) or []]
        return cls(**d, per_gpu=gpus)


@dataclass
class Result:
    """One measurement. Key for compare: workload x framework x launcher x n x precision x device."""

    workload: str  # "style_transfer", "resnet50", "matmul", "copy_d2d", "h2d_pinned", "allreduce"
    framework: Framework  # torch, tensorflow, nccl-tests
    launcher: Launcher  # cpu, gpu, ddp (DDP, the all-reduce probes), dataparallel, mirrored, sweep
    n: int  # devices used (GPUs, or CPU threads for launcher "cpu")
    precision: ReportPrecision  # a Precision; names.NO_PRECISION ("none") for copies and transfers
    value: float  # higher is better
    unit: str  # "samples/s", "TFLOP/s", "GB/s", "iterations/s"
    device: str | None = None  # "cuda:0" for a per-device row; None for a row over all `n` devices
    devices: list[str] = field(default_factory=list)
    batch: int | None = None
    seconds: float | None = None
    iterations: int | None = None
    spec_value: float | None = None  # the SKU's datasheet figure in `unit`, when one exists
    pct_of_spec: float | None = None
    params: dict[str, Any] = field(default_factory=dict)  # size, threads, data source, weights...
    telemetry: TelemetrySummary | None = None
    spread: Spread | None = None  # the timed windows (value is their median); None: one window (older reports)
    # a DDP row's process-group backend, an all-reduce probe's transport; None: a row without one
    comm_backend: CommBackend | None = None

    def series(self) -> str:
        """The workload as rows are grouped: epoch training ("mnist (epochs)") apart from timed steps ("mnist"),
        since its throughput includes the data loading and the last short batch of each epoch."""
        return f"{self.workload} (epochs)" if self.params.get("mode") == "epochs" else self.workload

    def measures_transport(self) -> bool:
        """Whether the row's figure is its transport's (an all-reduce probe's bus bandwidth over nccl or gloo)."""
        return self.workload in TRANSPORT_WORKLOADS and self.comm_backend is not None

    def launched(self) -> str:
        """The launcher as reports show it and compare keys it: a row that measures its transport with it
        ("ddp · nccl"), since that is what it measures; every other row's launcher as it is."""
        return f"{self.launcher} · {self.comm_backend}" if self.measures_transport() else str(self.launcher)

    def key(self) -> tuple[str, str, str, int, ReportPrecision, str]:
        return (self.series(), self.framework, self.launched(), self.n, self.precision, self.device or "")


@dataclass
class Speedup:
    workload: str
    framework: Framework
    precision: ReportPrecision
    from_: str  # "cpu:1", "cpu:64", "gpu:1"
    to: str
    ratio: float


@dataclass
class Scaling:
    workload: str
    framework: Framework
    launcher: Launcher
    precision: ReportPrecision
    n: int
    throughput: float
    speedup: float  # throughput(n) / throughput(1)
    efficiency: float  # speedup / n
    expected: float | None = None  # expected efficiency
    expected_source: str | None = None
    spread: Spread | None = None  # the efficiency's interval (both sides' windows), when they were measured so


@dataclass
class Report:
    fingerprint: dict[str, Any]  # gpulab.records.Fingerprint.to_dict()
    tier: ReportTier = DEFAULT_TIER
    checks: list[Check] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    speedups: list[Speedup] = field(default_factory=list)
    scaling: list[Scaling] = field(default_factory=list)
    thresholds: list[Threshold] = field(default_factory=list)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    gpulab_version: str = __version__
    command: str | None = None  # how the run was started
    duration_s: float | None = None
    interrupted: bool = False  # the run was stopped (Ctrl-C) before every test ran
    provenance: dict[str, Any] | None = None  # a published baseline: study, source, hardware, figures
    # How busy the host was while it measured, one entry per run that added results (gpulab.report.hostload)
    host_load: list[dict[str, Any]] = field(default_factory=list)
    schema: str = SCHEMA_ID

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for sp in data["speedups"]:
            sp["from"] = sp.pop("from_")
        for row in data["results"]:
            if row["telemetry"] is not None:
                row["telemetry"]["per_gpu"] = [_gpu_telemetry_json(g) for g in row["telemetry"]["per_gpu"]]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        d = dict(data)
        version = d.get("schema", SCHEMA_ID)
        return cls(
            fingerprint=d["fingerprint"],
            tier=ValidationTier.parse_reported(d.get("tier", DEFAULT_TIER)),
            checks=[Check(**c) for c in d.get("checks", [])],
            results=[result_from_dict(_current_row(r, version)) for r in d.get("results", [])],
            speedups=[speedup_from_dict(s) for s in d.get("speedups", [])],
            scaling=[scaling_from_dict(s) for s in d.get("scaling", [])],
            thresholds=[Threshold(**t) for t in d.get("thresholds", [])],
            created=d["created"],
            gpulab_version=d["gpulab_version"],
            command=d.get("command"),
            duration_s=d.get("duration_s"),
            interrupted=d.get("interrupted", False),
            provenance=d.get("provenance"),
            host_load=list(d.get("host_load") or []),
            schema=SCHEMA_ID,  # an older readable version is upgraded: it only lacks what is optional now
        )

    def add_threshold(self, threshold: Threshold) -> str:
        """Record a threshold once (by name) and return its name for a Check to cite."""
        if all(t.name != threshold.name for t in self.thresholds):
            self.thresholds.append(threshold)
        return threshold.name


def spread_from_dict(data: dict[str, Any] | None) -> Spread | None:
    return Spread(**data) if data else None


def result_from_dict(data: dict[str, Any]) -> Result:
    """A Result from its `asdict` form (a current report row, or a child process's JSON): the edge its precision,
    framework and launcher are read at."""
    d = dict(data)
    d["precision"] = Precision.parse_reported(d["precision"])
    d["framework"] = Framework.parse(d["framework"], "a result's framework")
    d["launcher"] = Launcher.parse(d["launcher"], "a result's launcher")
    tel = d.pop("telemetry", None)
    spread = spread_from_dict(d.pop("spread", None))
    backend = d.pop("comm_backend", None)
    return Result(
        **d,
        telemetry=TelemetrySummary.from_dict(tel) if tel else None,
        spread=spread,
        comm_backend=CommBackend.parse(backend, "comm_backend") if backend is not None else None,
    )


def _current_row(row: dict[str, Any], version: str) -> dict[str, Any]:
    """A result row of a report written as `version`, as the current version writes it."""
    if version in BEFORE_COMM_BACKEND:
        row = _backend_from_params(row)
    if version in BEFORE_PROBE_DDP:
        row = _probe_transport_from_launcher(row)
    return row


def _probe_transport_from_launcher(row: dict[str, Any]) -> dict[str, Any]:
    """An all-reduce probe's row of a report before /5 named its transport (nccl, gloo) as its launcher: read as
    launcher ddp (one process per device in a process group, as DDP) with the transport in its comm_backend, so
    old and new rows show and compare alike ("ddp · nccl")."""
    if row.get("launcher") not in OLD_PROBE_LAUNCHERS:
        return row
    return {**row, "launcher": Launcher.DDP.value, "comm_backend": row["launcher"]}


def _backend_from_params(row: dict[str, Any]) -> dict[str, Any]:
    """A DDP row of a report before /4 kept its process-group backend in params["backend"]: moved to its field, so
    old and new rows read alike (the row's key does not include it)."""
    params = row.get("params")
    if row.get("launcher") != Launcher.DDP or row.get("comm_backend") is not None or not isinstance(params, dict):
        return row
    if params.get("backend") not in COMM_BACKENDS:  # not one gpulab wrote: left where it is
        return row
    rest = {k: v for k, v in params.items() if k != "backend"}
    return {**row, "params": rest, "comm_backend": params["backend"]}


def speedup_from_dict(data: dict[str, Any]) -> Speedup:
    d = {("from_" if k == "from" else k): v for k, v in data.items()}
    d["precision"] = Precision.parse_reported(d["precision"])
    d["framework"] = Framework.parse(d["framework"], "a speedup's framework")
    return Speedup(**d)


def scaling_from_dict(data: dict[str, Any]) -> Scaling:
    d = dict(data)
    d["precision"] = Precision.parse_reported(d["precision"])
    d["framework"] = Framework.parse(d["framework"], "a scaling row's framework")
    d["launcher"] = Launcher.parse(d["launcher"], "a scaling row's launcher")
    interval = spread_from_dict(d.pop("spread", None))
    return Scaling(**d, spread=interval)
