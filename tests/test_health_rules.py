"""Each capture-judging rule on its own: product class, idle links, load, per-GPU captures, MIG, vGPU, PCI ids,
the driver against today's builds."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from capture_edits import H200_XML, with_versions, write
from gpulab import compat
from gpulab.checks import health
from gpulab.errors import GpulabError
from gpulab.hw.discover import fingerprint
from gpulab.hw.smi.xml import parse_capture_text
from gpulab.records import Check, EccErrors, Fingerprint, GpuInfo, MigDevice, PcieLink

CAPTURES = Path(__file__).parent / "fixtures" / "captures"
T4 = CAPTURES / "t4-passthrough.xml"
CAP = "the capture x.xml"


def _gpu(**kw: object) -> GpuInfo:
    base = GpuInfo(index=0, name="NVIDIA H200", uuid="GPU-1", bus_id="0000:00:06.0", pci_device_id="10de:2335")
    return dataclasses.replace(base, **kw)


def _captured(tmp_path: Path, xml: str) -> Fingerprint:
    return fingerprint(smi_xml=write(tmp_path / "x.xml", xml), probe_frameworks=False)


# --- product class ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "brand", "status"),
    [
        ("NVIDIA GeForce RTX 4090", "GeForce", "skip"),
        ("NVIDIA RTX A6000", "NVIDIA RTX", "skip"),
        ("NVIDIA RTX 6000 Ada Generation", None, "skip"),
        ("Graphics Device", "GeForce", "skip"),  # the brand tells what the name does not
        ("NVIDIA H200", "NVIDIA", "fail"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA RTX", "fail"),
    ],
)
def test_ecc_off_is_judged_by_product_class(name, brand, status):
    check = health.ecc(_gpu(name=name, product_brand=brand, pci_device_id="", ecc_enabled=False))
    assert check.status == status
    if status == "skip":
        assert "ECC is off, as" in check.message and "cards ship" in check.message


def test_consumer_without_ecc_says_so_and_errors_still_fail():
    consumer = _gpu(name="NVIDIA GeForce RTX 3060", pci_device_id="10de:2487")
    assert "a consumer card has no ECC" in health.ecc(consumer, CAP).message
    broken = _gpu(name="NVIDIA RTX A5000", ecc_enabled=True, ecc_errors=EccErrors(volatile_uncorrected=2))
    assert health.ecc(broken).status == "fail"  # a workstation card with ECC on and errors is still a fault


def test_persistence_off_fails_only_on_data_centre_cards():
    assert health.persistence(_gpu(persistence_mode=False)).status == "fail"
    check = health.persistence(_gpu(name="NVIDIA GeForce RTX 3080", pci_device_id="", persistence_mode=False))
    assert check.status == "skip" and "usual on a consumer card" in check.message
    work = _gpu(name="NVIDIA RTX A5000", pci_device_id="", persistence_mode=False)
    assert "usual on a workstation card" in health.persistence(work).message


# --- PCIe link at idle --------------------------------------------------------------------------------


def test_link_trained_down_in_idle_state_is_not_failed_without_a_load_reading():
    idle = _gpu(pcie=PcieLink(1, 4, 8, 16), performance_state="P8", throttle_reasons=["gpu_idle"])
    check = health.pcie_link(idle, None, CAP)
    assert check.status == "skip"
    assert "in idle state P8, and no reading under load" in check.message and "even under load" not in check.message
    # Read under load it is judged: a narrow link then is a fault.
    loaded = health.pcie_link(idle, PcieLink(4, 4, 8, 16))
    assert loaded.status == "fail" and "x8 of x16" in loaded.message
    # Out of an idle state a narrow link is what the slot gives.
    assert health.pcie_link(dataclasses.replace(idle, performance_state="P0"), None, CAP).status == "fail"
    # Speed alone at idle was never failed without a load reading.
    slow = health.pcie_link(_gpu(pcie=PcieLink(1, 4, 16, 16), performance_state="P8"), None, CAP)
    assert slow.status == "skip" and "even under load" not in slow.message


# --- idle throttling needs an idle GPU ----------------------------------------------------------------


def test_power_cap_under_load_is_not_idle_throttling():
    busy = _gpu(throttle_reasons=["sw_power_cap"], utilization_gpu_pct=91.0, compute_processes=1)
    check = health.idle_throttle(busy, CAP)
    assert check.status == "skip" and "busy (91 % utilised, 1 compute process)" in check.message
    held = _gpu(throttle_reasons=["sw_power_cap"], utilization_gpu_pct=0.0, compute_processes=2)
    assert "busy (2 compute processes)" in health.idle_throttle(held, CAP).message
    idle = _gpu(throttle_reasons=["sw_power_cap"], utilization_gpu_pct=0.0, compute_processes=0)
    # Idle: judged by the limit against the board's default, and not judged when either is unknown.
    assert health.idle_throttle(idle, CAP).status == "skip"
    lowered = dataclasses.replace(idle, power_limit_w=400.0, default_power_limit_w=700.0)
    failed = health.idle_throttle(lowered, CAP)
    assert failed.status == "fail" and "the power limit is 400 W, below the board's default 700 W" in failed.message
    default = dataclasses.replace(idle, power_limit_w=700.0, default_power_limit_w=700.0)
    harmless = health.idle_throttle(default, CAP)
    assert harmless.status == "pass" and "harmless" in harmless.message


def test_capture_that_does_not_show_the_gpu_idle_is_not_judged():
    unknown = _gpu(throttle_reasons=["sw_power_cap"])  # no utilisation, no gpu_idle reason
    check = health.idle_throttle(unknown, CAP)
    assert check.status == "skip" and "does not show the GPU idle" in check.message
    # A live reading is taken idle by its caller, as before: hardware slowdown at idle fails.
    assert health.idle_throttle(_gpu(throttle_reasons=["hw_slowdown"])).status == "fail"
    # Nothing but benign reasons passes whatever the load.
    assert health.idle_throttle(_gpu(throttle_reasons=[], utilization_gpu_pct=65.0), CAP).status == "pass"


# --- per-GPU capture ----------------------------------------------------------------------------------


def _keep_gpus(xml: str, keep: int) -> str:
    """The capture with only its first `keep` <gpu> sections, as `nvidia-smi -q -x -i 0[,1...]` writes it."""
    starts = [m.start() for m in re.finditer(r"<gpu id=", xml)]
    end = xml.rindex("</gpu>") + len("</gpu>")
    return xml[: starts[keep]] + xml[end:] if keep < len(starts) else xml


def test_per_gpu_capture_is_accepted_and_said(tmp_path):
    fp = _captured(tmp_path, _keep_gpus(H200_XML.read_text(), 1))
    assert len(fp.gpus) == 1 and fp.capture_attached_gpus == 4
    check = health.gpu_count(fp, None)
    assert check.status == "skip" and "holds 1 of the host's 4 GPUs" in check.message
    assert health.gpu_count(fp, 4).status == "pass"
    whole = _captured(tmp_path, H200_XML.read_text())
    assert whole.capture_attached_gpus is None


def test_capture_with_no_gpu_section_is_still_refused():
    xml = _keep_gpus(H200_XML.read_text(), 0)
    with pytest.raises(GpulabError, match="4 GPUs attached but holds 0"):
        parse_capture_text(xml, "x.xml")


# --- MIG ----------------------------------------------------------------------------------------------


def test_mig_helper_and_whole_gpu_notice():
    plain = _gpu(mig_enabled=False)
    assert not health.mig_enabled(plain) and health.whole_gpu_notice(plain) is None
    assert health.whole_gpu(plain).status == "pass"
    mig = _gpu(mig_enabled=True, mig_devices=[MigDevice(0, 1, 0, 14, 9856), MigDevice(1, 2, 0, 14, 9856)])
    check = health.whole_gpu(mig)
    assert check.status == "skip"
    assert "MIG is enabled with 2 MIG instances (9856 MiB, 9856 MiB)" in check.message
    assert "`nvidia-smi -i 0 -mig 0`" in check.message
    assert health.idle_throttle(dataclasses.replace(mig, throttle_reasons=["sw_power_cap"])).status == "skip"


# --- vGPU ---------------------------------------------------------------------------------------------


def _as_vgpu(xml: str, tag: str = "gpu_virtualization_mode", mode_tag: str = "virtualization_mode") -> str:
    """The T4 capture as a vGPU guest shows it: a profile name, VGPU mode and a licence block."""
    xml = xml.replace("<product_name>Tesla T4</product_name>", "<product_name>GRID T4-4Q</product_name>")
    xml = re.sub(
        r"<gpu_virtualization_mode>.*?</gpu_virtualization_mode>",
        f"<{tag}><{mode_tag}>VGPU</{mode_tag}></{tag}>",
        xml,
        flags=re.S,
    )
    licence = (
        "<vgpu_software_licensed_product><licensed_product_name>NVIDIA RTX Virtual Workstation"
        "</licensed_product_name><license_status>Licensed</license_status></vgpu_software_licensed_product>"
    )
    return xml.replace("</product_name>", "</product_name>" + licence, 1)


@pytest.mark.parametrize(
    ("tag", "mode_tag"),
    [("gpu_virtualization_mode", "virtualization_mode"), ("GPU_Virtualization_Mode", "Virtualization_Mode")],
)
def test_vgpu_slice_is_recorded_and_judged_on_what_a_guest_sees(tmp_path, tag, mode_tag):
    gpu = _captured(tmp_path, _as_vgpu(T4.read_text(), tag, mode_tag)).gpus[0]
    assert gpu.virtualization_mode == "VGPU" and gpu.vgpu_licensed_product == "NVIDIA RTX Virtual Workstation"
    assert health.vgpu_slice(gpu)
    for check in (health.ecc(gpu, CAP), health.memory_retirement(gpu, CAP), health.pcie_link(gpu, None, CAP)):
        assert check.status == "skip" and "vGPU guest" in check.message and "judge it on the host" in check.message
    whole = health.whole_gpu(gpu)
    assert whole.status == "skip" and "licensed as NVIDIA RTX Virtual Workstation" in whole.message


def test_vgpu_profile_name_alone_marks_a_slice():
    assert health.vgpu_slice(_gpu(name="NVIDIA L40S-2Q"))
    assert not health.vgpu_slice(_gpu(name="NVIDIA A100-SXM4-80GB"))
    assert not health.vgpu_slice(_gpu(name="NVIDIA L40S-2Q", virtualization_mode="Pass-Through"))


# --- identity: PCI id, unknown GPUs -------------------------------------------------------------------


def test_graphics_device_is_resolved_from_its_pci_id(tmp_path):
    name = "<product_name>Graphics Device</product_name>"
    xml = T4.read_text().replace("<product_name>Tesla T4</product_name>", name)
    xml = re.sub(r"<product_architecture>[^<]*</product_architecture>", "", xml)
    gpu = _captured(tmp_path, xml).gpus[0]
    assert gpu.name == "Graphics Device" and gpu.pci_device_id == "10de:1eb8"
    assert (gpu.matrix_name, gpu.architecture, gpu.compute_capability) == ("Tesla T4", "Turing", "7.5")


def _unknown(xml: str, arch: str | None) -> str:
    xml = xml.replace("<product_name>Tesla T4</product_name>", "<product_name>NVIDIA Imaginary X1</product_name>")
    xml = xml.replace("1EB810DE", "FFF010DE")
    replacement = f"<product_architecture>{arch}</product_architecture>" if arch else ""
    return re.sub(r"<product_architecture>[^<]*</product_architecture>", replacement, xml)


def test_unknown_gpu_is_judged_on_its_reported_architecture(tmp_path):
    fp = _captured(tmp_path, _unknown(with_versions(T4.read_text(), "580.95.05", "13.0"), "Turing"))
    gpu = fp.gpus[0]
    assert gpu.matrix_name is None and (gpu.architecture, gpu.compute_capability) == ("Turing", "7.5")
    check = health.stack_supports_arch(fp)
    assert check.status == "pass" and "NVIDIA Imaginary X1 (not in the matrix)" in check.message
    # The same board on a driver branch without its architecture fails on what is known.
    newer = _captured(tmp_path, _unknown(T4.read_text(), "Blackwell"))
    failed = health.stack_supports_arch(newer)
    assert failed.status == "fail" and "does not support Blackwell" in failed.message
    # Its other checks run as for any GPU: nothing needs the matrix.
    assert health.ecc(gpu, CAP).status == "pass"


def test_unknown_gpu_without_architecture_skips_spec_checks_with_one_line(tmp_path):
    fp = _captured(tmp_path, _unknown(T4.read_text(), None))
    assert fp.gpus[0].architecture is None and fp.gpus[0].compute_capability is None
    check = health.stack_supports_arch(fp)
    assert check.status == "skip"
    assert (
        "GPU NVIDIA Imaginary X1 (PCI id 10de:fff0; not in the compatibility matrix; architecture and compute "
        "capability not "
        "reported: spec-based checks skipped)" in check.message
    )


# --- the driver against today's builds ----------------------------------------------------------------

P100 = CAPTURES / "p100-passthrough-driver510.xml"
H100 = CAPTURES.parent / "h100x1-firecracker" / "nvidia-smi-q-x.xml"


def _stack_on(tmp_path: Path, xml: str, driver: str, cuda: str) -> Check:
    return health.stack_supports_arch(_captured(tmp_path, with_versions(xml, driver, cuda)))


def _k80(xml: str) -> str:
    """The T4 capture as a Tesla K80 (GK210, compute capability 3.7), a board the matrix does not list."""
    xml = xml.replace("<product_name>Tesla T4</product_name>", "<product_name>Tesla K80</product_name>")
    xml = xml.replace("1EB810DE", "102D10DE")
    return re.sub(r"<product_architecture>[^<]*</product_architecture>", "", xml)


def test_pascal_on_a_2019_driver_fails_naming_the_newest_stack(tmp_path):
    check = _stack_on(tmp_path, P100.read_text(), "418.87", "10.1")
    assert check.status == "fail"
    facts = check.evidence["driver_too_old"]["Tesla P100-PCIE-16GB"]
    assert (facts["driver_branch"], facts["max_cuda"], facts["architecture"]) == ("R418", "10.1", "Pascal")
    need = facts["needs"]
    # Today's PyTorch for Pascal is a CUDA 12 build, run from the CUDA 12 minor-version-compatibility floor on.
    assert need["framework"] == "PyTorch" and need["cuda"].startswith("12.")
    assert need["min_driver"] == compat.min_driver_for_cuda(need["cuda"], minor_compat=True)
    plan = compat.plan_stack("Tesla P100-PCIE-16GB")
    newest = facts["newest_stack"]
    assert (newest["driver"], newest["cuda"], newest["cudnn"], newest["torch"]) == (
        plan.driver,
        plan.cuda,
        plan.cudnn,
        plan.torch,
    )
    for fact in ("driver 418.87", "CUDA 10.1", f"driver >= {need['min_driver']}", f"PyTorch {plan.torch}"):
        assert fact in check.message
    assert f"Fix: install driver {newest['driver_branch']}" in check.message


def test_turing_on_an_r440_driver_fails(tmp_path):
    check = _stack_on(tmp_path, T4.read_text(), "440.64.00", "10.2")
    assert check.status == "fail"
    facts = check.evidence["driver_too_old"]["Tesla T4"]
    assert (facts["driver_branch"], facts["max_cuda"], facts["supported_today"]) == ("R440", "10.2", True)
    assert facts["newest_stack"]["driver"] == compat.plan_stack("T4").driver
    assert "gpulab matrix plan --gpu 'Tesla T4'" in check.message


def test_kepler_k80_on_its_last_branch_fails_as_no_current_build_supports_kepler(tmp_path):
    check = _stack_on(tmp_path, _k80(T4.read_text()), "470.82.01", "11.4")
    assert check.status == "fail"
    facts = check.evidence["driver_too_old"]["Tesla K80"]
    assert (facts["architecture"], facts["compute_capability"]) == ("Kepler", "3.7")
    assert facts["supported_today"] is False and facts["needs"] is None and facts["current_builds"] == []
    assert "no current CUDA or framework build supports Kepler" in check.message
    # The last stack that did: Kepler's last driver branch, and the matrix's 2018 profile runs on a K80 too.
    assert facts["newest_stack"]["driver_branch"] == "R470"
    assert "legacy-2018" in facts["profiles"] and "gpulab matrix show legacy-2018" in check.message


def test_pascal_on_a_current_driver_passes(tmp_path):
    check = _stack_on(tmp_path, P100.read_text(), "580.95.05", "13.0")
    assert check.status == "pass" and "driver_too_old" not in check.evidence


def test_hopper_on_a_current_driver_passes(tmp_path):
    check = _stack_on(tmp_path, H100.read_text(), "580.95.05", "13.0")
    assert check.status == "pass" and "driver_too_old" not in check.evidence
    assert "NVIDIA H100 80GB HBM3" in check.evidence["stacks"]
