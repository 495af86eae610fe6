"""Health verdicts over a host fingerprint: each function returns one Check whose message names cause and fix.

Pure functions of the Fingerprint (plus what the caller expects), so they run on captured fixtures in CI and
on live NVML data in validate/.
"""

from __future__ import annotations

from gpulab import compat
from gpulab.hw.model import Fingerprint, GpuInfo, PcieLink
from gpulab.report.model import Check

# Clock-event reasons that are expected and harmless on an idle GPU.
BENIGN_IDLE_REASONS = frozenset({"gpu_idle", "applications_clocks_setting", "display_clocks_setting"})


def _ok(name: str, message: str, **evidence: object) -> Check:
    return Check(name=name, status="pass", message=message, evidence=dict(evidence))


def _fail(name: str, message: str, **evidence: object) -> Check:
    return Check(name=name, status="fail", message=message, evidence=dict(evidence))


def _skip(name: str, message: str, **evidence: object) -> Check:
    return Check(name=name, status="skip", message=message, evidence=dict(evidence))


def gpu_label(gpu: GpuInfo) -> str:
    return f"GPU {gpu.index} ({gpu.name}, {gpu.bus_id})"


def gpu_count(fp: Fingerprint, expected: int | None, on_pci_bus: int | None = None) -> Check:
    """NVML sees the number of GPUs the inventory promises, and every NVIDIA GPU on the PCI bus."""
    found = len(fp.gpus)
    ev = {"found": found, "expected": expected, "on_pci_bus": on_pci_bus}
    if expected is not None and found != expected:
        hint = (
            f"{on_pci_bus} are on the PCI bus, so the driver did not bring up the rest: see `dmesg | grep -i nvrm`"
            if on_pci_bus is not None and on_pci_bus > found
            else "check that every card is seated and powered, and for a VM that every GPU is passed through"
        )
        return _fail("health.gpu_count", f"expected {expected} GPUs, NVML sees {found}; {hint}", **ev)
    if on_pci_bus is not None and on_pci_bus > found:
        return _fail(
            "health.gpu_count",
            f"{on_pci_bus} NVIDIA GPUs on the PCI bus but NVML sees {found}: the driver failed on some of them "
            "(see `dmesg | grep -i nvrm`; a GPU bound to vfio-pci is expected only on a VM host)",
            **ev,
        )
    return _ok("health.gpu_count", f"{found} GPUs visible to NVML", **ev)


def driver_supports_cuda(fp: Fingerprint) -> Check:
    """The driver is new enough for every CUDA the host uses: the frameworks' builds and the toolkits."""
    driver = fp.software.driver_version
    name = "health.driver_for_cuda"
    if not driver:
        return _skip(name, "no NVIDIA driver found")
    needs: dict[str, str] = {}
    for fw in fp.software.frameworks:
        if fw.built_cuda:
            needs[f"{fw.name} {fw.version}"] = fw.built_cuda
    for tk in fp.software.toolkits:
        if tk.get("version"):
            needs[f"CUDA toolkit at {tk.get('path', '?')}"] = tk["version"]
    if not needs:
        return _skip(name, "no CUDA build of a framework and no CUDA toolkit found to check the driver against")
    problems = []
    for who, cuda in sorted(needs.items()):
        minimum = compat.min_driver_for_cuda(_major_minor(cuda))
        if _version_tuple(driver) < _version_tuple(minimum):
            problems.append(f"{who} needs CUDA {cuda}, which needs driver >= {minimum}")
    if problems:
        return _fail(
            name,
            f"driver {driver} is too old: " + "; ".join(problems) + ". Fix: install a newer driver branch "
            "(`gpulab matrix plan --gpu <model>` names one) or use framework builds for an older CUDA",
            driver=driver,
            needs=needs,
        )
    return _ok(
        name,
        f"driver {driver} supports " + ", ".join(f"{k} (CUDA {v})" for k, v in needs.items()),
        driver=driver,
    )


def stack_supports_gpus(fp: Fingerprint) -> Check:
    """The driver, CUDA, cuDNN and framework builds all support each GPU model's architecture (the matrix)."""
    name = "health.stack_supports_arch"
    if not fp.gpus:
        return _skip(name, fp.gpu_absent_reason or "no GPU")
    torch = next((fw for fw in fp.software.frameworks if fw.name == "torch" and not fw.error), None)
    tf = next((fw for fw in fp.software.frameworks if fw.name == "tensorflow" and not fw.error), None)
    cuda = (torch.built_cuda if torch else None) or (tf.built_cuda if tf else None)
    issues: list[str] = []
    stacks: dict[str, dict[str, str | None]] = {}
    for model in sorted({g.name for g in fp.gpus}):
        stack = compat.Stack(
            gpu=model,
            driver=fp.software.driver_version,
            cuda=_major_minor(cuda) if cuda else None,
            cudnn=_major_minor(fp.software.cudnn_version) if fp.software.cudnn_version else None,
            torch=_release(torch.version) if torch else None,
            tensorflow=_release(tf.version) if tf else None,
        )
        stacks[model] = {k: v for k, v in vars(stack).items() if v}
        issues += [f"{model}: {i.component}: {i.reason} Fix: {i.fix}" for i in compat.check_stack(stack)]
    if issues:
        return _fail(name, "; ".join(issues), stacks=stacks)
    return _ok(name, "every GPU's architecture is supported by the installed stack", stacks=stacks)


