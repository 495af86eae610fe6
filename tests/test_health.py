"""Health verdicts on the real 4x H200 capture, and on copies with one fault planted each."""

import dataclasses
import json
from pathlib import Path

import pytest

from capture_edits import H200_XML, P100_XML, all_na, with_versions, write
from gpulab.checks import health
from gpulab.errors import GpulabError
from gpulab.hw.discover import fingerprint
from gpulab.records import EccErrors, FrameworkInfo, MemoryRetirement, PcieLink

FIX = Path(__file__).parent / "fixtures" / "h200x4-firecracker"


@pytest.fixture
def fp():
    return fingerprint(
        smi_xml=FIX / "nvidia-smi-q-x.xml", topo_file=FIX / "nvidia-smi-topo-m.txt", probe_frameworks=False
    )


def test_real_capture_is_healthy(fp):
    checks = [health.gpu_count(fp, 4, 4)]
    for gpu in fp.gpus:
        checks += [
            health.pcie_link(gpu),
            health.ecc(gpu),
            health.memory_retirement(gpu),
            health.persistence(gpu),
            health.idle_throttle(gpu),
        ]
    assert [c for c in checks if c.status != "pass"] == []
    assert len(checks) == 1 + 5 * 4


def test_gpu_count_names_missing_gpus(fp):
    check = health.gpu_count(fp, expected=8, on_pci_bus=4)
    assert check.status == "fail"
    assert "expected 8 GPUs, the capture lists 4" in check.message
    lost = health.gpu_count(fp, expected=None, on_pci_bus=5)
    assert lost.status == "fail" and "5 NVIDIA GPUs on the PCI bus" in lost.message


def test_gpu_count_without_anything_to_compare_skips(fp):
    check = health.gpu_count(fp, expected=None, on_pci_bus=None)
    assert check.status == "skip"
    assert "the capture lists 4 GPUs, with nothing to compare" in check.message
    assert "PCI bus count is not captured" in check.message
    assert health.gpu_count(fp, expected=4).status == "pass"


def test_narrow_link_fails_with_cause(fp):
    gpu = dataclasses.replace(fp.gpus[1], pcie=PcieLink(5, 5, 8, 16))
    check = health.pcie_link(gpu)
    assert check.status == "fail"
    assert "x8 of x16" in check.message and "0000:00:07.0" in check.message


def test_low_idle_gen_is_judged_under_load(fp):
    idle = dataclasses.replace(fp.gpus[0], pcie=PcieLink(1, 5, 16, 16))
    assert health.pcie_link(idle, under_load=PcieLink(5, 5, 16, 16)).status == "pass"
    still_low = health.pcie_link(idle, under_load=PcieLink(3, 5, 16, 16))
    assert still_low.status == "fail" and "gen3 of gen5 even under load" in still_low.message


def test_ecc_and_retirement_faults(fp):
    gpu = fp.gpus[2]
    off = dataclasses.replace(gpu, ecc_enabled=False)
    assert health.ecc(off).status == "fail" and "nvidia-smi -i 2 -e 1" in health.ecc(off).message
    errs = dataclasses.replace(gpu, ecc_errors=dataclasses.replace(gpu.ecc_errors, volatile_uncorrected=3))
    assert "3 uncorrectable" in health.ecc(errs).message
    pending = dataclasses.replace(gpu, retirement=dataclasses.replace(gpu.retirement, remap_pending=True))
    assert health.memory_retirement(pending).status == "fail"


def test_persistence_and_throttle(fp):
    gpu = fp.gpus[3]
    assert health.persistence(dataclasses.replace(gpu, persistence_mode=False)).status == "fail"
    hot = dataclasses.replace(gpu, throttle_reasons=["gpu_idle", "hw_thermal_slowdown"])
    check = health.idle_throttle(hot)
    assert check.status == "fail" and "airflow" in check.message


def test_driver_too_old_for_framework_cuda(fp):
    fp.software.frameworks = [FrameworkInfo(name="torch", version="2.11.0+cu130", built_cuda="13.0")]
    assert health.driver_for_cuda(fp).status == "pass"
    fp.software.driver_version = "535.261.03"
    check = health.driver_for_cuda(fp)
    assert check.status == "fail" and "535.261.03" in check.message and "CUDA 13.0" in check.message


def test_stack_check_refuses_p100_on_cuda13(fp):
    p100 = dataclasses.replace(fp.gpus[0], name="Tesla P100-PCIE-16GB", pci_device_id="10de:15f8")
    fp.gpus = [p100]
    fp.software.frameworks = [FrameworkInfo(name="torch", version="2.11.0+cu130", built_cuda="13.0")]
    check = health.stack_supports_arch(fp)
    assert check.status == "fail"
    assert "Tesla P100-PCIE-16GB" in check.message


