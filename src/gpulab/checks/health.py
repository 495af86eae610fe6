"""Health verdicts over a host fingerprint: each function returns one Check whose message names cause and fix.

Pure functions of the Fingerprint (plus what the caller expects), so they run on captured fixtures in CI and
on live NVML data in validate/. A check passes only on positive evidence: a value its source did not report
(N/A, absent, unknown) makes it skip with "... not reported by <source>", and what a capture cannot hold
(toolkits, frameworks) with "... not captured".
"""

from __future__ import annotations

import re

from gpulab import compat
from gpulab.compat.gpu_names import product_class as derive_class
from gpulab.compat.gpus import gpu_for
from gpulab.errors import GpulabError
from gpulab.hw.model import CAPTURE_SOURCE_PREFIX, Fingerprint, GpuInfo, PcieLink, SoftwareInfo
from gpulab.report.model import Check

LIVE_SOURCE = "NVML"

# Clock-event reasons that are expected and harmless on an idle GPU.
BENIGN_IDLE_REASONS = frozenset({"gpu_idle", "applications_clocks_setting", "display_clocks_setting"})
# Performance states a GPU drops to when idle; its PCIe link may train down with them.
_IDLE_PSTATES = frozenset(f"P{n}" for n in range(8, 16))
# A vGPU profile's name ends in its frame-buffer size and series: "GRID T4-4Q", "NVIDIA L40S-2Q", "A100-4C".
_VGPU_PROFILE = re.compile(r"-\d+[ABCQ]$")
# Laptop parts: named so since Ampere ("... Laptop GPU"); older ones by an "M" model or pci.ids' "Mobile" ids
# (GP107M: GeForce GTX 1050 / 1050 Ti notebooks report the desktop name).
_MOBILE_NAME = re.compile(r"Laptop GPU|Mobile|\b\d{3,4}M\b", re.IGNORECASE)
_MOBILE_PCI_IDS = frozenset({"10de:1c8c", "10de:1c8d", "10de:1c8f", "10de:1c90", "10de:1c91", "10de:1c92"})
# PCIe replays: the 16-bit hardware counter saturates at 65535 and nvidia-smi then counts rollovers. No vendor
# bound exists for one reading (DCGM's `dcgmi health -s p` judges a rate over time): gpulab's bound is 1000
# since the driver loaded, far above the handful a sound link logs and far below a failing riser's thousands.
REPLAY_BOUND = 1000
REPLAY_SATURATED = 65535


def _ok(name: str, message: str, **evidence: object) -> Check:
    return Check(name=name, status="pass", message=message, evidence=dict(evidence))


def _fail(name: str, message: str, **evidence: object) -> Check:
    return Check(name=name, status="fail", message=message, evidence=dict(evidence))


def _skip(name: str, message: str, **evidence: object) -> Check:
    return Check(name=name, status="skip", message=message, evidence=dict(evidence))


def _elsewhere(name: str, gpu: GpuInfo, message: str, **evidence: object) -> Check:
    """A skip because this check does not apply to how the GPU is presented (a vGPU slice, MIG): it is judged
    elsewhere, which a verdict must tell apart from a value nobody could read."""
    return _skip(name, message, **evidence, judged_elsewhere=mode(gpu))


def gpu_label(gpu: GpuInfo) -> str:
    return f"GPU {gpu.index} ({gpu.name}, {gpu.bus_id})"


def product_class(gpu: GpuInfo) -> str:
    """ "data-centre", "workstation" or "consumer": discovery fills it; GpuInfo built elsewhere gets it derived."""
    return gpu.product_class or derive_class(gpu.name, gpu.product_brand)


def mig_enabled(gpu: GpuInfo) -> bool:
    """MIG is on: the GPU is split into instances, so whole-GPU probes and readings measure no one workload."""
    return gpu.mig_enabled is True


def vgpu_slice(gpu: GpuInfo) -> bool:
    """The GPU is a vGPU slice seen from its guest: the host owns the board, its memory and its link."""
    mode = (gpu.virtualization_mode or "").replace(" ", "").upper()
    return mode == "VGPU" or (not mode and _VGPU_PROFILE.search(gpu.name) is not None)


def vgpu_host(gpu: GpuInfo) -> bool:
    """The GPU is a vGPU hypervisor's board: VMs share it, their processes are the host's purpose."""
    return (gpu.virtualization_mode or "").replace(" ", "").upper() in ("HOSTVGPU", "HOSTVSGA")


