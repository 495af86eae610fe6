"""Read a captured `nvidia-smi -q -x` report into GpuInfo records.

The XML layout has moved between driver branches (ECC counters, throttle -> clock-event reasons); every
lookup tolerates a missing element and "N/A" so one capture format change never breaks the whole parse.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from gpulab.errors import GpulabError
from gpulab.names import Architecture
from gpulab.paths import CAPTURE_LIMIT, read_input_bytes
from gpulab.records import EccErrors, GpuInfo, MemoryRetirement, MigDevice, PcieLink

_FIX = "capture it with `nvidia-smi -q -x > FILE`"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_UNKNOWN = {
    "",
    "N/A",
    "[N/A]",
    "Unknown Error",
    "Not Supported",
    "[Not Supported]",
    "Requested functionality",
}

# XML tag suffix -> the short reason name shared with the NVML path (see nvml.THROTTLE_BITS).
_REASON_SUFFIXES = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "display_clocks_setting",
)


def normalise_bus_id(raw: str) -> str:
    """ "00000000:00:06.0" (nvidia-smi/NVML, 8-digit domain) -> "0000:00:06.0" (sysfs); lower-case hex."""
    raw = raw.strip().lower()
    m = re.fullmatch(r"(?:([0-9a-f]+):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])", raw)
    if not m:
        return raw
    domain = int(m.group(1) or "0", 16) & 0xFFFF  # sysfs shows 16 bits of domain
    return f"{domain:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def split_pci_id(raw: str | int | None) -> str | None:
    """ "233510DE" or 0x233510DE (device<<16 | vendor) -> "10de:2335"."""
    if raw is None:
        return None
    try:
        value = int(raw, 16) if isinstance(raw, str) else int(raw)
    except ValueError:
        return None
    return f"{value & 0xFFFF:04x}:{(value >> 16) & 0xFFFF:04x}"


def _text(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    if value in _UNKNOWN or value.startswith("Requested functionality"):
        return None
    return value


def _num(node: ET.Element | None, path: str) -> float | None:
    value = _text(node, path)
    if value is None:
        return None
    m = _NUMBER.search(value)
    return float(m.group()) if m else None


def _int(node: ET.Element | None, path: str) -> int | None:
    value = _num(node, path)
    return int(value) if value is not None else None


def _flag(node: ET.Element | None, path: str) -> bool | None:
    value = _text(node, path)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("enabled", "yes", "active", "on", "true"):
        return True
    if lowered in ("disabled", "no", "not active", "off", "false"):
        return False
    return None


def _sum(node: ET.Element | None, paths: tuple[str, ...]) -> int | None:
    """Sum counters that exist; None when none of them has a number (N/A everywhere)."""
    values = [v for v in (_int(node, p) for p in paths) if v is not None]
    return sum(values) if values else None


def _threshold(gpu: ET.Element, which: str) -> float | None:
    """The temperature at which the GPU slows down ("slow") or shuts down ("max"), in C.

    Ada and Blackwell boards on R535 and later drivers (captures/rtx-4090-tlimit.xml) give no absolute
    thresholds but margins to their T.Limit: <gpu_temp_tlimit> is how far below it the GPU runs now,
    <gpu_temp_slow_tlimit_threshold> (-2 C) and <gpu_temp_max_tlimit_threshold> (-7 C) how far beyond it each
    action starts. The absolute threshold is the temperature plus the margin left, less the action's margin.
    """
    absolute = _num(gpu, f"temperature/gpu_temp_{which}_threshold")
    if absolute is not None:
        return absolute
    temp = _num(gpu, "temperature/gpu_temp")
    margin = _num(gpu, "temperature/gpu_temp_tlimit")
    beyond = _num(gpu, f"temperature/gpu_temp_{which}_tlimit_threshold")
    if temp is None or margin is None or beyond is None:
        return None
    return temp + margin - beyond


def _ecc(gpu: ET.Element) -> EccErrors:
    errors = gpu.find("ecc_errors")
    out = EccErrors()
    if errors is None:
        return out
    for scope in ("volatile", "aggregate"):
        node = errors.find(scope)
        if node is None:
            continue
        if node.find("single_bit") is not None or node.find("double_bit") is not None:
            # Older drivers: <single_bit><total>, <double_bit><total>.
            corrected = _int(node, "single_bit/total")
            uncorrected = _int(node, "double_bit/total")
        else:
            # Newer drivers split SRAM and DRAM counters; the board's totals are the sums.
            corrected = _sum(node, ("sram_correctable", "dram_correctable"))
            uncorrected = _sum(
                node,
                (
                    "sram_uncorrectable",
                    "sram_uncorrectable_parity",
                    "sram_uncorrectable_secded",
                    "dram_uncorrectable",
                ),
            )
        setattr(out, f"{scope}_corrected", corrected)
        setattr(out, f"{scope}_uncorrected", uncorrected)
    return out


def _retirement(gpu: ET.Element) -> MemoryRetirement:
    pages = gpu.find("retired_pages")
    rows = gpu.find("remapped_rows")
    pending = _flag(pages, "pending_retirement")
    if pending is None:
        pending = _flag(pages, "pending_blacklist")
    return MemoryRetirement(
        retired_single_bit=_int(pages, "multiple_single_bit_retirement/retired_count"),
        retired_double_bit=_int(pages, "double_bit_retirement/retired_count"),
        retired_pending=pending,
        remapped_correctable=_int(rows, "remapped_row_corr"),
        remapped_uncorrectable=_int(rows, "remapped_row_unc"),
        remap_pending=_flag(rows, "remapped_row_pending"),
        remap_failure=_flag(rows, "remapped_row_failure"),
    )


def _reasons(gpu: ET.Element) -> list[str] | None:
    """Active clock-event reasons; None when the capture states none of them (block absent or all N/A)."""
    # Driver 535+ says clocks_event_reasons; older ones clocks_throttle_reasons / clocks_throttle_reason_*.
    for block, prefixes in (
        ("clocks_event_reasons", ("clocks_event_reason_",)),
        ("clocks_throttle_reasons", ("clocks_throttle_reason_", "clocks_event_reason_")),
    ):
        node = gpu.find(block)
        if node is None:
            continue
        active: list[str] = []
        stated = False
        for child in node:
            name = child.tag
            for prefix in prefixes:
                if name.startswith(prefix):
                    name = name[len(prefix) :]
                    break
            state = (child.text or "").strip()
            if name == "unknown" or state not in ("Active", "Not Active"):
                continue
            stated = True
            if state != "Active":
                continue
            if name == "user_defined_clocks":  # pre-R450 name of applications_clocks_setting
                name = "applications_clocks_setting"
            active.append(name)
        if not stated:
            return None  # an empty list would read as "nothing throttles"
        return sorted(active, key=lambda n: (*_REASON_SUFFIXES, n).index(n))
    return None


def _mig_devices(gpu: ET.Element) -> list[MigDevice]:
    out = []
    for i, node in enumerate(gpu.findall("mig_devices/mig_device")):
        index = _int(node, "index")
        out.append(
            MigDevice(
                index=index if index is not None else i,
                gpu_instance_id=_int(node, "gpu_instance_id"),
                compute_instance_id=_int(node, "compute_instance_id"),
                multiprocessor_count=_int(node, "device_attributes/shared/multiprocessor_count"),
                memory_total_mib=_int(node, "fb_memory_usage/total"),
            )
        )
    return out


def process_type(gpu: ET.Element, info: ET.Element) -> str:
    """A listed process's type: C (compute), G (graphics), C+G, M or M+C (MPS); C where the schema gives none
    (drivers before ~R384 list compute processes only).

    Under Windows' WDDM driver model every program that draws through DirectX is listed C+G (the desktop shell,
    browsers, chat clients) while a CUDA program is listed C: there C+G is read as G, a graphics client.
    """
    kind = (_text(info, "type") or "C").upper()
    if kind == "C+G" and (_text(gpu, "driver_model/current_dm") or "").upper() == "WDDM":
        return "G"
    return kind


def _compute_processes(gpu: ET.Element) -> int | None:
    """Running compute processes (type C or C+G; a display server's G alone keeps no GPU busy); None when the
    capture has no <processes> block or says N/A (MIG, vGPU)."""
    node = gpu.find("processes")
    if node is None:
        node = gpu.find("compute_processes")  # drivers before ~R384 list only compute processes, untyped
    if node is None:
        return None
    found = node.findall("process_info")
    if found:
        return sum(1 for p in found if "C" in process_type(gpu, p))
    text = (node.text or "").strip()
    return None if text and text in _UNKNOWN else 0  # an empty block means none run


def _virtualization(gpu: ET.Element) -> str | None:
    # Spelled <gpu_virtualization_mode><virtualization_mode> by current drivers; capitalised by some vGPU builds.
    for path in (
        "gpu_virtualization_mode/virtualization_mode",
        "GPU_Virtualization_Mode/Virtualization_Mode",
        "GPU_Virtualization_Mode/virtualization_mode",
    ):
        value = _text(gpu, path)
        if value is not None:
            return value
    return None


def _gpu(index: int, gpu: ET.Element) -> GpuInfo:
    pci = gpu.find("pci")
    bus_raw = _text(pci, "pci_bus_id") or gpu.get("id") or ""
    link = pci.find("pci_gpu_link_info") if pci is not None else None
    power = gpu.find("gpu_power_readings")
    if power is None:
        power = gpu.find("power_readings")  # pre-R530 name
    draw = _num(power, "instant_power_draw")
    if draw is None:
        draw = _num(power, "power_draw")
    if draw is None:
        draw = _num(power, "average_power_draw")
    # Drivers before ~R304 wrote <memory_usage> in "MB" (mebibytes, as nvidia-smi counted them then).
    memory = "fb_memory_usage" if gpu.find("fb_memory_usage") is not None else "memory_usage"
    limit = _num(power, "current_power_limit")
    if limit is None:
        limit = _num(power, "enforced_power_limit")
    if limit is None:
        limit = _num(power, "power_limit")
    return GpuInfo(
        index=index,
        name=_text(gpu, "product_name") or "unknown",
        uuid=_text(gpu, "uuid") or "",
        bus_id=normalise_bus_id(bus_raw),
        pci_device_id=split_pci_id(_text(pci, "pci_device_id")) or "",
        pci_subsystem_id=split_pci_id(_text(pci, "pci_sub_system_id")),
        architecture=Architecture.parse_reported(arch) if (arch := _text(gpu, "product_architecture")) else None,
        pcie=PcieLink(
            gen_current=_int(link, "pcie_gen/current_link_gen"),
            gen_max=_int(link, "pcie_gen/max_link_gen"),
            width_current=_int(link, "link_widths/current_link_width"),
            width_max=_int(link, "link_widths/max_link_width"),
            gen_host_max=_int(link, "pcie_gen/max_host_link_gen"),
        ),
        memory_total_mib=_int(gpu, f"{memory}/total"),
        memory_used_mib=_int(gpu, f"{memory}/used"),
        ecc_enabled=_flag(gpu, "ecc_mode/current_ecc"),
        ecc_errors=_ecc(gpu),
        retirement=_retirement(gpu),
        persistence_mode=_flag(gpu, "persistence_mode"),
        virtualization_mode=_virtualization(gpu),
        vbios_version=_text(gpu, "vbios_version"),
        performance_state=_text(gpu, "performance_state"),
        sm_clock_mhz=_int(gpu, "clocks/sm_clock"),
        mem_clock_mhz=_int(gpu, "clocks/mem_clock"),
        max_sm_clock_mhz=_int(gpu, "max_clocks/sm_clock"),
        max_mem_clock_mhz=_int(gpu, "max_clocks/mem_clock"),
        throttle_reasons=_reasons(gpu),
        temperature_c=_num(gpu, "temperature/gpu_temp"),
        power_draw_w=draw,
        power_limit_w=limit,
        default_power_limit_w=_num(power, "default_power_limit"),
        min_power_limit_w=_num(power, "min_power_limit"),
        temp_slowdown_c=_threshold(gpu, "slow"),
        temp_shutdown_c=_threshold(gpu, "max"),
        pcie_replays=_int(pci, "replay_counter"),
        pcie_replay_rollovers=_int(pci, "replay_rollover_counter"),
        product_brand=_text(gpu, "product_brand"),
        utilization_gpu_pct=_num(gpu, "utilization/gpu_util"),
        compute_processes=_compute_processes(gpu),
        mig_enabled=_flag(gpu, "mig_mode/current_mig"),
        mig_devices=_mig_devices(gpu),
        vgpu_licensed_product=_text(gpu, "vgpu_software_licensed_product/licensed_product_name"),
    )


# No GPU reports these: a GPU shuts itself down near 100 C, and utilisation is a share of time.
MAX_PLAUSIBLE_TEMP_C = 150.0
MAX_UTILISATION_PCT = 100.0


def _impossible(gpu: GpuInfo) -> str | None:
    """The first value no working GPU reports, as words; None when every value is plausible."""
    if gpu.temperature_c is not None and not -40 <= gpu.temperature_c <= MAX_PLAUSIBLE_TEMP_C:
        return f"a temperature of {gpu.temperature_c:g} C (above {MAX_PLAUSIBLE_TEMP_C:g} C)"
    if gpu.utilization_gpu_pct is not None and gpu.utilization_gpu_pct > MAX_UTILISATION_PCT:
        return f"{gpu.utilization_gpu_pct:g} % utilisation (above 100 %)"
    return None


@dataclass
class SmiCapture:
    driver_version: str | None
    cuda_version: str | None
    gpus: list[GpuInfo]
    # The host's <attached_gpus> when the capture holds fewer GPUs (`nvidia-smi -q -x -i N`); None otherwise.
    attached_gpus: int | None = None


def parse_capture_text(text: str, source: str = "<string>") -> SmiCapture:
    """Parse XML text; `source` names it in errors."""
    try:
        # The DOCTYPE names an external DTD; ElementTree never fetches it.
        root = ET.fromstring(text)
    except ET.ParseError as err:
        raise GpulabError(f"{source}: not valid nvidia-smi XML ({err}; truncated?); {_FIX}") from err
    if root.tag != "nvidia_smi_log":
        raise GpulabError(f"{source}: not an nvidia-smi report (root <{root.tag}>, expected <nvidia_smi_log>); {_FIX}")
    gpus = [_gpu(i, node) for i, node in enumerate(root.findall("gpu"))]
    attached = _int(root, "attached_gpus")
    # `-i N` keeps the host's count beside the GPUs it was asked for, and the file still closes properly (a cut
    # file does not parse). Attached GPUs but no <gpu> section is no capture nvidia-smi writes. More sections
    # than attached is: captures concatenated, or a count taken before a GPU came up; the sections are judged.
    if attached and not gpus:
        raise GpulabError(f"{source}: says {attached} GPUs attached but holds 0 <gpu> entries; {_FIX}")
    for gpu in gpus:
        if not gpu.uuid or not gpu.bus_id:
            raise GpulabError(f"{source}: GPU {gpu.index} has no uuid or PCI bus id; {_FIX}")
        corrupt = _impossible(gpu)
        if corrupt:
            raise GpulabError(
                f"{source}: GPU {gpu.index} reports {corrupt}, which no GPU reports: a corrupt capture; "
                f"capture it again with `nvidia-smi -q -x > FILE`, and if the value recurs, the GPU's sensors or "
                "driver are faulty (`dmesg | grep -i nvrm`)"
            )
    partial = attached if attached is not None and attached > len(gpus) else None
    return SmiCapture(_text(root, "driver_version"), _text(root, "cuda_version"), gpus, partial)


def read_capture(path: Path) -> SmiCapture:
    """Parse a `nvidia-smi -q -x` capture file."""
    # nvidia-smi writes UTF-8; a stray byte in a product string is replaced rather than refusing the capture
    text = read_input_bytes(path, "nvidia-smi XML", _FIX, limit=CAPTURE_LIMIT).decode("utf-8", errors="replace")
    return parse_capture_text(text, str(path))


def parse_smi_xml_text(text: str, source: str = "<string>") -> tuple[str | None, str | None, list[GpuInfo]]:
    """Parse XML text; `source` names it in errors. Returns (driver_version, cuda_version, gpus)."""
    cap = parse_capture_text(text, source)
    return cap.driver_version, cap.cuda_version, cap.gpus


def parse_smi_xml(path: Path) -> tuple[str | None, str | None, list[GpuInfo]]:
    """Parse a `nvidia-smi -q -x` capture file. Returns (driver_version, cuda_version, gpus)."""
    cap = read_capture(path)
    return cap.driver_version, cap.cuda_version, cap.gpus