def test_framework_sees_fewer_gpus(fp):
    fp.software.frameworks = [FrameworkInfo(name="torch", version="2.13.0+cpu", sees_gpus=0)]
    check = health.framework_sees_gpus(fp, "torch", 4)
    assert check.status == "fail" and "CPU-only build" in check.message
    assert health.framework_sees_gpus(fp, "tensorflow", 4).status == "skip"


# --- values a source does not report: skip, never pass ---------------------------------------------------


@pytest.fixture
def na_fp(tmp_path):
    """The real H200 capture with every value N/A (the GPU uuids kept: without them the file is refused)."""
    xml = write(tmp_path / "all-na.xml", all_na(H200_XML.read_text()))
    return fingerprint(smi_xml=xml, probe_frameworks=False)


def all_checks(fp):
    src = health.reporter(fp)
    checks = [
        health.gpu_count(fp, None, None),
        health.driver_for_cuda(fp),
        health.stack_supports_arch(fp),
        health.framework_sees_gpus(fp, "torch", len(fp.gpus)),
    ]
    for gpu in fp.gpus:
        checks += [
            health.pcie_link(gpu, source=src),
            health.ecc(gpu, source=src),
            health.memory_retirement(gpu, source=src),
            health.persistence(gpu, source=src),
            health.idle_throttle(gpu, source=src),
        ]
    return checks


def test_all_na_capture_passes_no_check(na_fp, tmp_path):
    checks = all_checks(na_fp)
    assert len(na_fp.gpus) == 4 and len(checks) == 4 + 5 * 4
    assert {c.name: c.status for c in checks if c.status != "skip"} == {}
    src = f"the capture {tmp_path / 'all-na.xml'}"
    by_name = {c.name: c.message for c in checks}
    assert by_name["health.driver_for_cuda"] == f"driver version not reported by {src}"
    assert "cannot judge architecture support: driver (not reported by" in by_name["health.stack_supports_arch"]
    assert (
        "GPU unknown (PCI id ?; not in the compatibility matrix; architecture and compute capability not reported: "
        "spec-based checks skipped)" in by_name["health.stack_supports_arch"]
    )
    assert by_name["health.torch_sees_gpus"] == f"torch not captured by {src}"
    assert "with nothing to compare" in by_name["health.gpu_count"]
    for i in range(4):
        assert by_name[f"health.pcie_link[{i}]"].endswith(f"PCIe link not reported by {src} (gen?/? x?/?)")
        assert by_name[f"health.ecc[{i}]"].endswith(f"ECC mode not reported by {src} (N/A where a GPU has no ECC)")
        assert by_name[f"health.memory_retirement[{i}]"].endswith(
            f"page retirement / row remapping not reported by {src}"
        )
        assert by_name[f"health.persistence[{i}]"].endswith(f"persistence mode not reported by {src}")
        assert by_name[f"health.idle_throttle[{i}]"].endswith(f"clock throttle reasons not reported by {src}")


def test_all_na_capture_parses_to_unknowns(na_fp):
    g = na_fp.gpus[0]
    assert g.name == "unknown" and g.uuid == "GPU-80f06605-83de-40d0-a702-4d4f54437f6f"
    assert g.bus_id == "0000:00:06.0"  # from the <gpu id="..."> attribute, which is not a value
    assert g.throttle_reasons is None  # not [], which would say "nothing throttles"
    assert g.ecc_enabled is None and g.persistence_mode is None and g.pcie.at_max is None
    assert (na_fp.software.driver_version, na_fp.software.cuda_driver_version) == (None, None)
    # The GPU count is still evidence: the capture lists four <gpu> entries.
    assert health.gpu_count(na_fp, 4).status == "pass"
    assert health.gpu_count(na_fp, 8).status == "fail"


def test_capture_without_uuids_is_refused(tmp_path):
    xml = write(tmp_path / "no-ids.xml", all_na(H200_XML.read_text(), keep=()))
    with pytest.raises(GpulabError, match=r"no-ids\.xml: GPU 0 has no uuid or PCI bus id"):
        fingerprint(smi_xml=xml, probe_frameworks=False)


