"""Health verdicts on real `nvidia-smi -q -x` captures of other machines (fixtures/captures/README.md).

Each capture states what it holds and which verdicts it earns; a fail is listed only where the capture really
shows the fault, with the reason beside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import pytest

from gpulab import health
from gpulab.hw.discover import fingerprint
from gpulab.hw.model import Fingerprint
from gpulab.report.model import Check

CAPTURES = Path(__file__).parent / "fixtures" / "captures"
SCHEMA = Path(__file__).parents[1] / "src" / "gpulab" / "report" / "schema.json"
PER_GPU = ("whole_gpu", "pcie_link", "ecc", "memory_retirement", "persistence", "idle_throttle")
PERSISTENCE_OFF = "persistence off on a data-centre GPU: every job pays the driver's start-up"


@dataclass
class Expected:
    gpus: int
    name: str  # as the driver reports it
    matrix_name: str
    architecture: str
    cc: str
    product_class: str
    # Per-GPU check -> status for every GPU; `per_gpu_override` names exceptions as (check, index) -> status.
    verdicts: dict[str, str]
    fails: dict[str, str] = field(default_factory=dict)  # check -> why the capture really shows it
    per_gpu_override: dict[tuple[str, int], str] = field(default_factory=dict)
    attached: int | None = None
    count: str = "skip"  # no --expect-gpus: nothing to compare the count with


def _v(pcie: str, ecc: str, retire: str, persist: str, idle: str, whole: str = "pass") -> dict[str, str]:
    return dict(zip(PER_GPU, (whole, pcie, ecc, retire, persist, idle), strict=True))


EXPECTED = {
    "a100-sxm4-mig-i0.xml": Expected(
        1, "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "Ampere", "8.0", "data-centre",
        _v("pass", "pass", "skip", "fail", "skip", whole="skip"),  # MIG: whole-GPU readings skip
        fails={"persistence": PERSISTENCE_OFF}, attached=4,
    ),
    "a10g-passthrough.xml": Expected(
        1, "NVIDIA A10G", "NVIDIA A10G", "Ampere", "8.6", "data-centre",
        _v("skip", "pass", "pass", "fail", "pass"),  # gen1 x8 in P8, no load reading: not judged
        fails={"persistence": PERSISTENCE_OFF},
    ),
    "gtx-1050.xml": Expected(
        1, "NVIDIA GeForce GTX 1050", "NVIDIA GeForce GTX 1050", "Pascal", "6.1", "consumer",
        _v("fail", "skip", "skip", "pass", "pass"),
        fails={"pcie_link": "x8 of x16 in P3 at 7 % utilisation: no idle state, so the narrow link is real"},
    ),
    "gtx-1660-ti-graphics-device.xml": Expected(
        1, "Graphics Device", "NVIDIA GeForce GTX 1660", "Turing", "7.5", "consumer",
        _v("skip", "skip", "skip", "skip", "pass"),  # persistence off is usual on a consumer card
    ),
    "rtx-3060.xml": Expected(
        1, "NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 3060", "Ampere", "8.6", "consumer",
        _v("skip", "skip", "skip", "pass", "pass"),
    ),
    "rtx-3080.xml": Expected(
        1, "NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3080", "Ampere", "8.6", "consumer",
        _v("pass", "skip", "skip", "skip", "pass"),
    ),
    "rtx-a5000-x2.xml": Expected(
        2, "NVIDIA RTX A5000", "NVIDIA RTX A5000", "Ampere", "8.6", "workstation",
        _v("skip", "skip", "pass", "pass", "pass"),  # ECC off is how workstation cards ship
    ),
    "rtx-pro-6000-maxq.xml": Expected(
        1,
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        "Blackwell", "12.0", "workstation",
        _v("skip", "skip", "pass", "pass", "pass"),
    ),
    "t4-passthrough.xml": Expected(
        1, "Tesla T4", "Tesla T4", "Turing", "7.5", "data-centre",
        _v("fail", "pass", "pass", "fail", "pass"),
        fails={
            "pcie_link": "x8 of x16 in P0 with a compute process: no idle state, so the narrow link is real",
            "persistence": PERSISTENCE_OFF,
        },
    ),
    "v100-pcie-32gb-passthrough.xml": Expected(
        1, "Tesla V100-PCIE-32GB", "Tesla V100-PCIE-32GB", "Volta", "7.0", "data-centre",
        _v("pass", "pass", "pass", "fail", "pass"),
        fails={"persistence": PERSISTENCE_OFF},
    ),
    "v100s-pcie-x8-busy.xml": Expected(
        8, "Tesla V100S-PCIE-32GB", "Tesla V100S-PCIE-32GB", "Volta", "7.0", "data-centre",
        _v("pass", "pass", "pass", "fail", "pass"),
        fails={"persistence": PERSISTENCE_OFF},
        # sw_power_cap at 23 % and 91 % utilisation: a busy GPU, not idle throttling.
        per_gpu_override={("idle_throttle", 3): "skip", ("idle_throttle", 6): "skip"},
    ),
}  # fmt: skip


def _fp(name: str) -> Fingerprint:
    return fingerprint(smi_xml=CAPTURES / name, probe_frameworks=False)


def _per_gpu(fp: Fingerprint) -> dict[tuple[str, int], Check]:
    src = health.reporter(fp)
    out: dict[tuple[str, int], Check] = {}
    for gpu in fp.gpus:
        out["whole_gpu", gpu.index] = health.whole_gpu(gpu)
        out["pcie_link", gpu.index] = health.pcie_link(gpu, None, source=src)
        out["ecc", gpu.index] = health.ecc(gpu, source=src)
        out["memory_retirement", gpu.index] = health.memory_retirement(gpu, source=src)
        out["persistence", gpu.index] = health.persistence(gpu, source=src)
        out["idle_throttle", gpu.index] = health.idle_throttle(gpu, source=src)
    return out


def test_every_capture_has_expectations():
    assert sorted(p.name for p in CAPTURES.glob("*.xml")) == sorted(EXPECTED)
    readme = (CAPTURES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_parses_to_the_right_gpus(name):
    exp = EXPECTED[name]
    fp = _fp(name)
    assert len(fp.gpus) == exp.gpus
    assert fp.capture_attached_gpus == exp.attached
    for gpu in fp.gpus:
        assert (gpu.name, gpu.matrix_name) == (exp.name, exp.matrix_name)
        assert (gpu.architecture, gpu.compute_capability, gpu.product_class) == (
            exp.architecture,
            exp.cc,
            exp.product_class,
        )
        assert gpu.uuid.startswith("GPU-")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_verdicts(name):
    exp = EXPECTED[name]
    fp = _fp(name)
    got = {key: c.status for key, c in _per_gpu(fp).items()}
    want = {(check, g.index): exp.verdicts[check] for g in fp.gpus for check in PER_GPU}
    want.update(exp.per_gpu_override)
    assert got == want
    failing = {check for (check, _), status in got.items() if status == "fail"}
    assert failing == set(exp.fails)  # every fail is one the capture really shows
    # The host-wide checks: the captured driver supports its own CUDA and the GPU's architecture.
    assert health.gpu_count(fp, None).status == exp.count
    assert health.driver_supports_cuda(fp).status == "pass"
    assert health.stack_supports_gpus(fp).status == "pass"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_fingerprint_matches_schema_and_round_trips(name):
    fp = _fp(name)
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(fp.to_dict(), {"$ref": "#/$defs/fingerprint", "$defs": schema["$defs"]})
    assert Fingerprint.from_dict(json.loads(json.dumps(fp.to_dict()))) == fp


def test_busy_v100s_power_cap_is_not_idle_throttling():
    fp = _fp("v100s-pcie-x8-busy.xml")
    for index, util in ((3, 23), (6, 91)):
        gpu = fp.gpus[index]
        assert gpu.throttle_reasons == ["sw_power_cap"] and gpu.utilization_gpu_pct == util
        check = health.idle_throttle(gpu, source=health.reporter(fp))
        assert check.status == "skip"
        assert f"busy ({util} % utilised, 1 compute process)" in check.message
        assert "sw_power_cap is no idle throttling" in check.message


def test_per_gpu_capture_is_judged_as_that_gpu_only():
    fp = _fp("a100-sxm4-mig-i0.xml")
    check = health.gpu_count(fp, None)
    assert "the capture holds 1 of the host's 4 GPUs (`nvidia-smi -q -x -i`): only those are judged" in check.message
    assert health.gpu_count(fp, 4).status == "pass"
    wrong = health.gpu_count(fp, 8)
    assert wrong.status == "fail" and "expected 8 GPUs, the host reports 4 attached" in wrong.message


def test_mig_capture_records_instances_and_skips_whole_gpu_readings():
    gpu = _fp("a100-sxm4-mig-i0.xml").gpus[0]
    assert health.mig_enabled(gpu) and len(gpu.mig_devices) == 4
    first = gpu.mig_devices[0]
    assert (first.gpu_instance_id, first.multiprocessor_count, first.memory_total_mib) == (3, 14, 19968)
    notice = health.whole_gpu_notice(gpu)
    assert notice is not None and "MIG is enabled with 4 MIG instances" in notice
    assert health.idle_throttle(gpu).message == notice  # the one line every whole-GPU reading gives


def test_graphics_device_is_resolved_by_pci_id():
    gpu = _fp("gtx-1660-ti-graphics-device.xml").gpus[0]
    assert (gpu.name, gpu.pci_device_id, gpu.architecture) == ("Graphics Device", "10de:2184", "Turing")
    assert gpu.matrix_name == "NVIDIA GeForce GTX 1660"


def test_a10g_without_pci_id_is_resolved_by_name():
    gpu = _fp("a10g-passthrough.xml").gpus[0]
    assert gpu.pci_device_id == "00de:0000" and gpu.matrix_name == "NVIDIA A10G"
    assert gpu.virtualization_mode == "Pass-Through" and not health.vgpu_slice(gpu)