def mode(gpu: GpuInfo) -> str | None:
    """How this GPU is presented, as a fact: "MIG", "vGPU guest", "vGPU host", "passthrough" or "bare metal";
    None when the source says nothing of it."""
    if mig_enabled(gpu):
        return "MIG"
    if vgpu_slice(gpu):
        return "vGPU guest"
    if vgpu_host(gpu):
        return "vGPU host"
    value = (gpu.virtualization_mode or "").replace(" ", "").replace("-", "").upper()
    if value == "PASSTHROUGH":
        return "passthrough"
    if value == "NONE":
        return "bare metal"
    return None


def mobile(gpu: GpuInfo) -> bool:
    """A laptop part: its board, not the chip, decides the PCIe lanes (commonly x8, sometimes x4)."""
    return _MOBILE_NAME.search(gpu.name) is not None or gpu.pci_device_id.lower() in _MOBILE_PCI_IDS


def whole_gpu_notice(gpu: GpuInfo) -> str | None:
    """One line saying why whole-GPU probes measure nothing meaningful here (MIG or a vGPU slice); None when
    they do. Probes and reports call it before judging a GPU as a whole."""
    if mig_enabled(gpu):
        sizes = ", ".join(
            f"{d.memory_total_mib} MiB" if d.memory_total_mib is not None else "?" for d in gpu.mig_devices
        )
        held = f"{len(gpu.mig_devices)} MIG instances ({sizes})" if gpu.mig_devices else "no MIG instance"
        return (
            f"{gpu_label(gpu)}: MIG is enabled with {held}: whole-GPU probes and readings measure no single "
            f"workload; judge the instances, or disable MIG (`nvidia-smi -i {gpu.index} -mig 0`) to measure the GPU"
        )
    if vgpu_slice(gpu):
        licence = f", licensed as {gpu.vgpu_licensed_product}" if gpu.vgpu_licensed_product else ""
        return (
            f"{gpu_label(gpu)}: a vGPU slice{licence}: the host owns the physical GPU, so its ECC, memory "
            "retirement and PCIe link are judged on the host, not in this guest"
        )
    if vgpu_host(gpu):
        return (
            f"{gpu_label(gpu)}: a vGPU host's GPU (mode {gpu.virtualization_mode}): VMs share it, so whole-GPU "
            "probes and idle readings measure their work; its board (ECC, memory, link, heat) is judged here"
        )
    return None


def whole_gpu(gpu: GpuInfo, src: str = LIVE_SOURCE) -> Check:
    """Whether whole-GPU checks and probes mean anything on this GPU (no MIG, not a vGPU slice)."""
    name = f"health.whole_gpu[{gpu.index}]"
    ev = {
        "mig_enabled": gpu.mig_enabled,
        "mig_devices": len(gpu.mig_devices),
        "virtualization_mode": gpu.virtualization_mode,
    }
    notice = whole_gpu_notice(gpu)
    if notice is not None:
        return _elsewhere(name, gpu, notice, **ev)
    if gpu.mig_enabled is None and gpu.virtualization_mode is None:
        return _skip(name, f"{gpu_label(gpu)}: MIG and virtualization mode not reported by {src}", **ev)
    return _ok(name, f"{gpu_label(gpu)}: a whole GPU ({mode(gpu) or 'no MIG, not a vGPU slice'})", **ev)


def _idle_power_state(gpu: GpuInfo) -> bool:
    return (gpu.performance_state or "").upper() in _IDLE_PSTATES


def reporter(fp: Fingerprint) -> str:
    """What reported the GPU facts, as "not reported by ..." names it: NVML, or the capture file."""
    if fp.is_capture:
        return f"the capture {fp.gpu_source.removeprefix(CAPTURE_SOURCE_PREFIX)}"
    return LIVE_SOURCE


def _known_version(value: str | None) -> bool:
    """A version string to judge with: "12.8", "2.11.0+cu130"; not None, "", "unknown" or "N/A"."""
    return bool(value) and re.match(r"\d+\.\d+", value or "") is not None


