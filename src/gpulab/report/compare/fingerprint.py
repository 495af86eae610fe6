"""Differences between two reports' fingerprints (driver, CUDA, frameworks, CPU, PCIe links, GPU settings,
environment) that can explain a performance change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpulab.records import Report


def _fp(value: Report | dict[str, Any]) -> dict[str, Any]:
    return value.fingerprint if isinstance(value, Report) else value


def _show(value: Any) -> str:
    if value is None or value == "":
        return "unknown"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _link(pcie: dict[str, Any] | None, which: str) -> str:
    pcie = pcie or {}
    gen, width = pcie.get(f"gen_{which}"), pcie.get(f"width_{which}")
    if gen is None and width is None:
        return "unknown"
    return f"gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def cpu_kind(fp: dict[str, Any]) -> tuple[str, int]:
    cpu = (fp.get("host") or {}).get("cpu") or {}
    return str(cpu.get("model")), int(cpu.get("threads") or 0)


def _platform(fp: dict[str, Any]) -> str:
    hyp = (fp.get("host") or {}).get("hypervisor")
    return f"VM ({hyp})" if hyp else "bare metal"


def _frameworks(fp: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(f.get("name")): f for f in (fp.get("software") or {}).get("frameworks") or []}


def gpu_models(fp: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for g in fp.get("gpus") or []:
        counts[str(g.get("name"))] = counts.get(str(g.get("name")), 0) + 1
    return ", ".join(f"{n}x {name}" for name, n in sorted(counts.items())) or "no GPU"


def _gpus_by_index(fp: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(g.get("index", i)): g for i, g in enumerate(fp.get("gpus") or [])}


def _gpu_flag_note(what: str, a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]], key: str) -> str | None:
    changed = [i for i in sorted(a.keys() & b.keys()) if a[i].get(key) != b[i].get(key)]
    if not changed:
        return None
    before = {_show(a[i].get(key)) for i in changed}
    after = {_show(b[i].get(key)) for i in changed}
    gpus = ", ".join(str(i) for i in changed)
    return f"{what} on GPU {gpus}: {'/'.join(sorted(before))} → {'/'.join(sorted(after))}"


def fingerprint_notes(a: Report | dict[str, Any], b: Report | dict[str, Any]) -> list[str]:
    """Differences between two fingerprints (baseline `a`, then `b`) that can explain a performance change."""
    fa, fb = _fp(a), _fp(b)
    ha, hb = fa.get("host") or {}, fb.get("host") or {}
    sa, sb = fa.get("software") or {}, fb.get("software") or {}
    notes: list[str] = []

    def diff(label: str, va: Any, vb: Any) -> None:
        if va != vb:
            notes.append(f"{label}: {_show(va)} → {_show(vb)}")

    diff("host", ha.get("hostname"), hb.get("hostname"))
    diff("platform", _platform(fa), _platform(fb))
    ga, gb = fa.get("gpus") or [], fb.get("gpus") or []
    diff("GPU count", len(ga), len(gb))
    if gpu_models(fa) != gpu_models(fb) and {g.get("name") for g in ga} != {g.get("name") for g in gb}:
        notes.append(f"GPU model: {gpu_models(fa)} → {gpu_models(fb)}")
    diff("NVIDIA driver", sa.get("driver_version"), sb.get("driver_version"))
    diff("CUDA (driver)", sa.get("cuda_driver_version"), sb.get("cuda_driver_version"))
    diff("nvcc", sa.get("nvcc_version"), sb.get("nvcc_version"))
    diff("cuDNN", sa.get("cudnn_version"), sb.get("cudnn_version"))
    diff("NCCL", sa.get("nccl_version"), sb.get("nccl_version"))
    fwa, fwb = _frameworks(fa), _frameworks(fb)
    for name in sorted(fwa.keys() | fwb.keys()):
        x, y = fwa.get(name) or {}, fwb.get(name) or {}
        diff(name, x.get("version") if x else "not installed", y.get("version") if y else "not installed")
        if x and y:
            diff(f"{name} built with CUDA", x.get("built_cuda"), y.get("built_cuda"))
            diff(f"{name} cuDNN", x.get("built_cudnn"), y.get("built_cudnn"))
    diff("python", sa.get("python"), sb.get("python"))

    ca, cb = ha.get("cpu") or {}, hb.get("cpu") or {}
    diff("CPU model", ca.get("model"), cb.get("model"))
    diff("CPU threads", ca.get("threads"), cb.get("threads"))
    diff("NUMA nodes", len(ha.get("numa_nodes") or []), len(hb.get("numa_nodes") or []))
    diff("kernel", ha.get("kernel"), hb.get("kernel"))

    pa, pb = _gpus_by_index(fa), _gpus_by_index(fb)
    for i in sorted(pa.keys() & pb.keys()):
        la, lb = _link(pa[i].get("pcie"), "current"), _link(pb[i].get("pcie"), "current")
        if la != lb:
            notes.append(f"GPU {i} PCIe link: {la} → {lb} (max {_link(pb[i].get('pcie'), 'max')})")
    for what, key in (
        ("NUMA node", "numa_node"),
        ("ECC", "ecc_enabled"),
        ("persistence mode", "persistence_mode"),
        ("power limit (W)", "power_limit_w"),
        ("max SM clock (MHz)", "max_sm_clock_mhz"),
        ("virtualization mode", "virtualization_mode"),
    ):
        note = _gpu_flag_note(what, pa, pb, key)
        if note:
            notes.append(note)

    ea, eb = sa.get("env") or {}, sb.get("env") or {}
    for var in sorted(ea.keys() | eb.keys()):
        if ea.get(var) != eb.get(var):
            notes.append(f"env {var}: {ea.get(var, '(unset)')} → {eb.get(var, '(unset)')}")
    return notes


def vm_sides(reports: Sequence[Report]) -> list[int | None]:
    """Per report: +1 when it is a VM and the baseline bare metal, -1 the reverse, None otherwise."""

    def is_vm(rep: Report) -> bool | None:
        host = rep.fingerprint.get("host")
        return None if host is None else bool(host.get("hypervisor"))

    base = is_vm(reports[0])
    out: list[int | None] = [None]
    for rep in reports[1:]:
        vm = is_vm(rep)
        out.append(None if base is None or vm is None or vm == base else (1 if vm else -1))
    return out
