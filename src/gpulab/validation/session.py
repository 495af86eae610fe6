"""State of one validation run: the fingerprint, the options, and what the tests recorded for the report."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulab import compat, names
from gpulab.checks.occupancy import Occupancy
from gpulab.compat import GpuSpec
from gpulab.errors import GpulabError
from gpulab.probes import judge
from gpulab.records import Check, Fingerprint, GpuInfo, Report, Result
from gpulab.report.hostload import LoadWatch

if TYPE_CHECKING:
    from gpulab.workloads.precision_plan import PrecisionPlan


@dataclass
class Options:
    tier: names.ValidationTier = names.DEFAULT_TIER  # read from --tier by the plugin
    gpus: str = "all"  # "all", "0,2" (indices) or "2" (the first two)
    expect_gpus: int | None = None
    report_dir: Path = Path("reports")
    baseline: Path | None = None
    threshold: str = "5%"
    from_xml: Path | None = None  # judge a captured `nvidia-smi -q -x` instead of live NVML
    topo_file: Path | None = None
    # An architecture whose training precisions the rows follow (--precision-plan, read by the plugin)
    precision_plan: names.Architecture | None = None
    record: Path | None = None  # where the run record goes (`--record`); none: no record
    allow_busy: bool = False  # time GPUs that other work occupies (`--allow-busy`)


RECORD_SCHEMA = "gpulab.run-record/1"
STATUSES = ("pass", "fail", "skip", "error", "marginal")


@dataclass(frozen=True)
class RunRecord:
    """What a validation run left behind, for the tool that started it: read this, never pytest's output.

    Written at the end of every run that wrote a report (also an interrupted one). The paths are absolute; `md`
    and `html` are None when the views could not be rendered beside the report (`gpulab report` renders them).
    """

    host: str
    tier: str
    exit_status: int  # pytest's exit status, regressions against --baseline included
    interrupted: bool
    report: Path
    md: Path | None
    html: Path | None
    counts: dict[str, int]  # checks per status: pass, fail, skip, error

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": RECORD_SCHEMA,
            "host": self.host,
            "tier": self.tier,
            "exit_status": self.exit_status,
            "interrupted": self.interrupted,
            "report": {
                "json": str(self.report),
                "md": None if self.md is None else str(self.md),
                "html": None if self.html is None else str(self.html),
            },
            "counts": {status: self.counts.get(status, 0) for status in STATUSES},
        }


def gpus_for_option(gpus: list[GpuInfo], spec: str) -> list[GpuInfo]:
    """Resolve `--gpus`: "all"; a number N, the first N GPUs; or NVML indices with a comma, "0,2" or "3,"."""
    text = spec.strip().lower()
    if text in ("", "all"):
        return list(gpus)
    have = ", ".join(str(g.index) for g in gpus) or "none"
    try:
        if "," not in text:
            count = int(text)
            if not 0 < count <= len(gpus):
                raise GpulabError(
                    f"--gpus {spec}: asked for the first {count} GPUs, this host has {len(gpus)} (indices: {have}); "
                    "give a count from 1 to the number of GPUs, or indices such as '0,2'"
                )
            return list(gpus[:count])
        wanted = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise GpulabError(
            f"--gpus {spec!r}: use 'all', a count such as '2', or indices such as '0,2' or '3,'"
        ) from None
    by_index = {g.index: g for g in gpus}
    missing = [i for i in wanted if i not in by_index]
    if missing or not wanted:
        raise GpulabError(f"--gpus {spec}: no GPU with index {missing or spec} on this host (indices: {have})")
    return [by_index[i] for i in wanted]


@dataclass
class Lab:
    options: Options
    fingerprint: Fingerprint
    gpus: list[GpuInfo]
    started: float = field(default_factory=time.monotonic)
    report: Report = field(init=False)
    load: LoadWatch = field(init=False)  # how busy the host was while it measured
    # per test node id: the Check the test judged (its name, evidence, threshold), filled in by `verdict`
    judged: dict[str, Check] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)  # lines for the terminal summary
    # What else occupied the selected GPUs before the run started its own GPU work (None: not looked at).
    occupancy: Occupancy | None = None
    cuda_visible: str | None = None  # CUDA_VISIBLE_DEVICES as the run found it (None: unset, or a capture)
    # Time the CPU calibration at the start and the end (not in an xdist worker, nor when judging a capture)
    calibrate_cpu: bool = True

    def __post_init__(self) -> None:
        self.report = Report(fingerprint=self.fingerprint.to_dict(), tier=self.options.tier)
        calibrate = self.calibrate_cpu and self.options.from_xml is None
        self.load = LoadWatch(f"validation, tier {self.options.tier}", calibrate_cpu=calibrate)

    def host_contention(self, calibrate_cpu: bool = True) -> str | None:
        """Whether the host has been contended since the run started, mid-run (gpulab.report.contention): why, or
        None. A check can decline to judge host and host-bound rows while it is. `calibrate_cpu` times the CPU
        calibration now (about 0.3 s) to compare with the start's; without it, CPU pressure and steal so far only
        (the run's own CPU rows count in those)."""
        return self.load.contention_so_far(calibrate_cpu)

    @property
    def hostname(self) -> str:
        """The judged host's name; a capture's is not recorded, so it is named by its file, never by this machine."""
        if self.options.from_xml is not None:
            return f"captured: {self.options.from_xml.name}"
        host = self.fingerprint.host
        return (host.hostname if host else None) or socket.gethostname()

    @property
    def source(self) -> str:
        """What reported the GPU facts, for "not reported by ..." messages."""
        from gpulab.checks.health import reporter

        return reporter(self.fingerprint)

    def spec(self, gpu: GpuInfo | None) -> GpuSpec | None:
        if gpu is None:
            return None
        return compat.gpu_by_pci_id(gpu.pci_device_id) or compat.gpu_by_name(gpu.name)

    def gpu_for(self, device: str | None) -> GpuInfo | None:
        """The GpuInfo behind "cuda:K" (K counts the selected GPUs, as CUDA_VISIBLE_DEVICES renumbers them)."""
        if device and device.startswith("cuda"):
            k = int(device.split(":")[1]) if ":" in device else 0
            return self.gpus[k] if k < len(self.gpus) else None
        return self.gpus[0] if self.gpus else None

    @property
    def precision_plan(self) -> PrecisionPlan | None:
        """The precisions the workload rows train in: forced to an architecture, else the first selected GPU's."""
        from gpulab.workloads import precision_plan

        if self.options.precision_plan:
            return precision_plan.for_architecture(self.options.precision_plan)
        gpu = self.gpus[0] if self.gpus else None
        if gpu is None:
            return None
        return precision_plan.for_gpu(self.spec(gpu), gpu.compute_capability, gpu.architecture)

    @property
    def nvlink(self) -> bool:
        selected = {g.index for g in self.gpus}
        topo = self.fingerprint.topology
        return any(
            topo[i][j].startswith("NV")
            for i in selected
            for j in selected
            if i != j and i < len(topo) and j < len(topo[i])
        )

    def expectation_for(self, result: Result) -> judge.Expectation | None:
        """The spec figure and bound `result` is judged against on the GPU it ran on, if any."""
        gpu = self.gpu_for(result.device or (result.devices[0] if result.devices else None))
        return judge.expectation(result, gpu, self.spec(gpu), nvlink=self.nvlink)

    def record_result(self, result: Result) -> judge.Expectation | None:
        """Add a measurement to the report with its spec figure; returns the bound it must meet, if any."""
        exp = self.expectation_for(result)
        if exp is not None:
            result.spec_value = round(exp.spec_value, 3)
            result.pct_of_spec = round(100 * result.value / exp.spec_value, 2)
            self.report.add_threshold(exp.threshold)
        self.report.results.append(result)
        return exp

    def finish(self, interrupted: bool, command: str) -> Report:
        from gpulab.report import scaling
        from gpulab.validation.expectations import scaling_plans

        expected = {
            f"{p.workload}:{p.launcher}": {"efficiency": p.threshold.value, "source": p.threshold.source}
            for p in scaling_plans(self.nvlink, self.precision_plan)
            if p.threshold is not None
        }
        self.report.speedups = scaling.speedups(self.report.results)
        self.report.scaling = scaling.scaling(self.report.results, expected)
        self.report.duration_s = round(time.monotonic() - self.started, 3)
        self.report.interrupted = interrupted
        self.report.command = command
        self.report.host_load = [self.load.finish()]
        return self.report

    def counts(self) -> dict[str, int]:
        """The report's checks per status, every status named (0 when none)."""
        return {status: sum(c.status == status for c in self.report.checks) for status in STATUSES}

    def run_record(self, exit_status: int, report: Path, rendered: tuple[Path, Path] | None) -> RunRecord:
        md, html = (p.absolute() for p in rendered) if rendered else (None, None)
        return RunRecord(
            host=self.hostname,
            tier=self.options.tier,
            exit_status=exit_status,
            interrupted=self.report.interrupted,
            report=report.absolute(),
            md=md,
            html=html,
            counts=self.counts(),
        )


def write_run_record(record: RunRecord, path: Path) -> Path:
    """Write the record atomically: a reader finds the previous record or this whole one, never a part."""
    from gpulab.report.io import atomic_write_text

    return atomic_write_text(path, json.dumps(record.to_dict(), indent=2, ensure_ascii=False) + "\n")