def gpu_count(fp: Fingerprint, expected: int | None, on_pci_bus: int | None = None) -> Check:
    """NVML sees the number of GPUs the inventory promises, and every NVIDIA GPU on the PCI bus."""
    name = "health.gpu_count"
    found = len(fp.gpus)
    seen = f"the capture lists {found}" if fp.is_capture else f"NVML sees {found}"
    ev = {"found": found, "expected": expected, "on_pci_bus": on_pci_bus, "source": reporter(fp)}
    host = fp.capture_attached_gpus
    if host is not None:
        # `nvidia-smi -q -x -i N`: the host's count is known, the other GPUs' health is not.
        ev["host_attached"] = host
        part = f"the capture holds {found} of the host's {host} GPUs (`nvidia-smi -q -x -i`): only those are judged"
        if expected is not None and host != expected:
            return _fail(name, f"expected {expected} GPUs, the host reports {host} attached; {part}", **ev)
        if expected is None:
            return _skip(name, f"{part}; no --expect-gpus given to compare the host's count with", **ev)
        return _ok(name, f"the host reports {host} GPUs attached, matching {expected} expected; {part}", **ev)
    if expected is not None and found != expected:
        hint = (
            f"{on_pci_bus} are on the PCI bus, so the driver did not bring up the rest: see `dmesg | grep -i nvrm`"
            if on_pci_bus is not None and on_pci_bus > found
            else "check that every card is seated and powered, and for a VM that every GPU is passed through"
        )
        return _fail(name, f"expected {expected} GPUs, {seen}; {hint}", **ev)
    if on_pci_bus is not None and on_pci_bus > found:
        return _fail(
            name,
            f"{on_pci_bus} NVIDIA GPUs on the PCI bus but {seen}: the driver failed on some of them "
            "(see `dmesg | grep -i nvrm`; a GPU bound to vfio-pci is expected only on a VM host)",
            **ev,
        )
    agreed = [f"{expected} expected"] if expected is not None else []
    if on_pci_bus == found:
        agreed.append(f"{on_pci_bus} NVIDIA GPUs on the PCI bus")
    if not agreed:
        # A count with nothing to compare it to proves nothing: the missing GPU would not be listed either.
        bus = "the PCI bus count is not captured" if fp.is_capture else "the PCI bus count is not reported"
        return _skip(name, f"{seen} GPUs, with nothing to compare: no --expect-gpus given and {bus}", **ev)
    return _ok(name, f"{seen} GPUs, matching " + " and ".join(agreed), **ev)


def driver_supports_cuda(fp: Fingerprint) -> Check:
    """The driver is new enough for every CUDA the host uses: the frameworks' builds and the toolkits.

    A capture holds neither, so its driver is checked against the CUDA version the capture itself reports,
    never against this machine's toolkits.
    """
    name = "health.driver_for_cuda"
    sw = fp.software
    src = reporter(fp)
    driver = sw.driver_version
    if not driver:
        return _skip(name, f"driver version not reported by {src}" + ("" if fp.is_capture else " (no NVIDIA driver)"))
    needs: dict[str, str] = {}
    not_captured: list[str] = []
    if fp.is_capture and _known_version(sw.cuda_driver_version):
        needs[f"the captured driver's CUDA {sw.cuda_driver_version}"] = sw.cuda_driver_version or ""
    if sw.frameworks is None:
        not_captured.append("framework builds")
    for fw in sw.frameworks or []:
        if _known_version(fw.built_cuda):
            needs[f"{fw.name} {fw.version}"] = fw.built_cuda or ""
    if sw.toolkits is None:
        not_captured.append("CUDA toolkits")
    for tk in sw.toolkits or []:
        if _known_version(tk.get("version")):
            needs[f"CUDA toolkit at {tk.get('path', '?')}"] = tk["version"]
    absent = f"; {' and '.join(not_captured)} not captured" if not_captured else ""
    if not needs:
        if fp.is_capture:
            why = f"CUDA version not reported by {src}{absent}"
        else:
            why = "no CUDA build of a framework and no CUDA toolkit with a known version found"
        return _skip(name, f"{why}: nothing to check driver {driver} against", driver=driver)
    problems, unknown = [], []
    for who, cuda in sorted(needs.items()):
        try:
            minimum = compat.min_driver_for_cuda(_major_minor(cuda))
        except GpulabError as err:  # a CUDA the matrix does not know is not judged either way
            unknown.append(f"{who}: {err}")
            continue
        if _version_tuple(driver) < _version_tuple(minimum):
            problems.append(f"{who} needs CUDA {cuda}, which needs driver >= {minimum}")
    ev = {"driver": driver, "needs": needs, "not_judged": unknown}
    if problems:
        return _fail(
            name,
            f"driver {driver} is too old: " + "; ".join(problems) + ". Fix: install a newer driver branch "
            "(`gpulab matrix plan --gpu <model>` names one) or use framework builds for an older CUDA",
            **ev,
        )
    if len(unknown) == len(needs):
        return _skip(name, f"cannot judge driver {driver}: " + "; ".join(unknown) + absent, **ev)
    judged = ", ".join(f"{k} (CUDA {v})" for k, v in needs.items() if not any(u.startswith(f"{k}:") for u in unknown))
    notes = ("; not judged: " + "; ".join(unknown) if unknown else "") + absent
    return _ok(name, f"driver {driver} supports {judged}{notes}", **ev)


