"""What runs on a host's GPUs, read before anything changes its driver: the provisioning side of gpulab's process
census (gpulab.checks.occupancy is the validation's, which shares its memory bounds from here).

A GPU is busy when a `nvidia-smi -q -x` report lists on it:

- a compute or MPS process (type C, C+G, M, M+C): it holds a context and can launch kernels at any time;
- a graphics-only process holding more than the memory bound (a display server holds tens of MiB);
- memory in use that no listed process explains, beyond the bound: a process in another container or PID
  namespace, or a VM, that this view cannot see.

Where nvidia-smi cannot answer although an NVIDIA module is loaded (the "Driver/library version mismatch" window,
a broken install), the processes holding `/dev/nvidia*` open are the census instead. On a KVM host a running
libvirt domain with a PCI device passed through holds a GPU.

This file is the only definition. gpulab imports it as `gpulab.hw.gpu_census`; the collection's `gpu_census`
module, which runs on hosts without gpulab, imports it as
`ansible_collections.gpulab.provision.plugins.module_utils.gpu_census`, a symbolic link to this file. So it imports
nothing but the standard library.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from typing import Any

MEMORY_FLOOR_MIB = 1024
MEMORY_SHARE = 0.01  # of the board's memory: 1.4 GiB on a 141 GiB H200, twice its reservation
UNKNOWN = {"", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error"}  # nvidia-smi: no value
_KINDS = {"C": "compute", "G": "graphics", "C+G": "compute+graphics", "M": "MPS", "M+C": "MPS"}
_DEVICE = re.compile(r"^/dev/nvidia(\d+|ctl|-uvm)$")


def mib(value: float | None) -> str:
    if value is None:
        return "an unreported amount"
    return f"{value / 1024:.1f} GiB" if value >= 1024 else f"{value:.0f} MiB"


def memory_bound_mib(total_mib: float | None) -> float:
    """Memory in use that counts as work: max(MEMORY_FLOOR_MIB, MEMORY_SHARE of the board)."""
    return max(MEMORY_FLOOR_MIB, MEMORY_SHARE * total_mib) if total_mib else MEMORY_FLOOR_MIB


def smi_text(node: ET.Element | None, path: str) -> str | None:
    """The text at `path` of a `nvidia-smi -q -x` element, None where nvidia-smi wrote no value."""
    found = node.find(path) if node is not None else None
    if found is None or found.text is None or found.text.strip() in UNKNOWN:
        return None
    return found.text.strip()


def smi_number(node: ET.Element | None, path: str) -> float | None:
    """The leading number of the text at `path` ("1234 MiB" -> 1234.0), None without one."""
    text = smi_text(node, path)
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


def _mib(node: ET.Element | None, path: str) -> int | None:
    value = smi_number(node, path)
    return int(value) if value is not None else None


def _kind(gpu: ET.Element, info: ET.Element) -> str:
    kind = (smi_text(info, "type") or "C").upper()
    if kind == "C+G" and (smi_text(gpu, "driver_model/current_dm") or "").upper() == "WDDM":
        return "G"  # Windows lists every DirectX program C+G: a graphics client
    return kind


def smi_gpus(xml_text: str) -> list[dict[str, Any]]:
    """Each GPU of a `nvidia-smi -q -x` report: index, bus id, memory total/used (MiB) and its processes."""
    gpus = []
    for index, node in enumerate(ET.fromstring(xml_text).findall("gpu")):
        memory = "fb_memory_usage" if node.find("fb_memory_usage") is not None else "memory_usage"
        listing = node.find("processes")
        if listing is None:
            listing = node.find("compute_processes")  # drivers before ~R384
        processes = []
        for info in listing.findall("process_info") if listing is not None else []:
            pid = _mib(info, "pid")
            if pid is not None:
                name = os.path.basename(smi_text(info, "process_name") or "") or "(unnamed)"
                kind = _KINDS.get(_kind(node, info), "compute")
                processes.append({"pid": pid, "name": name, "kind": kind, "used_mib": _mib(info, "used_memory")})
        gpus.append(
            {
                "index": index,
                "bus_id": node.get("id") or smi_text(node, "pci/pci_bus_id"),
                "total_mib": _mib(node, f"{memory}/total"),
                "used_mib": _mib(node, f"{memory}/used"),
                "processes": processes,
            }
        )
    return gpus


def gpu_reasons(gpu: dict[str, Any]) -> list[str]:
    """Why one GPU of smi_gpus() is busy, each in a few words; empty when it is free."""
    reasons = []
    bound = memory_bound_mib(gpu["total_mib"])
    for proc in gpu["processes"]:
        if proc["kind"] != "graphics" or (proc["used_mib"] or 0) > bound:
            held = f", {mib(proc['used_mib'])}" if proc["used_mib"] is not None else ""
            reasons.append(f"GPU {gpu['index']}: pid {proc['pid']} {proc['name']} ({proc['kind']}{held})")
    if gpu["used_mib"] is not None and all(p["used_mib"] is not None for p in gpu["processes"]):
        hidden = gpu["used_mib"] - sum(p["used_mib"] for p in gpu["processes"])
        if hidden > bound:
            reasons.append(f"GPU {gpu['index']}: {mib(hidden)} in use that no listed process explains")
    return reasons


def busy_reasons(gpus: list[dict[str, Any]]) -> list[str]:
    """gpu_reasons() of every GPU, a process on several GPUs named once: "pid 37305 python (compute) on GPUs 0, 1:
    59.7 GiB"."""
    by_proc: dict[tuple[int, str, str], list[tuple[int, int | None]]] = {}
    hidden = []
    for gpu in gpus:
        bound = memory_bound_mib(gpu["total_mib"])
        for proc in gpu["processes"]:
            if proc["kind"] != "graphics" or (proc["used_mib"] or 0) > bound:
                key = (proc["pid"], proc["name"], proc["kind"])
                by_proc.setdefault(key, []).append((gpu["index"], proc["used_mib"]))
        hidden += [r for r in gpu_reasons(gpu) if "no listed process explains" in r]
    out = []
    for (pid, name, kind), uses in by_proc.items():
        where = f"GPU{'s' if len(uses) > 1 else ''} {', '.join(str(i) for i, _ in uses)}"
        held = [m for _, m in uses if m is not None]
        out.append(f"pid {pid} {name} ({kind}) on {where}" + (f": {mib(sum(held))}" if held else ""))
    return out + hidden


