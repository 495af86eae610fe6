"""Health verdicts on real `nvidia-smi -q -x` captures of other machines (fixtures/captures/README.md).

Each capture states what it holds and which verdicts it earns; a fail is listed only where the capture really
shows the fault, with the reason beside it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import pytest

from gpulab.checks import health
from gpulab.errors import GpulabError
from gpulab.hw.discover import fingerprint
from gpulab.records import Check, Fingerprint, Report
from gpulab.report import views

CAPTURES = Path(__file__).parent / "fixtures" / "captures"
SCHEMA = Path(__file__).parents[1] / "src" / "gpulab" / "report" / "schema.json"
PER_GPU = (
    "whole_gpu",
    "pcie_link",
    "ecc",
    "memory_retirement",
    "persistence",
    "idle_throttle",
    "thermal",
    "pcie_replays",
)
HOST = ("gpu_count", "driver_for_cuda", "stack_supports_arch")
PERSISTENCE_OFF = "persistence off on a data-centre GPU: every job pays the driver's start-up"
OBSOLETE = "a driver older than every branch the matrix lists: no CUDA or framework in use today runs on it"
# gpu_count, driver_for_cuda, stack_supports_arch for a driver too old for every build in use today on its GPU
# (today's PyTorch and TensorFlow need CUDA 12, i.e. R525 or later): the stack check fails naming the newest stack.
OLD_DRIVER = ("skip", "pass", "fail")


@dataclass
class Expected:
    situation: str  # what the capture shows, in a GPU expert's words (the report's table)
    gpus: int
    name: str  # as the driver reports it
    matrix_name: str | None
    architecture: str | None
    cc: str | None
    product_class: str
    # Per-GPU check -> status for every GPU; `per_gpu_override` names exceptions as (check, index) -> status.
    verdicts: dict[str, str]
    verdict: str  # the run's verdict: pass, fail or inconclusive
    fails: dict[str, str] = field(default_factory=dict)  # check -> why the capture really shows it
    per_gpu_override: dict[tuple[str, int], str] = field(default_factory=dict)
    attached: int | None = None
    # gpu_count (no --expect-gpus: nothing to compare with), driver_for_cuda, stack_supports_arch
    host: tuple[str, str, str] = ("skip", "pass", "pass")
    mode: str | None = None  # the virtualisation mode as a fact
    # GPU index -> (name, matrix name) where a GPU differs from the first
    name_overrides: dict[int, tuple[str, str | None]] = field(default_factory=dict)


def _v(
    pcie: str,
    ecc: str,
    retire: str,
    persist: str,
    idle: str,
    whole: str = "pass",
    thermal: str = "pass",
    replays: str = "pass",
) -> dict[str, str]:
    return dict(zip(PER_GPU, (whole, pcie, ecc, retire, persist, idle, thermal, replays), strict=True))


EXPECTED = {
    "a100-sxm4-mig-i0.xml": Expected(
        "MIG on, one GPU of a 4-GPU host (-i), persistence off",
        1, "NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "Ampere", "8.0", "data-centre",
        _v("pass", "pass", "skip", "fail", "skip", whole="skip"),  # MIG: whole-GPU readings skip
        "fail", fails={"persistence": PERSISTENCE_OFF}, attached=4, mode="MIG",
    ),
    "a10g-passthrough.xml": Expected(
        "A10G passed through, idle at gen1 x8, persistence off",
        1, "NVIDIA A10G", "NVIDIA A10G", "Ampere", "8.6", "data-centre",
        _v("skip", "pass", "pass", "fail", "pass"),  # gen1 x8 in P8, no load reading: not judged
        "fail", fails={"persistence": PERSISTENCE_OFF}, host=OLD_DRIVER, mode="passthrough",
    ),
    "gtx-1050.xml": Expected(
        "notebook GTX 1050 (GP107M) wired x8 by its board",
        1, "NVIDIA GeForce GTX 1050", "NVIDIA GeForce GTX 1050", "Pascal", "6.1", "consumer",
        _v("pass", "skip", "skip", "pass", "pass"), "fail", host=OLD_DRIVER, mode="bare metal",
    ),
    "gtx-1660-ti-graphics-device.xml": Expected(
        "driver 418 names the board 'Graphics Device'",
        1, "Graphics Device", "NVIDIA GeForce GTX 1660", "Turing", "7.5", "consumer",
        # Persistence off: usual on GeForce.
        _v("skip", "skip", "skip", "skip", "pass"), "fail", host=OLD_DRIVER, mode="bare metal",
    ),
    "rtx-3060.xml": Expected(
        "GeForce idle at gen1",
        1, "NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 3060", "Ampere", "8.6", "consumer",
        _v("skip", "skip", "skip", "pass", "pass"), "pass", mode="bare metal",
    ),
    "rtx-3080.xml": Expected(
        "GeForce at 65 % utilisation, schema v13",
        1, "NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3080", "Ampere", "8.6", "consumer",
        _v("pass", "skip", "skip", "skip", "pass"), "pass", mode="bare metal",
    ),
    "rtx-a5000-x2.xml": Expected(
        "two workstation cards, ECC off as shipped",
        2, "NVIDIA RTX A5000", "NVIDIA RTX A5000", "Ampere", "8.6", "workstation",
        _v("skip", "skip", "pass", "pass", "pass"), "pass", mode="bare metal",  # ECC off: how they ship
    ),
    "rtx-pro-6000-maxq.xml": Expected(
        "Blackwell workstation card, temperature thresholds as T.Limit margins",
        1,
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        "Blackwell", "12.0", "workstation",
        _v("skip", "skip", "pass", "pass", "pass"), "pass", mode="bare metal",
    ),
    "t4-passthrough.xml": Expected(
        "T4 at x8 of x16 while busy (P0, a process): a narrow slot",
        1, "Tesla T4", "Tesla T4", "Turing", "7.5", "data-centre",
        _v("fail", "pass", "pass", "fail", "pass"),
        "fail",
        fails={
            "pcie_link": "x8 of x16 in P0 with a compute process: no idle state, so the narrow link is real",
            "persistence": PERSISTENCE_OFF,
        },
        host=OLD_DRIVER, mode="passthrough",
    ),
    "v100-pcie-32gb-passthrough.xml": Expected(
        "V100 passed through, 91 % utilised, persistence off",
        1, "Tesla V100-PCIE-32GB", "Tesla V100-PCIE-32GB", "Volta", "7.0", "data-centre",
        _v("pass", "pass", "pass", "fail", "pass"), "fail", fails={"persistence": PERSISTENCE_OFF},
        host=OLD_DRIVER, mode="passthrough",
    ),
    "v100s-pcie-x8-busy.xml": Expected(
        "8 busy V100S, SW power cap under load on two",
        8, "Tesla V100S-PCIE-32GB", "Tesla V100S-PCIE-32GB", "Volta", "7.0", "data-centre",
        _v("pass", "pass", "pass", "fail", "pass"), "fail",
        fails={"persistence": PERSISTENCE_OFF},
        # sw_power_cap at 23 % and 91 % utilisation: a busy GPU, not idle throttling.
        per_gpu_override={("idle_throttle", 3): "skip", ("idle_throttle", 6): "skip"},
        host=OLD_DRIVER, mode="passthrough",
    ),
    # --- schema generations before today's, obsolete hardware and drivers ------------------------------
    "tesla-m2090-fermi-driver285.xml": Expected(
        "2013, driver 285, schema v2 (memory_usage in MB, compute_processes), Fermi",
        2, "Tesla M2090", None, "Fermi", None, "data-centre",
        # No virtualisation mode, retirement, throttle reasons, temperature or replay counter in schema v2.
        _v("pass", "pass", "skip", "fail", "skip", whole="skip", thermal="skip", replays="skip"),
        "fail", fails={"persistence": PERSISTENCE_OFF},
        per_gpu_override={("pcie_link", 1): "skip"},  # gen1 of gen2 in P12 idle: not judged
        host=("skip", "skip", "fail"),
    ),
    "tesla-k20m-kepler-driver340-busy.xml": Expected(
        "2014, driver 340, schema v6, Kepler running 8 ANSYS processes",
        1, "Tesla K20m", None, "Kepler", None, "data-centre",
        _v("pass", "pass", "pass", "fail", "pass", whole="skip", replays="skip"),
        "fail", fails={"persistence": PERSISTENCE_OFF}, host=("skip", "skip", "fail"),
    ),
    "p100-driver375-excerpt.xml": Expected(
        "2017 excerpt, driver 375 (older than every branch in the matrix); no PCI, ECC or throttle blocks",
        2, "Tesla P100-PCIE-12GB", "Tesla P100-PCIE-12GB", "Pascal", "6.0", "data-centre",
        _v("skip", "skip", "skip", "skip", "skip", whole="skip", replays="skip"),
        "fail", host=("skip", "skip", "fail"),
        # The source project renamed its second GPU; an unknown name, so the matrix does not name it.
        name_overrides={1: ("Tesla P100-PCIE-12GB_2", None)},
    ),
    "grid-k520-kepler-driver352.xml": Expected(
        "2017, driver 352, schema v7 (no CUDA version, no virtualisation mode): a GRID K520 (GK104, cc 3.0)",
        1, "GRID K520", None, "Kepler", None, "data-centre",
        # gen1 of gen3 in P8 idle: not judged; no ECC on the K520.
        _v("skip", "skip", "skip", "pass", "pass", whole="skip"),
        "fail", host=("skip", "skip", "fail"),  # driver 352 runs no CUDA in use today
    ),
    "grid-k520-inline-dtd.xml": Expected(
        "the same GRID K520 written with --dtd: the DTD inline in the DOCTYPE",
        1, "GRID K520", None, "Kepler", None, "data-centre",
        _v("skip", "skip", "skip", "pass", "pass", whole="skip"),
        "fail", host=("skip", "skip", "fail"),
    ),
    "gt-730-kepler-mostly-na.xml": Expected(
        "a GeForce GT 730 nvidia-smi barely queries: link, utilisation, throttle reasons, power N/A",
        1, "GeForce GT 730", None, "Kepler", None, "consumer",
        # Only the driver and the stack (and a zero replay counter) can be judged: nothing of the board itself.
        # The stack fails: no current CUDA or framework build supports Kepler.
        _v("skip", "skip", "skip", "skip", "skip", whole="skip", thermal="skip"), "fail", host=OLD_DRIVER,
    ),
    "quadro-p400-driver418.xml": Expected(
        "driver 418 (2019) reports no architecture: Pascal by PCI id",
        1, "Quadro P400", None, "Pascal", None, "workstation",
        _v("skip", "skip", "skip", "skip", "pass"), "fail", host=OLD_DRIVER, mode="bare metal",
    ),
    "gtx-1070-ti-trimmed.xml": Expected(
        "a capture with no driver, no PCI id, no link maxima: nothing defining can be judged",
        1, "GeForce GTX 1070 Ti", "NVIDIA GeForce GTX 1070 Ti", "Pascal", "6.1", "consumer",
        _v("skip", "skip", "skip", "skip", "skip", whole="skip", thermal="skip", replays="skip"),
        "inconclusive", host=("skip", "skip", "skip"),
    ),
    # --- virtualisation modes ------------------------------------------------------------------------------
    "tesla-m10-vgpu-host.xml": Expected(
        "vGPU hypervisor (Host VGPU), 4 Maxwell GPUs each serving 2 VMs; no CUDA on the host",
        4, "Tesla M10", None, "Maxwell", None, "data-centre",
        # The board is judged (heat, replays); whole-GPU and idle readings would measure the VMs.
        _v("skip", "skip", "skip", "pass", "skip", whole="skip"),
        "pass", host=("skip", "skip", "pass"), mode="vGPU host",
    ),
    "grid-p4-1q-vgpu-guest.xml": Expected(
        "a vGPU guest (GRID P4-1Q slice): the board is the host's to judge",
        1, "GRID P4-1Q", None, "Pascal", None, "data-centre",
        _v("skip", "skip", "skip", "skip", "skip", whole="skip", thermal="skip", replays="skip"),
        "fail", host=OLD_DRIVER, mode="vGPU guest",
    ),
    "rtx-3080-passthrough-windows.xml": Expected(
        "GeForce passed through to a Windows guest (driver 536.40)",
        1, "NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3080", "Ampere", "8.6", "consumer",
        _v("pass", "skip", "skip", "skip", "pass"), "pass", mode="passthrough",
    ),
    "rtx-3090-passthrough.xml": Expected(
        "GeForce passed through, idle at gen1, power limit 200 W",
        1, "NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090", "Ampere", "8.6", "consumer",
        _v("skip", "skip", "skip", "pass", "pass"), "pass", mode="passthrough",
    ),
    # --- links, power, boards ------------------------------------------------------------------------------
    "rtx-a5000-laptop.xml": Expected(
        "laptop GPU whose board wires x8 (chip x16), in P0",
        1, "NVIDIA RTX A5000 Laptop GPU", None, "Ampere", None, "workstation",
        _v("pass", "skip", "skip", "skip", "pass"), "pass", mode="bare metal",
    ),
    "rtx-3090-idle-sw-power-cap.xml": Expected(
        "SW power cap flagged at P8 idle with the default 350 W limit (harmless)",
        1, "NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090", "Ampere", "8.6", "consumer",
        _v("skip", "skip", "skip", "pass", "pass"), "pass", mode="bare metal",
    ),
    "gt-1030-x4-board.xml": Expected(
        "GT 1030: an x4 board at gen3 x4 (its maximum)",
        1, "NVIDIA GeForce GT 1030", None, "Pascal", None, "consumer",
        _v("pass", "skip", "skip", "skip", "pass"), "fail", host=OLD_DRIVER, mode="bare metal",
    ),
    "rtx-2070-x2.xml": Expected(
        "two GeForce RTX 2070 idle at gen1 x8 (link not judgeable idle)",
        2, "NVIDIA GeForce RTX 2070", None, "Turing", "7.5", "consumer",
        _v("skip", "skip", "skip", "pass", "pass"), "pass", mode="bare metal",
    ),
    "rtx-2080-x2.xml": Expected(
        "two GeForce RTX 2080 idle at gen1 x8",
        2, "NVIDIA GeForce RTX 2080", None, "Turing", "7.5", "consumer",
        _v("skip", "skip", "skip", "pass", "pass"), "pass", mode="bare metal",
    ),
    "quadro-p2000.xml": Expected(
        "Quadro P2000 idle at gen1 x8",
        1, "Quadro P2000", None, "Pascal", None, "workstation",
        _v("skip", "skip", "skip", "pass", "pass"), "pass", mode="bare metal",
    ),
    "rtx-4000-sff-ada.xml": Expected(
        "Ada workstation card, ECC off, 2 processes, thresholds as T.Limit margins",
        1, "NVIDIA RTX 4000 SFF Ada Generation", None, "Ada Lovelace", "8.9", "workstation",
        _v("skip", "skip", "pass", "pass", "pass"), "pass", mode="bare metal",
    ),
    "rtx-4090-tlimit.xml": Expected(
        "GeForce RTX 4090 whose temperature thresholds are T.Limit margins only; a gen4 card in a gen3 host, idle",
        1, "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090", "Ada Lovelace", "8.9", "consumer",
        _v("skip", "skip", "pass", "pass", "pass"), "pass", mode="bare metal",
    ),
    "rtx-3060-laptop-x8.xml": Expected(
        "laptop GeForce (not in the matrix) idle at gen1 x8: its board's lanes, not judged idle",
        1, "NVIDIA GeForce RTX 3060 Laptop GPU", None, "Ampere", None, "consumer",
        _v("skip", "skip", "skip", "skip", "pass"), "fail", host=OLD_DRIVER, mode="bare metal",
    ),
    "rtx-2080-windows-x8.xml": Expected(
        "Windows desktop (WDDM, no persistence mode) with 26 desktop applications, idle at x8",
        1, "NVIDIA GeForce RTX 2080", None, "Turing", "7.5", "consumer",
        _v("skip", "skip", "skip", "skip", "pass"), "fail", host=OLD_DRIVER, mode="bare metal",
    ),
    "tesla-t4-windows-wddm.xml": Expected(
        "T4 under Windows (WDDM, vApps licence) serving desktop sessions, idle",
        1, "Tesla T4", "Tesla T4", "Turing", "7.5", "data-centre",
        # Windows has no persistence mode.
        _v("pass", "pass", "pass", "skip", "pass"), "fail", host=OLD_DRIVER, mode="bare metal",
    ),
    "l4-x2-one-at-x1.xml": Expected(
        "two L4 transcoding (ffmpeg, P0); the second trained at gen4 x1 of x16 under that load",
        2, "NVIDIA L4", "NVIDIA L4", "Ada Lovelace", "8.9", "data-centre",
        _v("pass", "pass", "pass", "fail", "pass"), "fail",
        fails={
            "pcie_link": "x1 of x16 at full generation with work on it: a slot, riser or lane-training fault",
            "persistence": PERSISTENCE_OFF,
        },
        per_gpu_override={("pcie_link", 1): "fail"},
        mode="bare metal",
    ),
    "gtx-1650-super-x8-p0.xml": Expected(
        "GeForce GTX 1650 SUPER at gen3 x8 of x16 in P0: a narrow slot",
        1, "GeForce GTX 1650 SUPER", None, "Turing", "7.5", "consumer",
        _v("fail", "skip", "skip", "skip", "pass"), "fail",
        fails={"pcie_link": "x8 of x16 in P0 at its full generation: no power-saving state, so the slot gives x8"},
        host=OLD_DRIVER, mode="bare metal",
    ),
    # --- MIG and passthrough of other generations ------------------------------------------------------------
    "a100-sxm4-40gb-mig-passthrough.xml": Expected(
        "A100 40GB passed through with MIG on (2 instances); ECC judged on the lifetime count; persistence off",
        1, "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "Ampere", "8.0", "data-centre",
        # Row remapping is N/A in the guest; whole-GPU readings skip under MIG.
        _v("pass", "pass", "skip", "fail", "skip", whole="skip"),
        "fail", fails={"persistence": PERSISTENCE_OFF}, host=OLD_DRIVER, mode="MIG",
    ),
    "p100-passthrough-driver510.xml": Expected(
        "P100 passed through on driver 510, persistence off",
        1, "Tesla P100-PCIE-16GB", "Tesla P100-PCIE-16GB", "Pascal", "6.0", "data-centre",
        _v("pass", "pass", "pass", "fail", "pass"), "fail", fails={"persistence": PERSISTENCE_OFF},
        host=OLD_DRIVER, mode="passthrough",
    ),
}  # fmt: skip

# Captures nvidia-smi could not have written whole: refused with one line naming the problem and the fix.
REFUSED = {
    "unreadable-gpu-no-uuid.xml": "GPU 0 has no uuid or PCI bus id; capture it with `nvidia-smi -q -x > FILE`",
}


def _fp(name: str) -> Fingerprint:
    return fingerprint(smi_xml=CAPTURES / name, probe_frameworks=False)


def _per_gpu(fp: Fingerprint) -> dict[tuple[str, int], Check]:
    src = health.reporter(fp)
    out: dict[tuple[str, int], Check] = {}
    for gpu in fp.gpus:
        out["whole_gpu", gpu.index] = health.whole_gpu(gpu, src)
        out["pcie_link", gpu.index] = health.pcie_link(gpu, None, source=src)
        out["ecc", gpu.index] = health.ecc(gpu, source=src)
        out["memory_retirement", gpu.index] = health.memory_retirement(gpu, source=src)
        out["persistence", gpu.index] = health.persistence(gpu, source=src)
        out["idle_throttle", gpu.index] = health.idle_throttle(gpu, source=src)
        out["thermal", gpu.index] = health.thermal(gpu, source=src)
        out["pcie_replays", gpu.index] = health.pcie_replays(gpu, source=src)
    return out


def _host(fp: Fingerprint) -> list[Check]:
    return [health.gpu_count(fp, None), health.driver_for_cuda(fp), health.stack_supports_arch(fp)]


def test_every_capture_has_expectations():
    assert sorted(p.name for p in CAPTURES.glob("*.xml")) == sorted([*EXPECTED, *REFUSED])
    readme = (CAPTURES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in [*EXPECTED, *REFUSED])
    # The schema generations the README says are held are those the captures name.
    dtds = {m.group(1) for p in CAPTURES.glob("*.xml") if (m := re.search(r"nvsmi_device_v(\d+)\.dtd", p.read_text()))}
    held = re.search(r"Schema generations held \(the DTD a capture names\): ([v\d, ]+)\.", " ".join(readme.split()))
    assert held and sorted(held.group(1).replace("v", "").split(", "), key=int) == sorted(dtds, key=int)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unreadable_capture_is_refused_with_one_line(name):
    with pytest.raises(GpulabError) as err:
        _fp(name)
    assert REFUSED[name] in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_parses_to_the_right_gpus(name):
    exp = EXPECTED[name]
    fp = _fp(name)
    assert len(fp.gpus) == exp.gpus
    assert fp.capture_attached_gpus == exp.attached
    for gpu in fp.gpus:
        if gpu.index in exp.name_overrides:
            assert (gpu.name, gpu.matrix_name) == exp.name_overrides[gpu.index]
            continue
        assert (gpu.name, gpu.matrix_name) == (exp.name, exp.matrix_name)
        reported = gpu.architecture.driver_name if gpu.architecture else None  # as the fingerprint writes it
        assert (reported, gpu.compute_capability, gpu.product_class) == (
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
    assert tuple(c.status for c in _host(fp)) == exp.host
    assert {health.mode(g) for g in fp.gpus} == {exp.mode}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_run_verdict(name):
    """The run's verdict over every check, as the report's front page gives it."""
    fp = _fp(name)
    report = Report(fingerprint=fp.to_dict(), checks=_host(fp) + list(_per_gpu(fp).values()))
    assert views.verdict(report) == EXPECTED[name].verdict
    assert "?" not in views.machine_name(report) and name in views.machine_name(report)


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


def test_mig_in_a_guest_is_judged_on_the_lifetime_ecc_count():
    # With MIG on, the driver reports the since-load ECC counts per instance only (N/A for the GPU).
    gpu = _fp("a100-sxm4-40gb-mig-passthrough.xml").gpus[0]
    e = gpu.ecc_errors
    assert (e.volatile_uncorrected, e.aggregate_uncorrected) == (None, 0)
    assert health.ecc(gpu).message.endswith("ECC on, no uncorrectable errors in the board's life")


def test_server_card_trained_x1_under_load_fails_naming_the_causes():
    fp = _fp("l4-x2-one-at-x1.xml")
    busy = fp.gpus[1]
    assert (busy.performance_state, busy.compute_processes, str(busy.pcie)) == ("P0", 1, "gen4/4 x1/16")
    check = health.pcie_link(busy, None, source=health.reporter(fp))
    assert check.status == "fail" and "width x1 of x16" in check.message and "failed to train" in check.message
    assert health.pcie_link(fp.gpus[0]).status == "pass"


def test_a_compute_capability_3_0_kepler_is_told_its_own_newest_stack():
    # The GRID K520's GK104 is compute capability 3.0, which CUDA 11.0 dropped: its last CUDA is 10.2.
    for name in ("grid-k520-kepler-driver352.xml", "grid-k520-inline-dtd.xml"):
        check = health.stack_supports_arch(_fp(name))
        assert check.status == "fail"
        assert (
            "GRID K520 (PCI id 10de:118a, Kepler): driver 352.99 predates every branch the matrix lists"
            in check.message
        )
        assert "the newest stack for this GPU is driver R470 (470.256.02), CUDA 10.2, no PyTorch" in check.message