def _offered_stack(sw: SoftwareInfo) -> dict[str, str | None]:
    """The driver, CUDA, cuDNN and framework versions the software reports, None where unknown or not reported."""
    frameworks = sw.frameworks or []
    torch = next((fw for fw in frameworks if fw.name == "torch" and not fw.error), None)
    tf = next((fw for fw in frameworks if fw.name == "tensorflow" and not fw.error), None)
    cuda = (torch.built_cuda if torch else None) or (tf.built_cuda if tf else None)
    return {
        "driver": sw.driver_version if _known_version(sw.driver_version) else None,
        "cuda": _major_minor(cuda) if cuda and _known_version(cuda) else None,
        "cudnn": _major_minor(sw.cudnn_version) if sw.cudnn_version and _known_version(sw.cudnn_version) else None,
        "torch": _release(torch.version) if torch and _known_version(torch.version) else None,
        "tensorflow": _release(tf.version) if tf and _known_version(tf.version) else None,
    }


def stack_supports_gpus(fp: Fingerprint) -> Check:
    """The driver, CUDA, cuDNN and framework builds all support each GPU model's architecture (the matrix).

    Only components that are reported and known to the matrix are judged; the check skips when none is.
    """
    name = "health.stack_supports_arch"
    if not fp.gpus:
        return _skip(name, fp.gpu_absent_reason or "no GPU")
    sw = fp.software
    src = reporter(fp)
    offered = _offered_stack(sw)
    not_judged: list[str] = []
    if offered["driver"] is None:
        not_judged.append(f"driver (not reported by {src})")
    if sw.frameworks is None:
        not_judged.append(f"CUDA, cuDNN and framework builds (not captured by {src})")
    components: dict[str, str] = {}
    for component, value in offered.items():
        if value is None:
            continue
        # Alone, a component can only be wrong by being unknown to the matrix: that is no verdict on the GPU.
        unknown = compat.check_stack(compat.Stack(**{component: value}))
        if unknown:
            not_judged.append(f"{component} {value} ({unknown[0].reason})")
        else:
            components[component] = value
    issues: list[str] = []
    stacks: dict[str, dict[str, str | None]] = {}
    if _known_version(sw.driver_version) and (oldest := _predates_matrix(sw.driver_version or "")):
        # A driver older than every branch the matrix lists runs no CUDA or framework build in use today.
        for gpu in {g.name: g for g in fp.gpus}.values():
            arch = gpu.architecture
            newest = f"; the newest stack for this GPU is {_newest(arch, _own_cc(gpu))}" if arch else ""
            stacks[gpu.name] = {"driver": sw.driver_version, "architecture": arch}
            issues.append(
                f"{_named(gpu)}: driver {sw.driver_version} predates every branch the matrix lists ({oldest} and "
                f"later): no CUDA or framework build in use today runs on it{newest}. Fix: install that driver "
                "branch, or retire the GPU if its stack is too old for the work"
            )
    unknown_gpus = {g.name: g for g in fp.gpus if _model(g).startswith("?")}
    for gpu in unknown_gpus.values():
        if issues and gpu.name in stacks:
            continue
        facts, problems, why = _judge_unknown_gpu(gpu, components)
        if facts:
            stacks[f"{gpu.name} (not in the matrix)"] = facts
            issues += problems
        else:
            not_judged.append(why)
    for model in sorted({_model(g) for g in fp.gpus}):
        if model.startswith("?"):
            continue
        if not components:
            continue
        stack = compat.Stack(gpu=model, **components)
        stacks[model] = {k: v for k, v in vars(stack).items() if v}
        issues += [f"{model}: {i.component}: {i.reason} Fix: {i.fix}" for i in compat.check_stack(stack)]
    ev = {"stacks": stacks, "not_judged": not_judged}
    rest = "; not judged: " + "; ".join(not_judged) if not_judged else ""
    if issues:
        return _fail(name, "; ".join(issues) + rest, **ev)
    if not stacks:
        return _skip(name, "cannot judge architecture support: " + "; ".join(not_judged), **ev)
    judged = ", ".join(f"{k} {v}" for k, v in components.items())
    legacy = sorted(
        {(g.architecture, _own_cc(g)) for g in fp.gpus if g.architecture and not _current_arch(g.architecture)}, key=str
    )
    aged = "".join(
        f"; {a}{f' (compute capability {cc})' if cc else ''} is a legacy architecture: the newest stack for it is "
        f"{_newest(a, cc)}"
        for a, cc in legacy
    )
    return _ok(name, f"{', '.join(stacks)}: architecture supported by {judged}{rest}{aged}", **ev)


def _predates_matrix(driver: str) -> str | None:
    """The matrix's oldest branch when `driver` is older than it; None when the matrix covers the driver."""
    oldest = min(compat.load_matrix().drivers, key=lambda b: b.number)
    return oldest.branch if int(_version_tuple(driver)[0]) < oldest.number else None


