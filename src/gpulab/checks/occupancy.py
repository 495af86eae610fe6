"""Which GPUs a validation run may time: the ones it selected, and whether other work already occupies them.

A GPU that another process keeps busy makes every timing measure the contention, and the failures that follow
point at clocks, cooling or links. `look` reads each selected GPU once, before the run starts any GPU work:

- the compute, MPS and graphics processes NVML lists on it (pid, name, memory), the run's own process tree apart;
- the memory in use, and the part that no listed process explains: memory held by something this machine cannot
  see (a process in another container or PID namespace, a VM, a capture's host that listed none);
- its utilisation, sampled a few times over about half a second.

The same look is taken from a captured `nvidia-smi -q -x` (`<processes>`, `<fb_memory_usage>`, `<utilization>`),
where every listed process is foreign: the capture was not taken by this run.

Busy means any of (thresholds with their basis):

- a foreign compute or MPS process: it holds a context and can launch kernels at any time, whatever it holds now;
- a foreign graphics-only process holding more than the memory limit (a display server holds tens of MiB);
- memory not explained by listed processes above MEMORY_FLOOR_MIB, or MEMORY_SHARE of the board on large boards:
  an idle GPU with no process uses 0 MiB once the driver's reservation is counted apart (NVML's memory v2,
  nvidia-smi since R510), and at most that reservation where it is folded into `used` (616 MiB of 141 GiB on the
  captured H200, 0.43 %); a CUDA context costs 300-600 MiB, but a process holding one is listed;
- utilisation above UTILISATION_PCT (mean of the samples): NVML's figure is the share of the last sample period
  in which a kernel ran, 0 on an idle GPU; display refresh and monitoring agents read a few percent at most.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.hw import cuda_visible, nvml
from gpulab.hw.gpu_census import MEMORY_FLOOR_MIB, MEMORY_SHARE, UNKNOWN, smi_number, smi_text
from gpulab.hw.smi.xml import process_type
from gpulab.records import Check, GpuInfo

CHECK_FREE = "occupancy.gpus_free"
CHECK_SELECTED = "gpus.selected"
UTILISATION_PCT = 10.0
SAMPLES = 4
INTERVAL_S = 0.15  # 4 samples: 0.45 s, within NVML's 1/6 s to 1 s utilisation period
FIX = "stop that work, select other GPUs with --gpus, or pass --allow-busy to measure anyway"
_KINDS = {"C": ("compute",), "G": ("graphics",), "C+G": ("compute", "graphics"), "M": ("mps",), "M+C": ("mps",)}
_TIMED = ("compute", "mps")


@dataclass(frozen=True)
class Process:
    pid: int
    name: str
    used_mib: int | None  # None: not reported
    kinds: tuple[str, ...]  # "compute", "graphics", "mps"
    ours: bool = False  # this run's process or one of its children


@dataclass
class GpuLook:
    index: int
    name: str
    uuid: str
    total_mib: int | None = None
    used_mib: int | None = None
    processes: list[Process] = field(default_factory=list)
    processes_listed: bool = True  # False: the source gave no process list, so every byte in use is unexplained
    utilisation_pct: list[float] = field(default_factory=list)
    problem: str | None = None  # why this GPU could not be read

    @property
    def foreign(self) -> list[Process]:
        return [p for p in self.processes if not p.ours]

    @property
    def memory_limit_mib(self) -> float:
        return max(MEMORY_FLOOR_MIB, MEMORY_SHARE * self.total_mib) if self.total_mib else MEMORY_FLOOR_MIB

    @property
    def unexplained_mib(self) -> int | None:
        """Memory in use that no listed process accounts for; None when that cannot be told."""
        if self.used_mib is None or any(p.used_mib is None for p in self.processes):
            return None
        return max(0, self.used_mib - sum(p.used_mib or 0 for p in self.processes))

    @property
    def utilisation_mean(self) -> float | None:
        return sum(self.utilisation_pct) / len(self.utilisation_pct) if self.utilisation_pct else None

    def busy_reasons(self) -> list[str]:
        """Why this GPU is occupied, each in a few words; empty when it is free (or could not be read)."""
        reasons = []
        limit = self.memory_limit_mib
        for proc in self.foreign:
            if any(k in _TIMED for k in proc.kinds) or (proc.used_mib or 0) > limit:
                held = f"holds {mib(proc.used_mib)}" if proc.used_mib is not None else "memory not reported"
                reasons.append(f"pid {proc.pid} {proc.name} {held}")
        hidden = self.unexplained_mib
        if hidden is not None and hidden > limit:
            unseen = "no listed process" if self.processes_listed else "no process list given"
            reasons.append(f"{mib(hidden)} of {mib(self.total_mib)} held by something not visible ({unseen})")
        util = self.utilisation_mean
        if util is not None and util > UTILISATION_PCT:
            reasons.append(f"{round(util, 1):g} % utilised")
        return reasons

    @property
    def busy(self) -> bool:
        return bool(self.busy_reasons())

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "total_mib": self.total_mib,
            "used_mib": self.used_mib,
            "unexplained_mib": self.unexplained_mib,
            "utilisation_pct": self.utilisation_pct,
            "processes": [
                {"pid": p.pid, "name": p.name, "used_mib": p.used_mib, "kinds": list(p.kinds), "ours": p.ours}
                for p in self.processes
            ],
            "processes_listed": self.processes_listed,
            "busy": self.busy_reasons(),
            "problem": self.problem,
        }


@dataclass
class Occupancy:
    source: str  # "NVML" or "the capture FILE"
    gpus: list[GpuLook] = field(default_factory=list)
    problem: str | None = None  # why nothing could be read

    def for_gpu(self, gpu: GpuInfo) -> GpuLook | None:
        return next((g for g in self.gpus if g.uuid == gpu.uuid and g.index == gpu.index), None)

    @property
    def busy(self) -> list[GpuLook]:
        return [g for g in self.gpus if g.busy]


def mib(value: float | None) -> str:
    if value is None:
        return "an unreported amount"
    return f"{value / 1024:.1f} GiB" if value >= 1024 else f"{value:.0f} MiB"


def label(look: GpuLook) -> str:
    return f"GPU {look.index} ({look.name})"


def busy_line(looks: Sequence[GpuLook], consequence: str) -> str:
    """One skip line for a test that needs these GPUs idle: "GPU 0 is busy (...): <consequence>"."""
    states = "; ".join(f"GPU {g.index} is busy ({', '.join(g.busy_reasons())})" for g in looks)
    return f"{states}: {consequence}"


def own_pids(root: int | None = None, proc: Path = Path("/proc")) -> set[int]:
    """`root` (this process by default) and every process below it: the run's own work never counts as foreign."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    try:
        entries = list(proc.iterdir())
    except OSError:
        return {root}
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile, or hidden
        # The name in parentheses may hold spaces and parentheses: the fields after the last ")" are fixed.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    ours, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in ours:
                ours.add(child)
                todo.append(child)
    return ours