def test_partly_reported_values_skip(fp):
    gpu = fp.gpus[0]
    src = health.reporter(fp)
    ecc_no_count = dataclasses.replace(gpu, ecc_errors=EccErrors())
    check = health.ecc(ecc_no_count, source=src)
    assert check.status == "skip" and "ECC on, but the uncorrectable error count is not reported by" in check.message
    # With MIG on the driver keeps the since-load counts per instance: the lifetime count still clears the board.
    clean_life = dataclasses.replace(gpu, ecc_errors=EccErrors(aggregate_uncorrected=0))
    assert health.ecc(clean_life).message.endswith("ECC on, no uncorrectable errors in the board's life")
    past = health.ecc(dataclasses.replace(gpu, ecc_errors=EccErrors(aggregate_uncorrected=3)), source=src)
    assert past.status == "skip" and past.message.endswith("(the board's lifetime count is 3)")
    # Rows reported but the pending flag N/A, and no page-retirement data: not a clean bill.
    rows_partial = dataclasses.replace(
        gpu, retirement=MemoryRetirement(remapped_correctable=0, remapped_uncorrectable=0, remap_failure=False)
    )
    assert health.memory_retirement(rows_partial, source=src).status == "skip"
    pages = dataclasses.replace(gpu, retirement=MemoryRetirement(retired_double_bit=0, retired_pending=False))
    assert health.memory_retirement(pages).message.endswith("no retired pages, none pending")
    assert health.idle_throttle(dataclasses.replace(gpu, throttle_reasons=None)).status == "skip"
    assert health.idle_throttle(dataclasses.replace(gpu, throttle_reasons=[])).status == "pass"
    # Width known to be narrow fails even when the generation is N/A.
    narrow = dataclasses.replace(gpu, pcie=PcieLink(None, None, 8, 16))
    assert health.pcie_link(narrow).status == "fail"
    half = dataclasses.replace(gpu, pcie=PcieLink(5, 5, None, 16))
    assert health.pcie_link(half, source=src).message.endswith(f"PCIe link not reported by {src} (gen5/5 x?/16)")


def test_low_idle_gen_without_load_reading_skips(fp):
    idle = dataclasses.replace(fp.gpus[0], pcie=PcieLink(1, 5, 16, 16))
    check = health.pcie_link(idle)
    assert check.status == "skip"
    assert "gen1 of gen5 at idle, and no reading under load" in check.message


def test_unknown_versions_are_not_judged(fp):
    fp.software.toolkits = [{"path": "/usr/local/cuda", "version": "unknown"}]
    fp.software.frameworks = [FrameworkInfo(name="torch", version="unknown", error="ImportError: libcudart")]
    fp.software.cuda_driver_version = None
    check = health.driver_for_cuda(fp)
    assert check.status == "skip" and "CUDA version not reported by the capture" in check.message
    fp.software.frameworks = [FrameworkInfo(name="torch", version="2.11.0+cu130", built_cuda="13.0", sees_gpus=None)]
    skipped = health.framework_sees_gpus(fp, "torch", 4)
    assert skipped.status == "skip" and "did not report how many GPUs it sees" in skipped.message


# --- a capture is judged on what it holds --------------------------------------------------------------


def fake_machine(root: Path) -> Path:
    """A machine with CUDA 13.0 in /usr/local, a host name, a CPU, and an NVIDIA device at the captured address."""
    kit = root / "usr/local/cuda-13.0"
    kit.mkdir(parents=True)
    (kit / "version.json").write_text(json.dumps({"cuda": {"version": "13.0.48"}}))
    (root / "usr/local/cuda").symlink_to(kit)
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/hostname").write_text("this-machine-7\n")
    (root / "proc/cpuinfo").write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: Fake EPYC 9999\n")
    (root / "proc/meminfo").write_text("MemTotal:       1048576 kB\n")
    dev = root / "sys/bus/pci/devices/0000:04:00.0"
    dev.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x15f7"), ("numa_node", "1")):
        (dev / name).write_text(value + "\n")
    return root


def test_fake_machine_is_what_live_discovery_reads(tmp_path):
    """The fake machine is real enough to leak: live discovery on it reports its name, CPU and toolkit."""
    fp = fingerprint(probe_frameworks=False, root=fake_machine(tmp_path))
    assert fp.host is not None and fp.host.hostname == "this-machine-7" and fp.host.cpu.model == "Fake EPYC 9999"
    assert fp.software.toolkits and fp.software.toolkits[-1]["version"] == "13.0.48"


def test_2017_capture_is_not_judged_by_this_machines_toolkit(tmp_path):
    root = fake_machine(tmp_path / "machine")
    xml = write(tmp_path / "p100-375.xml", with_versions(P100_XML.read_text(), "375.66", "8.0"))
    fp = fingerprint(smi_xml=xml, probe_frameworks=True, root=root)
    assert (fp.software.driver_version, fp.software.cuda_driver_version) == ("375.66", "8.0")
    assert fp.host is None and fp.software.toolkits is None and fp.software.frameworks is None
    assert fp.captured_from == [str(xml)]
    assert fp.gpus[0].numa_node is None  # this machine's device at 0000:04:00.0 is not the captured one
    text = json.dumps(fp.to_dict())
    for here in ("this-machine-7", "Fake EPYC 9999", "cuda-13.0", "13.0.48", "/usr/local"):
        assert here not in text
    driver = health.driver_for_cuda(fp)
    assert driver.status == "skip"  # CUDA 8.0 predates the matrix: neither pass nor fail
    assert driver.message.startswith("cannot judge driver 375.66: the captured driver's CUDA 8.0: CUDA 8.0 is unknown")
    assert "CUDA toolkits not captured" in driver.message and "13.0" not in driver.message.split("known:")[0]
    stack = health.stack_supports_arch(fp)
    # No CUDA or framework in use today runs on R375: the newest stack for the P100 is named.
    assert stack.status == "fail" and "driver 375.66 predates every branch the matrix lists (R384" in stack.message
    assert "the newest stack for this GPU is driver R580" in stack.message
    # Persistence mode really was off on that machine: a finding from the capture itself.
    assert health.persistence(fp.gpus[0], source=health.reporter(fp)).status == "fail"