def _newest(architecture: str, compute_capability: str | None = None) -> str:
    from gpulab.compat.legacy import newest_stack

    try:
        return newest_stack(architecture, compute_capability).text()
    except GpulabError as err:
        return f"unknown ({err})"


def _own_cc(gpu: GpuInfo) -> str | None:
    """The GPU's compute capability: the matrix's, else its chip's by PCI id (a GK104 Kepler is 3.0)."""
    from gpulab.compat.legacy import compute_capability_for_pci_id

    return gpu.compute_capability or compute_capability_for_pci_id(gpu.pci_device_id)


def _current_arch(architecture: str) -> bool:
    """The newest driver branch still supports the architecture (unknown names count as current)."""
    from gpulab.compat.legacy import newest_stack

    try:
        return newest_stack(architecture).current
    except (GpulabError, KeyError, ValueError):
        return True


def _named(gpu: GpuInfo) -> str:
    """A GPU as the matrix cannot name it: its reported name, PCI id and architecture."""
    return f"{gpu.name} (PCI id {gpu.pci_device_id or '?'}, {gpu.architecture or 'architecture unknown'})"


def _model(gpu: GpuInfo) -> str:
    """The matrix's name for a GPU (by PCI id first: names vary by driver); "?<name>" when it has none."""
    spec = gpu_for(gpu.name, gpu.pci_device_id)
    return spec.name if spec is not None else f"?{gpu.name}"