def device_holders(proc: str = "/proc") -> list[str]:
    """Processes holding an NVIDIA device file open ("pid 123 python (/dev/nvidia0)"), read from /proc."""
    found = []
    try:
        pids = sorted(int(p) for p in os.listdir(proc) if p.isdigit())
    except OSError:
        return []
    for pid in pids:
        fd_dir = os.path.join(proc, str(pid), "fd")
        try:
            targets = {os.readlink(os.path.join(fd_dir, fd)) for fd in os.listdir(fd_dir)}
        except OSError:
            continue  # exited meanwhile, or not ours to read
        devices = sorted(t for t in targets if _DEVICE.match(t))
        if devices:
            try:
                with open(os.path.join(proc, str(pid), "comm"), encoding="utf-8", errors="replace") as fh:
                    name = fh.read().strip() or "(unnamed)"
            except OSError:
                name = "(unnamed)"
            found.append(f"pid {pid} {name} ({', '.join(devices)})")
    return found


def pci_hostdevs(domain_xml: str) -> list[str]:
    """The PCI addresses (0000:3b:00.0) a libvirt domain's XML passes through."""
    found = []
    for dev in ET.fromstring(domain_xml).findall("devices/hostdev"):
        if dev.get("type") != "pci":
            continue
        addr = dev.find("source/address")
        if addr is None:
            continue
        parts = [addr.get(k, "0") for k in ("domain", "bus", "slot", "function")]
        try:
            dom, bus, slot, fn = (int(p, 16) for p in parts)
        except ValueError:
            continue
        found.append(f"{dom:04x}:{bus:02x}:{slot:02x}.{fn:x}")
    return found


def census_line(host: str, reasons: list[str]) -> str:
    """The one line a refused node gets."""
    return f"{host} is busy: {'; '.join(reasons)}"
