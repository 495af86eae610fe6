"""Speedup and scaling math (pure functions over Results)."""

from __future__ import annotations

import pytest

from gpulab.names import Framework, Launcher, Precision
from gpulab.records import Result
from gpulab.report.scaling import scaling, speedups


def row(
    launcher, n, value, workload="resnet50", precision=Precision.BF16, devices=None, unit="samples/s", framework="torch"
):
    if devices is None:
        devices = ["cpu"] if launcher == "cpu" else [f"cuda:{k}" for k in range(n)]
    return Result(
        workload, Framework.parse(framework), Launcher.parse(launcher), n, precision, value, unit, devices=devices
    )


def by_pair(items):
    return {(s.from_, s.to): s.ratio for s in items}


def test_speedups_cpu_one_thread_all_threads_and_one_gpu():
    results = [row("cpu", 1, 10.0), row("cpu", 4, 30.0), row("cpu", 64, 200.0), row("gpu", 1, 4000.0)]
    got = by_pair(speedups(results))
    assert got == {
        ("cpu:1", "gpu:1"): pytest.approx(400.0),
        ("cpu:64", "gpu:1"): pytest.approx(20.0),
        ("cpu:1", "cpu:64"): pytest.approx(20.0),
    }
    s = speedups(results)[0]
    assert (s.workload, s.framework, s.precision) == ("resnet50", "torch", "bf16")


def test_speedups_need_both_ends_and_a_gpu_row_meets_cpu_rows_of_its_precision_else_fp32():
    assert (
        speedups([row("cpu", 1, 10.0, precision=Precision.TF32), row("gpu", 1, 100.0, precision=Precision.BF16)]) == []
    )
    mixed = [
        row("cpu", 1, 10.0, precision=Precision.FP32),
        row("cpu", 8, 40.0, precision=Precision.FP32),
        row("gpu", 1, 800.0),
    ]
    assert by_pair(speedups(mixed)) == {
        ("cpu:1 fp32", "gpu:1"): 80.0,
        ("cpu:8 fp32", "gpu:1"): 20.0,
        ("cpu:1", "cpu:8"): 4.0,
    }
    assert {s.precision for s in speedups(mixed) if s.to == "gpu:1"} == {"bf16"}
    same = [*mixed, row("cpu", 1, 5.0)]  # a bf16 CPU row exists: the GPU's own precision wins
    assert by_pair(s for s in speedups(same) if s.precision == "bf16") == {("cpu:1", "gpu:1"): 160.0}
    assert by_pair(speedups([row("cpu", 1, 10.0), row("cpu", 2, 15.0)])) == {("cpu:1", "cpu:2"): 1.5}
    assert speedups([row("gpu", 1, 100.0)]) == []


def test_repeated_rows_of_a_key_count_by_their_median():
    gpus = [row("gpu", 1, v) for v in (1000.0, 500.0, 990.0)]  # one slow repeat among three
    assert by_pair(speedups([row("cpu", 1, 10.0), *gpus])) == {("cpu:1", "gpu:1"): 99.0}  # 990: not first, not last
    two = [row("gpu", 1, 100.0), row("gpu", 1, 200.0)]
    assert by_pair(speedups([row("cpu", 1, 10.0), *two])) == {("cpu:1", "gpu:1"): 10.0}  # the lower middle row


def test_multi_gpu_scaling_is_against_the_launchers_one_gpu_row_else_the_gpu_row():
    """Figures measured on 4× H200 (resnet50 bf16, 256/GPU): DDP efficiency is quoted against DDP on one GPU."""
    results = [
        row("gpu", 1, 4698.2),
        row("ddp", 1, 4581.5),
        row("ddp", 2, 9122.1),
        row("ddp", 4, 18153.8),
        row("dataparallel", 4, 475.2),
        row("sweep", 4, 18761.1),
    ]
    got = {(s.launcher, s.n): s for s in scaling(results)}
    assert set(got) == {("ddp", 1), ("ddp", 2), ("ddp", 4), ("dataparallel", 4), ("sweep", 4)}
    four = got[("ddp", 4)]
    assert four.speedup == pytest.approx(18153.8 / 4581.5) and four.efficiency == pytest.approx(0.9906, abs=1e-4)
    assert four.throughput == 18153.8 and four.expected is None
    assert got[("ddp", 1)].efficiency == 1.0
    assert got[("sweep", 4)].efficiency == pytest.approx(18761.1 / 4698.2 / 4)  # no sweep:1 row: against gpu:1
    assert got[("dataparallel", 4)].efficiency == pytest.approx(475.2 / 4698.2 / 4)