def _judge_unknown_gpu(gpu: GpuInfo, components: dict[str, str]) -> tuple[dict[str, str | None], list[str], str]:
    """A GPU the matrix lacks, judged on what its source reported: the driver against its architecture, CUDA
    against its compute capability. Returns (what was judged, problems, why nothing was when so)."""
    arch, cc = gpu.architecture, gpu.compute_capability
    judged: dict[str, str | None] = {}
    problems: list[str] = []
    driver, cuda = components.get("driver"), components.get("cuda")
    try:
        if driver and arch:
            judged.update(driver=driver, architecture=arch)
            if not compat.driver_supports_arch(driver, arch):
                problems.append(
                    f"{_named(gpu)}: driver {driver} ({compat.driver_branch(driver)}) does not support {arch}; "
                    f"the newest stack for this GPU is {_newest(arch, _own_cc(gpu))}. Fix: install that driver branch"
                )
        if cuda and cc:
            judged.update(cuda=cuda, compute_capability=cc)
            if not compat.cuda_supports_cc(cuda, cc):
                problems.append(f"{gpu.name}: CUDA {cuda} has no kernels for compute capability {cc}.")
    except GpulabError as err:  # an architecture the matrix does not name is not judged either way
        return {}, [], f"GPU {gpu.name} (PCI id {gpu.pci_device_id or '?'}; not in the compatibility matrix; {err})"
    if judged:
        return judged, problems, ""
    known = ", ".join(f"{k} {v}" for k, v in (("architecture", arch), ("compute capability", cc)) if v)
    return (
        {},
        [],
        f"GPU {gpu.name} (PCI id {gpu.pci_device_id or '?'}; not in the compatibility matrix; "
        f"{known or 'architecture and compute capability'} "
        f"{'known, but nothing reported to judge it against' if known else 'not reported'}: spec-based checks "
        "skipped)",
    )


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
        return _elsewhere(
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
        return _skip(
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
        return _fail(name, f"{gpu_label(gpu)}: PCIe link below its maximum ({link}): " + "; ".join(causes), **ev)
    if slow:
        return _skip(
            name,
            f"{gpu_label(gpu)}: PCIe gen{link.gen_current} of gen{link.gen_max} at idle, and no reading under load "
            "(GPUs lower the generation when idle): the generation cannot be judged",
            **ev,
        )
    if link.at_max is None:
        return _skip(name, f"{gpu_label(gpu)}: PCIe link not reported by {source} ({link})", **ev)
    note = f" ({'; '.join(notes)})" if notes else ""
    return _ok(name, f"{gpu_label(gpu)}: PCIe {link}{note}", **ev)


def pcie_replays(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    """The PCIe replay counter (link-level retransmissions after a bad packet): a sound link has a handful."""
    name = f"health.pcie_replays[{gpu.index}]"
    count, rolled = gpu.pcie_replays, gpu.pcie_replay_rollovers
    ev = {"replays": count, "rollovers": rolled, "bound": REPLAY_BOUND, "bound_source": "gpulab (see health.py)"}
    if vgpu_slice(gpu):
        return _elsewhere(
            name, gpu, f"{gpu_label(gpu)}: a vGPU guest cannot see the board's PCIe counters: judge on the host"
        )
    if count is None:
        return _skip(name, f"{gpu_label(gpu)}: PCIe replay counter not reported by {source}", **ev)
    if (rolled or 0) > 0 or count >= REPLAY_SATURATED or count > REPLAY_BOUND:
        wrapped = f", rolled over {rolled} times" if rolled else (" (saturated)" if count >= REPLAY_SATURATED else "")
        return _fail(
            name,
            f"{gpu_label(gpu)}: {count} PCIe replays since the driver loaded{wrapped}, above gpulab's bound of "
            f"{REPLAY_BOUND}: the link retransmits bad packets (a riser or extender cable, a dirty or loose slot, "
            "a marginal retimer, or a gen setting above what the path carries); reseat the card, drop the riser, "
            "or set the slot's PCIe generation one lower in the BIOS",
            **ev,
        )
    return _ok(name, f"{gpu_label(gpu)}: {count} PCIe replays (bound {REPLAY_BOUND})", **ev)


def thermal(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    """The temperature against the GPU's own slowdown and shutdown thresholds (from the capture or NVML)."""
    name = f"health.thermal[{gpu.index}]"
    temp, slow, stop = gpu.temperature_c, gpu.temp_slowdown_c, gpu.temp_shutdown_c
    ev = {"temperature_c": temp, "slowdown_c": slow, "shutdown_c": stop}
    if vgpu_slice(gpu):
        return _elsewhere(
            name, gpu, f"{gpu_label(gpu)}: a vGPU guest reads no board temperature: judge it on the host", **ev
        )
    if temp is None:
        return _skip(name, f"{gpu_label(gpu)}: temperature not reported by {source}", **ev)
    # Some boards report thresholds relative to the limit (-5 C): only an absolute threshold above 0 is one.
    slow = slow if slow is not None and slow > 0 else None
    stop = stop if stop is not None and stop > 0 else None
    if stop is not None and temp >= stop:
        return _fail(
            name,
            f"{gpu_label(gpu)}: {temp:g} C, at or above its shutdown threshold {stop:g} C: the GPU is about to "
            "switch itself off; stop its work and fix the cooling (fans, airflow, inlet temperature, heatsink paste)",
            **ev,
        )
    if slow is not None and temp >= slow:
        return _fail(
            name,
            f"{gpu_label(gpu)}: {temp:g} C, at or above its slowdown threshold {slow:g} C: clocks are cut to cool "
            "it; fix the cooling (fans, airflow, inlet temperature, blocked slots beside it)",
            **ev,
        )
    if slow is None and stop is None:
        return _skip(
            name,
            f"{gpu_label(gpu)}: {temp:g} C, but its slowdown/shutdown thresholds are not reported by {source}",
            **ev,
        )
    limit = slow if slow is not None else stop or 0.0
    return _ok(
        name,
        f"{gpu_label(gpu)}: {temp:g} C, {limit - temp:g} C below its "
        f"{'slowdown' if slow is not None else 'shutdown'} threshold {limit:g} C",
        **ev,
    )


def ecc(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    name = f"health.ecc[{gpu.index}]"
    e = gpu.ecc_errors
    cls = product_class(gpu)
    ev = {"enabled": gpu.ecc_enabled, "product_class": cls, **vars(e)}
    if vgpu_slice(gpu):
        return _elsewhere(
            name, gpu, f"{gpu_label(gpu)}: a vGPU guest cannot see the board's ECC mode: judge it on the host", **ev
        )
    if gpu.ecc_enabled is None:
        why = "a consumer card has no ECC" if cls == "consumer" else "N/A where a GPU has no ECC"
        return _skip(name, f"{gpu_label(gpu)}: ECC mode not reported by {source} ({why})", **ev)
    if not gpu.ecc_enabled and cls != "data-centre":
        # GeForce boards with ECC and the RTX workstation boards ship with it off: a choice, not a fault.
        return _skip(
            name,
            f"{gpu_label(gpu)}: ECC is off, as {cls} cards ship; enable it with `nvidia-smi -i {gpu.index} -e 1` "
            "and reboot if this card runs long jobs whose results must be exact",
            **ev,
        )
    if not gpu.ecc_enabled:
        return _fail(
            name,
            f"{gpu_label(gpu)}: ECC is disabled; enable it with `nvidia-smi -i {gpu.index} -e 1` and reboot "
            "(data-centre GPUs should run with ECC on)",
            **ev,
        )
    if e.volatile_uncorrected:
        return _fail(
            name,
            f"{gpu_label(gpu)}: {e.volatile_uncorrected} uncorrectable ECC errors since the driver loaded: drain "
            "the GPU, reset it, and run the vendor's field diagnostics; replace it if they recur",
            **ev,
        )
    if e.volatile_uncorrected is None and e.aggregate_uncorrected == 0:
        # The board's lifetime count holds every error since the driver loaded too (with MIG on, the driver
        # reports the since-load counts per instance only).
        return _ok(name, f"{gpu_label(gpu)}: ECC on, no uncorrectable errors in the board's life", **ev)
    if e.volatile_uncorrected is None:
        life = "" if e.aggregate_uncorrected is None else f" (the board's lifetime count is {e.aggregate_uncorrected})"
        return _skip(
            name, f"{gpu_label(gpu)}: ECC on, but the uncorrectable error count is not reported by {source}{life}", **ev
        )
    return _ok(name, f"{gpu_label(gpu)}: ECC on, no uncorrectable errors", **ev)


def memory_retirement(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    name = f"health.memory_retirement[{gpu.index}]"
    r = gpu.retirement
    ev = dict(vars(r))
    if vgpu_slice(gpu):
        return _elsewhere(
            name,
            gpu,
            f"{gpu_label(gpu)}: a vGPU guest cannot see the board's retired memory: judge it on the host",
            **ev,
        )
    if r.remap_failure:
        return _fail(name, f"{gpu_label(gpu)}: row remapping failed: the GPU has run out of spare rows; RMA it", **ev)
    if r.remap_pending or r.retired_pending:
        return _fail(
            name,
            f"{gpu_label(gpu)}: a page retirement / row remap is pending: reset the GPU (or reboot) to apply it",
            **ev,
        )
    if (r.retired_double_bit or 0) > 0 or (r.remapped_uncorrectable or 0) > 0:
        counts = f"{r.retired_double_bit or 0} double-bit retired pages, {r.remapped_uncorrectable or 0} rows remapped"
        return _fail(
            name,
            f"{gpu_label(gpu)}: {counts} for uncorrectable errors: the memory is degrading; watch it, RMA if it grows",
            **ev,
        )
    # Clean only when one mechanism is reported whole: page retirement (Pascal/Volta) or row remapping (Ampere+).
    pages = r.retired_double_bit == 0 and r.retired_pending is False
    rows = r.remapped_uncorrectable == 0 and r.remap_pending is False and r.remap_failure is False
    if not (pages or rows):
        return _skip(name, f"{gpu_label(gpu)}: page retirement / row remapping not reported by {source}", **ev)
    what = " and ".join(w for w, ok in (("no retired pages", pages), ("no remapped rows", rows)) if ok)
    return _ok(name, f"{gpu_label(gpu)}: {what}, none pending", **ev)


def persistence(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    name = f"health.persistence[{gpu.index}]"
    cls = product_class(gpu)
    if gpu.persistence_mode is None:
        return _skip(name, f"{gpu_label(gpu)}: persistence mode not reported by {source}")
    if not gpu.persistence_mode and cls != "data-centre":
        # A desktop's display server keeps the driver loaded; persistence matters on headless compute servers.
        return _skip(
            name,
            f"{gpu_label(gpu)}: persistence mode is off, usual on a {cls} card; on a headless compute server run "
            "`nvidia-persistenced` so jobs do not pay the driver's initialisation",
            persistence_mode=False,
            product_class=cls,
        )
    if not gpu.persistence_mode:
        return _fail(
            name,
            f"{gpu_label(gpu)}: persistence mode is off, so every new process pays the driver's initialisation "
            "(seconds) and clocks reset between jobs; run `nvidia-persistenced` (the driver role enables it)",
            persistence_mode=False,
        )
    return _ok(name, f"{gpu_label(gpu)}: persistence mode on", persistence_mode=True)


def idle_throttle(gpu: GpuInfo, source: str = LIVE_SOURCE) -> Check:
    """At idle, the only active clock-event reason should be `gpu_idle`: anything else caps clocks under load.

    Judged only on a GPU shown idle: under load a power cap is the GPU working as designed. A live reading
    (`source` NVML) is taken idle by the caller; a capture must show it (0 % utilisation, no compute process).
    """
    name = f"health.idle_throttle[{gpu.index}]"
    ev = {
        "active": gpu.throttle_reasons,
        "temperature_c": gpu.temperature_c,
        "power_w": gpu.power_draw_w,
        "utilization_gpu_pct": gpu.utilization_gpu_pct,
        "compute_processes": gpu.compute_processes,
    }
    if gpu.throttle_reasons is None:
        return _skip(name, f"{gpu_label(gpu)}: clock throttle reasons not reported by {source}", **ev)
    notice = whole_gpu_notice(gpu)
    if notice is not None:
        return _elsewhere(name, gpu, notice, **ev)
    bad = sorted(set(gpu.throttle_reasons) - BENIGN_IDLE_REASONS)
    if not bad:
        return _ok(name, f"{gpu_label(gpu)}: no clock throttling at idle", **ev)
    util, procs = gpu.utilization_gpu_pct, gpu.compute_processes
    if (util or 0) > 0 or (procs or 0) > 0:
        load = [f"{util:g} % utilised"] if util else []
        load += [f"{procs} compute process{'es' if procs != 1 else ''}"] if procs else []
        return _skip(
            name,
            f"{gpu_label(gpu)}: busy ({', '.join(load)}) when read, so {', '.join(bad)} is no idle throttling and "
            "cannot be judged here (a power cap under load is the GPU working as designed)",
            **ev,
        )
    if source != LIVE_SOURCE and util is None and "gpu_idle" not in gpu.throttle_reasons:
        return _skip(
            name, f"{gpu_label(gpu)}: utilisation not reported by {source}, so it does not show the GPU idle", **ev
        )
    notes: list[str] = []
    if "sw_power_cap" in bad:
        limit, default = gpu.power_limit_w, gpu.default_power_limit_w
        ev.update(power_limit_w=limit, default_power_limit_w=default, min_power_limit_w=gpu.min_power_limit_w)
        if limit is not None and default is not None and limit < default - 0.5:
            return _fail(
                name,
                f"{gpu_label(gpu)}: the power limit is {limit:g} W, below the board's default {default:g} W, and "
                f"the power cap holds its clocks at idle: someone lowered it (`nvidia-smi -i {gpu.index} -pl "
                f"{default:g}` restores it; check the node's provisioning and power-capping daemons)",
                **ev,
            )
        if limit is not None and default is not None:
            # Drivers flag the SW power cap at P8 idle with the default limit: a flag, not a cap on work.
            bad.remove("sw_power_cap")
            notes.append(f"SW power cap flagged at idle with the default limit {default:g} W: harmless")
        if not bad:
            return _ok(name, f"{gpu_label(gpu)}: no clock throttling at idle ({'; '.join(notes)})", **ev)
        if bad == ["sw_power_cap"]:
            return _skip(
                name,
                f"{gpu_label(gpu)}: SW power cap flagged at idle, but the power limit and the board's default are "
                f"not both reported by {source}, so the limit cannot be judged (`nvidia-smi -q -d POWER` shows both)",
                **ev,
            )
    fixes = {
        "hw_slowdown": "HW slowdown (power brake or over-temperature signal from the board): check PSU and cooling",
        "hw_thermal_slowdown": "HW thermal slowdown: check airflow, fans and the inlet temperature",
        "sw_thermal_slowdown": "SW thermal slowdown: the GPU is too hot even at idle; check cooling",
        "hw_power_brake_slowdown": "power brake asserted by the system: check PSU redundancy and the BMC logs",
        "sw_power_cap": "SW power cap at idle, and the default power limit is not reported to judge the limit "
        "against (`nvidia-smi -q -d POWER` shows both)",
        "sync_boost": "sync boost ties this GPU's clocks to another's: disable unless intended",
    }
    return _fail(
        name,
        f"{gpu_label(gpu)}: clocks throttled at idle by " + "; ".join(fixes.get(b, b) for b in bad),
        **ev,
    )


def framework_sees_gpus(fp: Fingerprint, framework: str, visible: int) -> Check:
    """A framework sees as many GPUs as NVML shows (after CUDA_VISIBLE_DEVICES)."""
    name = f"health.{framework}_sees_gpus"
    if fp.software.frameworks is None:
        return _skip(name, f"{framework} not captured by {reporter(fp)}")
    fw = next((f for f in fp.software.frameworks if f.name == framework), None)
    if fw is None:
        return _skip(name, f"{framework} is not installed")
    if fw.error:
        return _fail(name, f"{framework} could not be queried: {fw.error}")
    ev = {"version": fw.version, "built_cuda": fw.built_cuda, "sees": fw.sees_gpus, "visible": visible}
    if fw.sees_gpus is None:
        return _skip(name, f"{framework} {fw.version} did not report how many GPUs it sees", **ev)
    if fw.sees_gpus == visible:
        return _ok(name, f"{framework} {fw.version} sees {visible} GPUs", **ev)
    if not fw.built_cuda:
        cause = f"{framework} {fw.version} is a CPU-only build: install a CUDA build (`gpulab matrix plan` names it)"
    else:
        cause = (
            f"{framework} {fw.version} (built for CUDA {fw.built_cuda}) cannot use them: check the driver is new "
            "enough for that CUDA and the build ships kernels for this architecture (`gpulab matrix check`)"
        )
    return _fail(name, f"{framework} sees {fw.sees_gpus} of {visible} GPUs; {cause}", **ev)


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _major_minor(v: str) -> str:
    return ".".join(v.split(".")[:2])


def _release(v: str) -> str:
    """'2.11.0+cu130' -> '2.11'."""
    return _major_minor(v.split("+")[0])