def test_capture_driver_is_checked_against_its_own_cuda(tmp_path):
    root = fake_machine(tmp_path / "machine")  # CUDA 13.0 here, which driver 535 could not run
    xml = write(tmp_path / "h200-535.xml", with_versions(H200_XML.read_text(), "535.261.03", "12.2"))
    fp = fingerprint(smi_xml=xml, probe_frameworks=False, root=root)
    check = health.driver_for_cuda(fp)
    assert check.status == "pass"
    assert check.message.startswith("driver 535.261.03 supports the captured driver's CUDA 12.2 (CUDA 12.2)")
    assert "CUDA toolkits not captured" in check.message
    too_new = write(tmp_path / "h200-bad.xml", with_versions(H200_XML.read_text(), "535.261.03", "13.0"))
    bad = health.driver_for_cuda(fingerprint(smi_xml=too_new, probe_frameworks=False, root=root))
    assert bad.status == "fail" and "needs driver >= 580.65.06" in bad.message


def test_real_2017_capture_has_no_cuda_version():
    fp = fingerprint(smi_xml=P100_XML, probe_frameworks=False)
    assert fp.software.driver_version == "375.66" and fp.software.cuda_driver_version is None
    assert [g.name for g in fp.gpus] == ["Tesla P100-PCIE-12GB", "Tesla P100-PCIE-12GB_2"]
    assert fp.gpus[0].compute_capability == "6.0"  # from the matrix by PCI id: the capture has no architecture
    check = health.driver_for_cuda(fp)
    assert check.status == "skip"
    assert check.message == (
        f"CUDA version not reported by the capture {P100_XML}; framework builds and CUDA toolkits not captured: "
        "nothing to check driver 375.66 against"
    )
    src = health.reporter(fp)
    for gpu in fp.gpus:  # the old layouts are read, not mistaken for N/A
        assert health.ecc(gpu, source=src).status == "pass"
        assert health.memory_retirement(gpu, source=src).status == "pass"
        assert health.idle_throttle(gpu, source=src).status == "pass"
        assert health.pcie_link(gpu, source=src).status == "pass"


def test_each_check_is_named_after_the_function_that_declares_it(fp):
    """Code, report and suite say one name: `health.ecc` makes `health.ecc[0]`, `health.driver_for_cuda` makes
    `health.driver_for_cuda` (the framework checks are one family: `health.torch_sees_gpus`)."""
    src = health.reporter(fp)
    made = {
        "gpu_count": health.gpu_count(fp, None, None),
        "driver_for_cuda": health.driver_for_cuda(fp),
        "stack_supports_arch": health.stack_supports_arch(fp),
        "thermal": health.thermal(fp.gpus[0]),
        "pcie_replays": health.pcie_replays(fp.gpus[0], source=src),
        **{f: getattr(health, f)(fp.gpus[0], source=src) for f in ("pcie_link", "ecc", "memory_retirement")},
        **{f: getattr(health, f)(fp.gpus[0], source=src) for f in ("persistence", "idle_throttle")},
    }
    for function, check in made.items():
        assert check.name.split("[")[0] == f"health.{function}", (function, check.name)
    assert health.framework_sees_gpus(fp, "torch", len(fp.gpus)).name == "health.torch_sees_gpus"


def test_a_skipped_probe_and_a_measured_one_are_one_check():
    from gpulab.probes import judge
    from gpulab.records import Result

    measured = Result("matmul", "torch", "gpu", 1, "bf16", 900.0, "TFLOP/s", device="cuda:1")
    assert judge.check(measured, None, "bf16 matmul").name == judge.check_name("matmul", "bf16", "cuda:1")
    assert judge.check_name("matmul", "bf16", "cuda:1") == "probe.matmul.bf16[cuda:1]"
    assert (
        judge.check_name("allreduce", "none", "2 devices", "nccl-tests") == "probe.allreduce.nccl_tests.none[2 devices]"
    )