def test_without_a_gpu_row_the_launcher_own_n1_row_is_the_base():
    results = [row("ddp", 1, 100.0), row("ddp", 2, 180.0), row("dataparallel", 2, 50.0)]
    got = {(s.launcher, s.n): s.efficiency for s in scaling(results)}
    assert got == {("ddp", 1): 1.0, ("ddp", 2): pytest.approx(0.9)}  # dataparallel has no base: left out
    gpu_base = {(s.launcher, s.n): s.speedup for s in scaling([row("gpu", 1, 50.0), row("dataparallel", 2, 80.0)])}
    assert gpu_base == {("dataparallel", 2): pytest.approx(1.6)}


def test_cpu_process_runs_are_not_measured_against_a_gpu():
    cpu2 = ["cpu", "cpu"]
    results = [row("gpu", 1, 1000.0), row("ddp", 1, 10.0, devices=["cpu"]), row("ddp", 2, 19.0, devices=cpu2)]
    got = {(s.launcher, s.n): s.speedup for s in scaling(results)}
    assert got == {("ddp", 1): 1.0, ("ddp", 2): pytest.approx(1.9)}


def test_one_thread_cpu_processes_fall_back_to_the_one_thread_cpu_row():
    procs = row("sweep", 2, 18.0, devices=["cpu", "cpu"])
    procs.params["threads"] = 1
    fat = row("ddp", 2, 30.0, devices=["cpu", "cpu"])
    fat.params["threads"] = 4  # 2 × 4 threads: not comparable with one thread
    got = {(s.launcher, s.n): s.efficiency for s in scaling([row("cpu", 1, 10.0), procs, fat])}
    assert got == {("cpu", 1): 1.0, ("sweep", 2): pytest.approx(0.9)}


def test_cpu_threads_scale_against_one_thread():
    got = {s.n: s.efficiency for s in scaling([row("cpu", 1, 10.0), row("cpu", 8, 60.0), row("gpu", 1, 99.0)])}
    assert got == {1: 1.0, 8: pytest.approx(0.75)}


def test_groups_stay_apart():
    results = [
        row("gpu", 1, 100.0),
        row("ddp", 2, 190.0),
        row("gpu", 1, 50.0, precision=Precision.FP32),
        row("ddp", 2, 100.0, precision=Precision.FP32),
        row("gpu", 1, 10.0, workload="mnist"),
        row("ddp", 2, 20.0, workload="mnist", framework="tensorflow"),  # no tensorflow gpu row
    ]
    got = {(s.workload, s.framework, s.precision, s.n): s.efficiency for s in scaling(results)}
    assert got == {("resnet50", "torch", "bf16", 2): pytest.approx(0.95), ("resnet50", "torch", "fp32", 2): 1.0}


def test_expected_efficiency_most_specific_key_wins():
    results = [row("gpu", 1, 100.0), row("ddp", 2, 196.0), row("ddp", 4, 380.0), row("sweep", 4, 399.0)]
    expected = {
        "ddp": 0.9,
        "resnet50:ddp:4": {"efficiency": 0.98, "source": "reference script, 4x H200 (99.6 %)"},
        "*": {"efficiency": 0.95},
    }
    got = {(s.launcher, s.n): (s.expected, s.expected_source) for s in scaling(results, expected)}
    assert got[("ddp", 4)] == (0.98, "reference script, 4x H200 (99.6 %)")
    assert got[("ddp", 2)] == (0.9, "expected efficiency")
    assert got[("sweep", 4)] == (0.95, "expected efficiency")


def test_rows_without_a_usable_value_are_ignored():
    assert scaling([row("gpu", 1, 0.0), row("ddp", 2, 10.0)]) == []
    assert speedups([row("cpu", 1, 0.0), row("gpu", 1, 5.0)]) == []
