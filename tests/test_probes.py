"""Probes on the CPU (the GPU path runs in validate/ on GPU machines) and the judging of their numbers."""

import dataclasses
import math
from pathlib import Path

import pytest

from gpulab import compat
from gpulab.hw.discover import fingerprint
from gpulab.names import CommBackend, Framework, Launcher, Precision
from gpulab.probes import judge, torch_probes
from gpulab.probes.allreduce import bus_bandwidth, run_allreduce
from gpulab.records import Result

torch = pytest.importorskip("torch")
FIX = Path(__file__).parent / "fixtures" / "h200x4-firecracker"


def test_cpu_matmul_is_well_formed():
    r = torch_probes.matmul("cpu", Precision.FP32, torch_probes.CPU_SMALL)
    assert r.unit == "TFLOP/s" and math.isfinite(r.value) and r.value > 0
    assert r.launcher == "cpu" and r.n == torch.get_num_threads() and r.params["n"] == 1024


def test_cpu_copy_is_well_formed():
    r = torch_probes.copy_bandwidth("cpu", torch_probes.CPU_SMALL)
    assert r.workload == "copy_host" and r.unit == "GB/s" and r.value > 0


def test_allreduce_over_gloo_is_correct():
    r = run_allreduce(2, mib=4, iters=3)
    # from report /5 the probe's launcher is ddp (torchrun's process group) and its transport the comm_backend
    assert r.launcher is Launcher.DDP and r.comm_backend is (
        CommBackend.NCCL if torch.cuda.is_available() else CommBackend.GLOO
    )
    assert r.n == 2 and r.params["correct"] is True
    # the median window's bus bandwidth, each window as long as its slowest rank
    assert r.value == pytest.approx(bus_bandwidth(r.params["algbw_gbs"], 2))
    assert len(r.spread.windows) == 3 and r.spread.low <= r.value <= r.spread.high


def test_bus_bandwidth_formula():
    assert bus_bandwidth(100.0, 4) == pytest.approx(150.0)  # 2(n-1)/n as nccl-tests
    assert bus_bandwidth(100.0, 1) == 100.0


def test_pcie_figures():
    assert judge.pcie_gbs(5, 16) == pytest.approx(63.0, rel=1e-3)
    assert judge.pcie_gbs(3, 16) == pytest.approx(15.76, rel=1e-3)
    assert judge.pcie_gbs(None, 16) is None


@pytest.fixture
def h200():
    fp = fingerprint(smi_xml=FIX / "nvidia-smi-q-x.xml", probe_frameworks=False)
    return fp.gpus[0], compat.gpu_by_pci_id(fp.gpus[0].pci_device_id)


def _result(workload, precision, value, unit, device="cuda:0"):
    return Result(
        workload=workload,
        framework="torch",
        launcher="gpu",
        n=1,
        precision=Precision.parse_reported(precision),  # the table's text, read as a report row's is
        value=value,
        unit=unit,
        device=device,
    )


def test_reference_numbers_pass_and_low_ones_fail(h200):
    gpu, spec = h200
    # The reference scripts' H200 figures (shared/reference, 2026-11-21) must pass their bounds.
    for workload, precision, value, unit in [
        ("matmul", "bf16", 785, "TFLOP/s"),
        ("matmul", "fp32", 51, "TFLOP/s"),
        ("copy_d2d", "none", 4276, "GB/s"),
        ("h2d_pinned", "none", 55.4, "GB/s"),
    ]:
        r = _result(workload, precision, value, unit)
        exp = judge.expectation(r, gpu, spec)
        assert exp is not None, workload
        r.pct_of_spec = 100 * value / exp.spec_value
        assert judge.check(r, exp, workload).status == "pass", (workload, r.pct_of_spec)
        slow = dataclasses.replace(r, value=value * 0.4, pct_of_spec=40 * value / exp.spec_value)
        failed = judge.check(slow, exp, workload)
        assert failed.status == "fail" and "Likely causes" in failed.message
        assert failed.threshold == exp.threshold.name and exp.threshold.source


