"""The PCIe link: trained to its maximum generation and width (judged under load), and its replay counter."""

from __future__ import annotations

import re

from gpulab.checks.health.modes import elsewhere, vgpu_slice
from gpulab.checks.health.verdict import LIVE_SOURCE, failed, gpu_label, passed, skipped
from gpulab.records import Check, GpuInfo, PcieLink

# Performance states a GPU drops to when idle; its PCIe link may train down with them.
_IDLE_PSTATES = frozenset(f"P{n}" for n in range(8, 16))
# Laptop parts: named so since Ampere ("... Laptop GPU"); older ones by an "M" model or pci.ids' "Mobile" ids
# (GP107M: GeForce GTX 1050 / 1050 Ti notebooks report the desktop name).
_MOBILE_NAME = re.compile(r"Laptop GPU|Mobile|\b\d{3,4}M\b", re.IGNORECASE)
_MOBILE_PCI_IDS = frozenset({"10de:1c8c", "10de:1c8d", "10de:1c8f", "10de:1c90", "10de:1c91", "10de:1c92"})
# PCIe replays: the 16-bit hardware counter saturates at 65535 and nvidia-smi then counts rollovers. No vendor
# bound exists for one reading (DCGM's `dcgmi health -s p` judges a rate over time): gpulab's bound is 1000
# since the driver loaded, far above the handful a sound link logs and far below a failing riser's thousands.
REPLAY_BOUND = 1000
REPLAY_SATURATED = 65535


def mobile(gpu: GpuInfo) -> bool:
    """A laptop part: its board, not the chip, decides the PCIe lanes (commonly x8, sometimes x4)."""
    return _MOBILE_NAME.search(gpu.name) is not None or gpu.pci_device_id.lower() in _MOBILE_PCI_IDS


def _idle_power_state(gpu: GpuInfo) -> bool:
    return (gpu.performance_state or "").upper() in _IDLE_PSTATES


def pcie_link(gpu: GpuInfo, under_load: PcieLink | None = None, source: str = LIVE_SOURCE) -> Check:
    """The link trains to its maximum generation and width.

    GPUs drop the link generation at idle to save power, so a low idle generation is judged again under load
    (`under_load`, read while the GPU is busy) before it counts as a failure; without that reading it skips.
    """
    name = f"health.pcie_link[{gpu.index}]"
    loaded = under_load if (gpu.pcie.at_max is False and under_load is not None) else None
    link = loaded or gpu.pcie
    ev = {
        "idle": str(gpu.pcie),
        "under_load": str(under_load) if under_load else None,
        "bus_id": gpu.bus_id,
        "performance_state": gpu.performance_state,
    }
    if vgpu_slice(gpu):
        return elsewhere(
            name,
            gpu,
            f"{gpu_label(gpu)}: a vGPU guest sees a virtual PCIe link, not the board's: judge it on the host",
            **ev,
        )
    narrow = link.width_current is not None and link.width_max is not None and link.width_current < link.width_max
    slow = link.gen_current is not None and link.gen_max is not None and link.gen_current < link.gen_max
    notes = []
    host_width, host_gen = gpu.pcie.width_host_max, gpu.pcie.gen_host_max
    if narrow and host_width is not None and (link.width_current or 0) >= host_width:
        # The slot's bridge carries no more lanes: the card trained to all the slot has.
        narrow = False
        notes.append(f"the upstream port carries x{host_width}: the slot's limit, not the card's")
    if slow and host_gen is not None and (link.gen_current or 0) >= host_gen:
        slow = False
        notes.append(f"the upstream port carries gen{host_gen}: the slot's limit, not the card's")
    if narrow and mobile(gpu) and (link.width_current or 0) >= 4:
        # The chip reports what it could drive; a laptop's board routes fewer lanes to it by design.
        narrow = False
        notes.append(f"a laptop GPU: its board wires x{link.width_current} (the chip could drive x{link.width_max})")
    if narrow and loaded is None and _idle_power_state(gpu):
        # In a deep idle state the link may be trained down in width as well as speed; only a reading under
        # load tells a power-saving link from a narrow slot, and a capture holds none.
        return skipped(
            name,
            f"{gpu_label(gpu)}: PCIe {link} in idle state {gpu.performance_state}, and no reading under load: the "
            "link cannot be judged (re-read it while the GPU is busy, or run `gpulab validate` on the host)",
            **ev,
        )
    causes = []
    if narrow and link.width_current == 1:
        causes.append(
            f"width x1 of x{link.width_max}: the card sits on an x1 riser (the USB-cable kind mining rigs use) or "
            f"in an x1 slot, or its other lanes failed to train, so host transfers get 1/{link.width_max} of the "
            "lanes; seat it in a full-width slot or on a full-width riser, and reseat it if it trains x1 there"
        )
    elif narrow:
        causes.append(
            f"width x{link.width_current} of x{link.width_max}: the card sits in a narrower slot, a riser or "
            "bifurcation splits the lanes, or the slot is shared; move it to a full x16 slot"
        )
    if slow and loaded is not None:
        causes.append(
            f"gen{link.gen_current} of gen{link.gen_max} even under load: check the BIOS PCIe speed setting, the "
            "riser/retimer, and `lspci -vv` LnkSta for the upstream port"
        )
    if causes:
        return failed(name, f"{gpu_label(gpu)}: PCIe link below its maximum ({link}): " + "; ".join(causes), **ev)
    if slow:
        return skipped(
            name,
            f"{gpu_label(gpu)}: PCIe gen{link.gen_current} of gen{link.gen_max} at idle, and no reading under load "
            "(GPUs lower the generation when idle): the generation cannot be judged",
            **ev,
        )
    if link.at_max is None:
        return skipped(name, f"{gpu_label(gpu)}: PCIe link not reported by {source} ({link})", **ev)
    note = f" ({'; '.join(notes)})" if notes else ""
    return passed(name, f"{gpu_label(gpu)}: PCIe {link}{note}", **ev)


def pcie_replays(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    """The PCIe replay counter (link-level retransmissions after a bad packet): a sound link has a handful."""
    name = f"health.pcie_replays[{gpu.index}]"
    count, rolled = gpu.pcie_replays, gpu.pcie_replay_rollovers
    ev = {
        "replays": count,
        "rollovers": rolled,
        "bound": REPLAY_BOUND,
        "bound_source": "gpulab (see gpulab/checks/health/links.py)",
    }
    if vgpu_slice(gpu):
        return elsewhere(
            name, gpu, f"{gpu_label(gpu)}: a vGPU guest cannot see the board's PCIe counters: judge on the host"
        )
    if count is None:
        return skipped(name, f"{gpu_label(gpu)}: PCIe replay counter not reported by {source}", **ev)
    if (rolled or 0) > 0 or count >= REPLAY_SATURATED or count > REPLAY_BOUND:
        wrapped = f", rolled over {rolled} times" if rolled else (" (saturated)" if count >= REPLAY_SATURATED else "")
        return failed(
            name,
            f"{gpu_label(gpu)}: {count} PCIe replays since the driver loaded{wrapped}, above gpulab's bound of "
            f"{REPLAY_BOUND}: the link retransmits bad packets (a riser or extender cable, a dirty or loose slot, "
            "a marginal retimer, or a gen setting above what the path carries); reseat the card, drop the riser, "
            "or set the slot's PCIe generation one lower in the BIOS",
            **ev,
        )
    return passed(name, f"{gpu_label(gpu)}: {count} PCIe replays (bound {REPLAY_BOUND})", **ev)
