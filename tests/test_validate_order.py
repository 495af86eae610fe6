"""validate/'s speedup and scaling rows in any order: each finds its one-GPU baseline, measured once per run.

The suite runs as users run it, on this machine with two fake GPUs and fake launchers (tests/validate_fakes.py),
so the multi-GPU tests run here; the fakes log every launch, which shows what was measured and how often.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpulab.errors import GpulabError
from gpulab.hw.discover import fingerprint
from gpulab.names import Precision, ValidationTier
from gpulab.records import Report, Result, RunConfig
from gpulab.report.io import load_report
from gpulab.validation.baselines import OneGpuBaselines
from gpulab.validation.expectations import speedup_config
from gpulab.validation.session import Lab, Options

pytest.importorskip("torch", reason="validate/'s workload tests need torch")

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "h200x4-firecracker"
HAS_TF = importlib.util.find_spec("tensorflow") is not None
needs_tf = pytest.mark.skipif(not HAS_TF, reason="TensorFlow is not installed")

ALL_ROWS = "test_scaling or test_speedup or (test_tensorflow and not sees_gpus)"


def run_fake_gpus(
    tmp_path: Path,
    select: str,
    order: str = "usual",
    extra_env: dict[str, str] | None = None,
    expect_rc: int = 0,
    tier: str = "standard",
) -> tuple[Report, list[dict[str, object]]]:
    """validate/ at `tier` on two fake GPUs: the report and the launches, in order."""
    calls = tmp_path / "calls.jsonl"
    env = {
        **(extra_env or {}),
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])),
        "GPULAB_FAKE_CALLS": str(calls),
        "GPULAB_FAKE_ORDER": order,
    }
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "validate"), "-p", "no:cacheprovider", "-p", "validate_fakes"]
    cmd += ["--report-dir", str(tmp_path), "--tier", tier, "-k", select, "-v"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == expect_rc, proc.stdout + proc.stderr
    (tmp_path / "stdout.txt").write_text(proc.stdout)
    reports = sorted(tmp_path.glob("report-*.json"))
    assert len(reports) == 1, proc.stdout
    launches = [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
    return load_report(reports[0]), launches


def one_gpu_launches(launches: list[dict[str, object]]) -> Counter[tuple[object, object]]:
    return Counter((c["framework"], c["workload"]) for c in launches if c["launcher"] == "gpu")


def one_gpu_rows(report: Report) -> Counter[tuple[str, str]]:
    return Counter((r.framework, r.workload) for r in report.results if r.launcher == "gpu" and r.n == 1)


def checks(report: Report, prefix: str) -> dict[str, tuple[str, str]]:
    return {c.name: (c.status, c.message) for c in report.checks if c.name.startswith(prefix)}


def test_ddp_scaling_on_its_floor_is_measured_again_then_marginal_and_the_run_exits_0(tmp_path):
    # The fake pair has no NVLink in its captured topology: its floor is 75 %, and 0.75 sits on it.
    report, launches = run_fake_gpus(tmp_path, "test_scaling and ddp", extra_env={"GPULAB_FAKE_DDP_EFFICIENCY": "0.75"})
    assert [t.value for t in report.thresholds if t.name == "scaling.ddp.min_efficiency"] == [0.75]
    assert [(c["launcher"], c["n"]) for c in launches] == [("ddp", 1), ("ddp", 2)] * 2  # measured, then again
    check = next(c for c in report.checks if c.name == "scaling.ddp[resnet50,2]")
    assert check.status == "marginal" and check.evidence["remeasured"] is True
    low, high = check.evidence["interval"]
    assert low < 0.75 < high and check.evidence["windows"] == 16
    stdout = (tmp_path / "stdout.txt").read_text()
    assert "MARGINAL scaling.ddp[resnet50,2]:" in stdout and "1 marginal" in stdout
    # the re-measure's windows joined the same rows: one row per side, 16 windows each
    ddp = [r for r in report.results if r.launcher == "ddp"]
    assert sorted(r.n for r in ddp) == [1, 2] and all(len(r.spread.windows) == 16 for r in ddp)


def test_ddp_scaling_below_its_floor_fails(tmp_path):
    report, _ = run_fake_gpus(
        tmp_path, "test_scaling and ddp", extra_env={"GPULAB_FAKE_DDP_EFFICIENCY": "0.6"}, expect_rc=1
    )
    check = next(c for c in report.checks if c.name == "scaling.ddp[resnet50,2]")
    assert check.status == "fail" and "remeasured" not in check.evidence
    assert "Left: " in check.message and "not measured in this run" in check.message


def test_dataparallel_scaling_alone_measures_its_baseline_once(tmp_path):
    report, launches = run_fake_gpus(tmp_path, "test_scaling and dataparallel", tier="full")
    assert [(c["launcher"], c["n"]) for c in launches] == [("gpu", 1), ("dataparallel", 2)]
    assert one_gpu_rows(report) == {("torch", "resnet50"): 1}
    check = next(c for c in report.checks if c.name == "scaling.dataparallel[resnet50,2]")
    assert check.status == "pass" and check.evidence["speedup"] == pytest.approx(2.0)
    assert "vs 100 on one" in check.message


@needs_tf
def test_tf_mirrored_scaling_alone_finds_its_baseline(tmp_path):
    report, launches = run_fake_gpus(tmp_path, "test_tf_mirrored_scaling")
    assert one_gpu_launches(launches) == {("tensorflow", "resnet50"): 1, ("tensorflow", "cifar10"): 1}
    assert one_gpu_rows(report) == {("tensorflow", "resnet50"): 1, ("tensorflow", "cifar10"): 1}
    got = checks(report, "scaling.tf_mirrored")
    assert set(got) == {"scaling.tf_mirrored[resnet50,2]", "scaling.tf_mirrored[cifar10,2]"}
    assert {status for status, _ in got.values()} == {"pass"}, got
    assert all("efficiency 100.0%" in message for _, message in got.values())


@needs_tf
@pytest.mark.parametrize("order", ["usual", "reverse"])
def test_every_one_gpu_row_is_measured_once_in_either_order(tmp_path, order):
    report, launches = run_fake_gpus(tmp_path, ALL_ROWS, order)
    workloads = {"style_transfer", "mnist", "cifar10", "chexnet", "resnet50"}
    expected = {(framework, w): 1 for framework in ("torch", "tensorflow") for w in workloads}
    assert one_gpu_launches(launches) == expected
    assert one_gpu_rows(report) == expected  # the speedup and scaling tests share the rows: none repeated
    scaling = checks(report, "scaling.")
    # DataParallel's comparison row is the full tier's: at the standard tier it says so and measures nothing
    status, message = scaling.pop("scaling.dataparallel[resnet50,2]")  # under its own name, as the full tier's
    assert status == "skip" and "at the full tier" in message
    assert set(scaling) == {
        "scaling.ddp[resnet50,2]",
        "scaling.sweep[style_transfer,2]",
        "scaling.tf_mirrored[resnet50,2]",
        "scaling.tf_mirrored[cifar10,2]",
    }
    assert {status for status, _ in scaling.values()} == {"pass"}, scaling
    assert not [c for c in launches if c["launcher"] == "dataparallel"]
    speedup = checks(report, "speedup.gpu_over_cpu")
    assert len(speedup) == 10
    # whichever comes first, every GPU row is judged against its CPU rows, and each CPU row is measured once
    assert {status for status, _ in speedup.values()} == {"pass"}, speedup
    cpu = Counter((c["framework"], c["workload"], c["n"]) for c in launches if c["launcher"] == "cpu")
    assert set(cpu.values()) == {1} and len(cpu) == 2 * len(workloads) * len({1, os.cpu_count() or 1}), cpu


def lab() -> Lab:
    fp = fingerprint(smi_xml=FIX / "nvidia-smi-q-x.xml", probe_frameworks=False)
    return Lab(options=Options(tier=ValidationTier.STANDARD), fingerprint=fp, gpus=fp.gpus[:2])


def test_baselines_are_kept_per_framework_and_config_and_failures_are_not_kept():
    measured: list[tuple[str, str, str]] = []
    failures = [GpulabError("no GPU answered")]  # the first measurement fails

    def measure(cfg: RunConfig, framework: str) -> Result:
        if failures:
            raise failures.pop()
        measured.append((framework, cfg.workload, cfg.size))
        return Result(cfg.workload, framework, "gpu", 1, cfg.precision, 100.0, "samples/s", device="cuda:0")

    the_lab = lab()
    baselines = OneGpuBaselines(the_lab, measure)
    with pytest.raises(GpulabError, match="no GPU answered"):
        baselines(speedup_config("mnist", "standard"))
    assert the_lab.report.results == [] and measured == []
    first = baselines(speedup_config("mnist", "standard"))
    assert (
        baselines(RunConfig("mnist", precision=Precision.BF16, size="standard")) is first
    )  # the same config, built anew
    baselines(speedup_config("mnist", "standard", "tensorflow"), "tensorflow")
    baselines(speedup_config("mnist", "full"))
    assert measured == [("torch", "mnist", "standard"), ("tensorflow", "mnist", "standard"), ("torch", "mnist", "full")]
    assert len(the_lab.report.results) == 3 and the_lab.report.results[0] is first