def test_host_transfer_judged_against_the_links_max(h200):
    gpu, spec = h200
    exp = judge.expectation(_result("h2d_pinned", "none", 50, "GB/s"), gpu, spec)
    assert exp is not None and exp.spec_value == pytest.approx(63.0, rel=1e-3)
    assert "gen5 x16" in exp.spec_label and "PCI-SIG" in exp.threshold.source


def test_allreduce_judged_against_nvlink_when_linked(h200):
    gpu, spec = h200
    r = Result(
        workload="allreduce",
        framework=Framework.TORCH,
        launcher=Launcher.DDP,
        n=4,
        precision=Precision.FP32,
        value=338,
        unit="GB/s",
    )
    nv = judge.expectation(r, gpu, spec, nvlink=True)
    pcie = judge.expectation(r, gpu, spec, nvlink=False)
    assert nv is not None and pcie is not None and nv.spec_value > pcie.spec_value


def test_one_slow_gpu_is_named():
    assert judge.slower_than_siblings({"cuda:0": 780, "cuda:1": 790, "cuda:2": 600, "cuda:3": 785}) == {
        "cuda:2": pytest.approx(600 / 782.5)
    }
    assert judge.slower_than_siblings({"cuda:0": 780}) == {}


NCCL_JSON = Path(__file__).parent / "fixtures" / "nccl-tests" / "all_reduce_perf.json"


def test_nccl_tests_json_is_read():
    import json

    from gpulab.probes.nccl_tests import parse_all_reduce_json

    r = parse_all_reduce_json(json.loads(NCCL_JSON.read_text()), str(NCCL_JSON))
    assert (r.workload, r.framework, r.n, r.precision) == ("allreduce", "nccl-tests", 4, "fp32")
    assert r.value == pytest.approx(338.31)  # the largest size, best of out-of-place / in-place
    assert r.params["bytes"] == 268435456 and r.params["correct"] is True


def test_nccl_tests_and_torch_all_reduce_are_two_checks(h200):
    """Both figures of one machine judged in one run: neither check may replace the other in the report."""
    import json

    from gpulab.probes.nccl_tests import parse_all_reduce_json

    gpu, spec = h200
    theirs = parse_all_reduce_json(json.loads(NCCL_JSON.read_text()), str(NCCL_JSON))
    ours = dataclasses.replace(theirs, framework=Framework.TORCH)  # the same row by torch's own probe
    names = [judge.check(r, judge.expectation(r, gpu, spec, nvlink=True), "all-reduce").name for r in (ours, theirs)]
    assert names == ["probe.allreduce.fp32[4 devices]", "probe.allreduce.nccl_tests.fp32[4 devices]"]


def test_nccl_tests_wrong_results_and_foreign_json():
    import json

    from gpulab.errors import GpulabError
    from gpulab.probes.nccl_tests import parse_all_reduce_json

    data = json.loads(NCCL_JSON.read_text())
    data["results"][-1]["in_place"]["nwrong"] = 12
    assert parse_all_reduce_json(data).params["correct"] is False
    with pytest.raises(GpulabError, match="not an nccl-tests JSON report"):
        parse_all_reduce_json({"schema": "something else"}, "other.json")
    data["results"] = []
    with pytest.raises(GpulabError, match="has no results"):
        parse_all_reduce_json(data)


def test_a_probes_likely_causes_never_name_a_cause_whose_checks_passed():
    from gpulab.probes import judge
    from gpulab.records import Check

    checks = [
        Check("health.pcie_link[0]", "pass", "gen5 x16"),
        Check("health.pcie_link[1]", "pass", "gen5 x16"),
        Check("occupancy.gpus_free", "fail", "GPU 1 in use"),
    ]
    text = judge.likely_causes("h2d_pinned", checks)
    likely, ruled_out = text.split(". Ruled out by this report: ")
    assert "PCIe link" not in likely and "PCIe link below its max gen/width (health.pcie_link passed)" in ruled_out
    assert "NUMA" in likely and "IOMMU" in likely
    matmul = judge.likely_causes("matmul", checks)
    assert "another process on the GPU" in matmul.split(". Ruled out")[0]  # occupancy failed: still likely
    assert "Ruled out" not in judge.likely_causes("matmul", [])  # nothing measured yet rules nothing out