def pcie_link(gpu: GpuInfo, under_load: PcieLink | None = None) -> Check:
    """The link trains to its maximum generation and width.

    GPUs drop the link generation at idle to save power, so a low idle generation is judged again under load
    (`under_load`, read while the GPU is busy) before it counts as a failure.
    """
    name = f"health.pcie_link[{gpu.index}]"
    link = under_load if (gpu.pcie.at_max is False and under_load is not None) else gpu.pcie
    ev = {"idle": str(gpu.pcie), "under_load": str(under_load) if under_load else None, "bus_id": gpu.bus_id}
    if link.at_max is None:
        return _skip(name, f"{gpu_label(gpu)}: the driver does not report the PCIe link", **ev)
    if link.at_max:
        return _ok(name, f"{gpu_label(gpu)}: PCIe {link}", **ev)
    causes = []
    if link.width_current is not None and link.width_max is not None and link.width_current < link.width_max:
        causes.append(
            f"width x{link.width_current} of x{link.width_max}: the card sits in a narrower slot, a riser or "
            "bifurcation splits the lanes, or the slot is shared; move it to a full x16 slot"
        )
    if link.gen_current is not None and link.gen_max is not None and link.gen_current < link.gen_max:
        causes.append(
            f"gen{link.gen_current} of gen{link.gen_max} even under load: check the BIOS PCIe speed setting, the "
            "riser/retimer, and `lspci -vv` LnkSta for the upstream port"
        )
    return _fail(name, f"{gpu_label(gpu)}: PCIe link below its maximum ({link}): " + "; ".join(causes), **ev)


def ecc(gpu: GpuInfo) -> Check:
    name = f"health.ecc[{gpu.index}]"
    e = gpu.ecc_errors
    ev = {"enabled": gpu.ecc_enabled, **vars(e)}
    if gpu.ecc_enabled is None:
        return _skip(name, f"{gpu_label(gpu)}: ECC not supported on this GPU", **ev)
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
    return _ok(name, f"{gpu_label(gpu)}: ECC on, no uncorrectable errors", **ev)


def memory_retirement(gpu: GpuInfo) -> Check:
    name = f"health.memory_retirement[{gpu.index}]"
    r = gpu.retirement
    ev = dict(vars(r))
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
    if all(v is None for v in ev.values()):
        return _skip(name, f"{gpu_label(gpu)}: page retirement / row remapping not reported", **ev)
    return _ok(name, f"{gpu_label(gpu)}: no retired pages or remapped rows pending", **ev)


def persistence(gpu: GpuInfo) -> Check:
    name = f"health.persistence[{gpu.index}]"
    if gpu.persistence_mode is None:
        return _skip(name, f"{gpu_label(gpu)}: persistence mode not reported")
    if not gpu.persistence_mode:
        return _fail(
            name,
            f"{gpu_label(gpu)}: persistence mode is off, so every new process pays the driver's initialisation "
            "(seconds) and clocks reset between jobs; run `nvidia-persistenced` (the driver role enables it)",
            persistence_mode=False,
        )
    return _ok(name, f"{gpu_label(gpu)}: persistence mode on", persistence_mode=True)


def idle_throttle(gpu: GpuInfo) -> Check:
    """At idle, the only active clock-event reason should be `gpu_idle`: anything else caps clocks under load."""
    name = f"health.idle_throttle[{gpu.index}]"
    bad = sorted(set(gpu.throttle_reasons) - BENIGN_IDLE_REASONS)
    ev = {"active": gpu.throttle_reasons, "temperature_c": gpu.temperature_c, "power_w": gpu.power_draw_w}
    if not bad:
        return _ok(name, f"{gpu_label(gpu)}: no clock throttling at idle", **ev)
    fixes = {
        "hw_slowdown": "HW slowdown (power brake or over-temperature signal from the board): check PSU and cooling",
        "hw_thermal_slowdown": "HW thermal slowdown: check airflow, fans and the inlet temperature",
        "sw_thermal_slowdown": "SW thermal slowdown: the GPU is too hot even at idle; check cooling",
        "hw_power_brake_slowdown": "power brake asserted by the system: check PSU redundancy and the BMC logs",
        "sw_power_cap": "power cap reached at idle: the power limit is set far too low (`nvidia-smi -q -d POWER`)",
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
    fw = next((f for f in fp.software.frameworks if f.name == framework), None)
    if fw is None:
        return _skip(name, f"{framework} is not installed")
    if fw.error:
        return _fail(name, f"{framework} could not be queried: {fw.error}")
    ev = {"version": fw.version, "built_cuda": fw.built_cuda, "sees": fw.sees_gpus, "visible": visible}
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