def process_name(pid: int, nvml_name: str | None, proc: Path = Path("/proc")) -> str:
    """The short name /proc gives, else NVML's (its executable's base name); a pid outside our view says so."""
    try:
        comm = (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        comm = ""
    if comm:
        return comm
    if nvml_name:
        return Path(nvml_name).name or nvml_name
    return "(not visible here)"


def look(
    gpus: Sequence[GpuInfo],
    source: Path | None = None,
    *,
    nv: Any | None = None,
    ours: Iterable[int] | None = None,
    samples: int = SAMPLES,
    interval_s: float = INTERVAL_S,
    proc: Path = Path("/proc"),
    sleep: Callable[[float], None] | None = None,
) -> Occupancy:
    """What occupies each of `gpus`: from a capture file when `source` is given, else live through NVML (`nv`)."""
    if source is not None:
        return from_capture(gpus, source)
    occupancy = Occupancy(source="NVML")
    if not gpus:
        return occupancy
    mine = set(own_pids(proc=proc) if ours is None else ours)
    try:
        uses = nvml.device_use([g.index for g in gpus], nv, samples=samples, interval_s=interval_s, sleep=sleep)
    except GpulabError as err:
        occupancy.problem = str(err)
        return occupancy
    for gpu, use in zip(gpus, uses, strict=True):
        occupancy.gpus.append(
            GpuLook(
                index=gpu.index,
                name=gpu.name,
                uuid=gpu.uuid,
                total_mib=use.total_mib,
                used_mib=use.used_mib,
                processes=[
                    Process(p.pid, process_name(p.pid, p.name, proc), p.used_mib, p.kinds, p.pid in mine)
                    for p in use.processes
                ],
                processes_listed=use.processes_listed,
                utilisation_pct=[float(u) for u in use.utilisation_pct],
                problem=use.problem,
            )
        )
    return occupancy


def _int(node: ET.Element | None, path: str) -> int | None:
    value = smi_number(node, path)
    return int(value) if value is not None else None


def _captured(node: ET.Element, gpu: GpuInfo) -> GpuLook:
    # Pre-2013 drivers: <memory_usage> and <compute_processes> (see gpulab.hw.smi.xml).
    memory = "fb_memory_usage" if node.find("fb_memory_usage") is not None else "memory_usage"
    used = _int(node, f"{memory}/used")
    util = smi_number(node, "utilization/gpu_util")
    listing = node.find("processes")
    if listing is None:
        listing = node.find("compute_processes")
    # Drivers that cannot list processes write <processes>N/A</processes>; an empty element lists none.
    listed = listing is not None and (len(listing) > 0 or (listing.text or "").strip() not in UNKNOWN - {""})
    processes = []
    for info in listing.findall("process_info") if listing is not None else []:
        pid = _int(info, "pid")
        if pid is None:
            continue
        name = smi_text(info, "process_name")
        kinds = _KINDS.get(process_type(node, info), ("compute",))
        processes.append(Process(pid, Path(name).name if name else "(unnamed)", _int(info, "used_memory"), kinds))
    return GpuLook(
        index=gpu.index,
        name=gpu.name,
        uuid=gpu.uuid,
        total_mib=_int(node, f"{memory}/total"),
        used_mib=used,
        processes=processes,
        processes_listed=listed,
        utilisation_pct=[util] if util is not None else [],
    )


def from_capture(gpus: Sequence[GpuInfo], path: Path) -> Occupancy:
    """The look a `nvidia-smi -q -x` capture holds for `gpus` (its GPUs, numbered in the capture's order)."""
    from gpulab.paths import CAPTURE_LIMIT, read_input_bytes

    occupancy = Occupancy(source=f"the capture {path}")
    if not gpus:
        return occupancy
    try:
        raw = read_input_bytes(path, "nvidia-smi XML", limit=CAPTURE_LIMIT)
        nodes = ET.fromstring(raw.decode("utf-8", errors="replace")).findall("gpu")
    except (GpulabError, ET.ParseError) as err:
        occupancy.problem = f"{path}: {err}"
        return occupancy
    for gpu in gpus:
        node = nodes[gpu.index] if gpu.index < len(nodes) else None
        if node is None or (smi_text(node, "uuid") or gpu.uuid) != gpu.uuid:
            occupancy.gpus.append(
                GpuLook(gpu.index, gpu.name, gpu.uuid, problem=f"GPU {gpu.index} not found in {path}")
            )
            continue
        occupancy.gpus.append(_captured(node, gpu))
    return occupancy


def _thresholds() -> dict[str, Any]:
    return {
        "memory_mib": f"max({MEMORY_FLOOR_MIB}, {MEMORY_SHARE:.0%} of total) not held by listed processes",
        "utilisation_pct": UTILISATION_PCT,
        "foreign_compute_process": "any",
    }


def gpus_free(occupancy: Occupancy | None, selected: Sequence[GpuInfo], allow_busy: bool = False) -> Check:
    """The `occupancy.gpus_free` check: every selected GPU free of other work before the run starts its own."""
    if not selected:
        return Check(CHECK_FREE, "skip", "no GPU selected: nothing to look at")
    if occupancy is None or occupancy.problem:
        why = occupancy.problem if occupancy else "not read when the run started"
        return Check(CHECK_FREE, "skip", f"could not see what else runs on the GPUs: {why}")
    looks = [occupancy.for_gpu(g) for g in selected]
    evidence: dict[str, Any] = {
        "source": occupancy.source,
        "gpus": [g.to_dict() for g in looks if g is not None],
        "thresholds": _thresholds(),
    }
    unread = [
        f"GPU {g.index}: {look.problem if look else 'not read when the run started'}"
        for g, look in zip(selected, looks, strict=True)
        if look is None or look.problem
    ]
    from gpulab.checks.health.modes import vgpu_host

    # On a vGPU hypervisor the processes on a GPU are the VMs it serves: the host's purpose, not foreign work.
    hosts = {g.index for g in selected if vgpu_host(g)}
    served = [look for look in looks if look is not None and look.index in hosts and look.processes]
    if served:
        evidence["vgpu_host"] = sorted(hosts)
    busy = [look for look in looks if look is not None and look.busy and look.index not in hosts]
    if hosts and len(hosts) == len(selected):
        vms = sum(len(look.processes) for look in served)
        return Check(
            CHECK_FREE,
            "skip",
            f"{_indices(selected)}: vGPU host GPUs serving {vms} VM process{'es' if vms != 1 else ''} (the host's "
            "purpose, not foreign work); whole-GPU timing on them would measure the VMs, so it is not done",
            evidence,
        )
    if busy and allow_busy:
        evidence["allowed_busy"] = True
        return Check(
            CHECK_FREE,
            "skip",
            "not enforced (--allow-busy): " + busy_line(busy, "timings in this report include the contention"),
            evidence,
        )
    if busy:
        detail = "; ".join(f"{label(g)} is in use by other work: {', '.join(g.busy_reasons())}" for g in busy)
        hidden = any(g.unexplained_mib is not None and g.unexplained_mib > g.memory_limit_mib for g in busy)
        unseen = (
            " Memory no listed process explains belongs to work this view cannot see: a process in another "
            "container or PID namespace, or a VM sharing the GPU."
            if hidden
            else ""
        )
        return Check(
            CHECK_FREE,
            "fail",
            f"{detail} (read from {occupancy.source}).{unseen} Timing tests are skipped, as they would measure "
            f"the contention: {FIX}",
            evidence,
        )
    if unread:
        return Check(CHECK_FREE, "skip", "could not see what else runs on " + "; ".join(unread), evidence)
    return Check(CHECK_FREE, "pass", f"{_indices(selected)}: no other process, memory or utilisation in use", evidence)


def _indices(gpus: Iterable[GpuInfo]) -> str:
    """ "GPU 1" or "GPUs 0, 2"."""
    indices = [str(g.index) for g in gpus]
    return f"GPU{'s' if len(indices) != 1 else ''} {', '.join(indices) or 'none'}"


def gpus_selected(
    seen: Sequence[GpuInfo],
    selected: Sequence[GpuInfo],
    *,
    env_value: str | None,
    spec: str,
    expect: int | None,
    source: str = "NVML",
) -> Check:
    """The `gpus.selected` check: GPUs the driver shows, but the environment or --gpus leaves out of the run."""
    evidence: dict[str, Any] = {
        "seen": [g.index for g in seen],
        "selected": [g.index for g in selected],
        "cuda_visible_devices": env_value,
        "gpus_option": spec,
        "expect_gpus": expect,
    }
    if not seen:
        return Check(CHECK_SELECTED, "skip", f"{source} shows no GPU: nothing to select", evidence)
    # By uuid: the GPU records may come from two reads of NVML, whose clocks and temperatures differ.
    visible = {g.uuid for g in cuda_visible.visible_to_cuda(list(seen), env_value)}
    chosen = {g.uuid for g in selected}
    hidden_by_env = [g for g in seen if g.uuid not in visible]
    left_out = [g for g in seen if g.uuid in visible and g.uuid not in chosen]
    causes = []
    if hidden_by_env:
        causes.append(f"CUDA_VISIBLE_DEVICES={env_value!r} hides {_indices(hidden_by_env)}")
    if left_out:
        causes.append(f"--gpus {spec} leaves out {_indices(left_out)}")
    shows = f"{source} shows {_indices(seen)}"
    fixes = []
    if hidden_by_env:
        fixes.append("unset CUDA_VISIBLE_DEVICES (or list every GPU to test in it)")
    if left_out:
        fixes.append("select them with --gpus all")
    fix = " or ".join(fixes)
    if not selected:
        return Check(
            CHECK_SELECTED,
            "fail",
            f"{shows} but none is tested: {'; '.join(causes)}; a run that tests no GPU proves nothing: {fix}",
            evidence,
        )
    # Fewer GPUs on the host than expected is health.gpu_count's finding; this one is about those left out.
    if expect is not None and len(selected) < expect <= len(seen):
        return Check(
            CHECK_SELECTED,
            "fail",
            f"{shows} but only {len(selected)} of the --expect-gpus {expect} are tested: {'; '.join(causes)}: {fix}",
            evidence,
        )
    if causes:
        return Check(
            CHECK_SELECTED,
            "pass",
            f"testing {_indices(selected)} of the {len(seen)} {source} shows: {'; '.join(causes)}",
            evidence,
        )
    every = "the GPU" if len(seen) == 1 else f"all {len(seen)} GPUs"
    return Check(CHECK_SELECTED, "pass", f"testing {every} {source} shows", evidence)
