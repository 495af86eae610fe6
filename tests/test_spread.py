"""A figure's spread and the verdicts that use it: intervals of the median and of ratios, a bound judging an
interval, the re-measure of a straddling figure, scaling efficiency's faults and hints, and DDP's one- and
N-process windows interleaved in one real job (two gloo processes)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from gpulab.names import CommBackend, ValidationTier
from gpulab.records import Check, GpuTelemetry, Result, RunConfig, TelemetrySummary, Threshold
from gpulab.report import spread
from gpulab.validation import remeasure, verdicts
from gpulab.validation.session import Lab, Options

TESTS = Path(__file__).parent
FLOOR = Threshold("scaling.ddp.min_efficiency", 0.9, "fraction", "test floor")


def test_eight_windows_give_the_order_statistics_interval_of_the_median():
    windows = [103.0, 97.0, 100.0, 99.0, 101.0, 98.0, 102.0, 96.0]
    s = spread.of_windows(windows, "samples/s")
    assert s.median == pytest.approx(99.5) and s.method == "order statistics" and s.confidence == 0.9
    ordered = sorted(windows)
    assert (s.low, s.high) == (ordered[1], ordered[6])  # x(2)..x(7) of 8 covers the median with >= 90 %
    assert s.windows == windows and s.unit == "samples/s"


def test_five_windows_reach_ninety_percent_with_their_range_and_fewer_say_what_they_reach():
    five = spread.of_windows([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (five.low, five.median, five.high, five.confidence) == (1.0, 3.0, 5.0, 0.9)
    three = spread.of_windows([3.0, 1.0, 2.0])
    assert (three.low, three.high, three.method) == (1.0, 3.0, "range")
    assert three.confidence == pytest.approx(0.75)  # 1 - 2 x 0.5^3
    one = spread.of_windows([7.0])
    assert (one.low, one.median, one.high, one.confidence) == (7.0, 7.0, 7.0, 0.0)
    with pytest.raises(ValueError):
        spread.of_windows([])


def test_a_ratio_gets_a_seeded_bootstrap_interval_around_the_ratio_of_medians():
    top = [198.0, 201.0, 199.0, 202.0, 200.0, 197.0, 203.0, 200.0]
    bottom = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.2, 99.8]
    first = spread.of_ratio(top, bottom, 1 / 2, "fraction")
    assert first.median == pytest.approx(statistics.median(top) / statistics.median(bottom) / 2)
    assert first.low < first.median < first.high and first.method == "bootstrap"
    assert first.high - first.low < 0.03
    assert spread.of_ratio(top, bottom, 1 / 2) == spread.of_ratio(top, bottom, 1 / 2)  # a verdict never depends on luck
    few = spread.of_ratio([2.0, 2.2], [1.0], 1.0)
    assert (few.low, few.high, few.method) == (2.0, 2.2, "range")
    with pytest.raises(ValueError):
        spread.of_ratio([1.0], [0.0])


def test_a_bound_judges_the_interval_not_the_median():
    s = spread.of_windows([88.0, 89.0, 90.0, 91.0, 92.0, 93.0, 94.0, 95.0])
    assert spread.position(s, 85.0) == "above"
    assert spread.position(s, 100.0) == "below"
    assert spread.position(s, 91.0) == "straddles"  # the median is above 91, the interval is not
    assert spread.text(s, lambda v: f"{v:.0f}") == "92 [89–94] (8)"


def _row(value: float, windows: list[float]) -> Result:
    return Result(
        "resnet50", "torch", "gpu", 1, "bf16", value, "samples/s", spread=spread.of_windows(windows, "samples/s")
    )


def test_a_straddling_figure_is_measured_again_with_more_windows_and_merged_into_the_same_row():
    row = _row(90.0, [80.0, 85.0, 90.0, 95.0, 100.0])
    row.spec_value = 100.0
    judged: list[int] = []

    def judge() -> Check:
        judged.append(len(row.spread.windows))
        return Check(
            "x", spread.position(row.spread, 86.0).replace("straddles", "marginal").replace("above", "pass"), ""
        )

    def again() -> None:
        remeasure.merge_into(row, _row(97.0, [96.0, 97.0, 97.5, 98.0, 99.0, 96.5, 97.2, 98.2, 97.8, 96.8]))

    check = remeasure.settle(judge, again)
    assert judged == [5, 15] and check.status == "pass" and check.evidence["remeasured"] is True
    assert row.value == pytest.approx(statistics.median(row.spread.windows)) and row.pct_of_spec == row.value
    assert row.params["remeasured"]["windows_added"] == 10
    # Still straddling after the re-measure: marginal, saying so.
    wide = _row(90.0, [70.0, 80.0, 90.0, 100.0, 110.0])
    check = remeasure.settle(
        lambda: Check("y", "marginal" if spread.position(wide.spread, 90.0) == "straddles" else "pass", "m"),
        lambda: remeasure.merge_into(wide, _row(90.0, [70.0, 80.0, 90.0, 100.0, 110.0])),
    )
    assert check.status == "marginal" and "still straddling" in check.message


@pytest.fixture
def lab() -> Lab:
    from gpulab.hw.discover import fingerprint

    fp = fingerprint(smi_xml=TESTS / "fixtures" / "h200x4-firecracker" / "nvidia-smi-q-x.xml", probe_frameworks=False)
    return Lab(options=Options(tier=ValidationTier.STANDARD), fingerprint=fp, gpus=fp.gpus[:2])


def test_efficiency_above_a_hundred_percent_beyond_its_noise_is_a_measurement_fault(lab):
    eff = spread.of_ratio([272.0] * 4 + [270.0, 274.0, 271.0, 273.0], [100.0] * 8, 1 / 2)
    check = verdicts.efficiency(lab, "scaling.sweep[style_transfer,2]", "sweep", eff, 2, FLOOR)
    assert check.status == "error" and "measurement fault" in check.message and eff.low > 1.0
    noisy = spread.of_ratio([190.0, 200.0, 210.0, 205.0, 195.0, 199.0, 201.0, 203.0], [100.0] * 8, 1 / 2)
    assert verdicts.efficiency(lab, "s", "sweep", noisy, 2, FLOOR).status == "pass"  # 100 % within its noise


def test_a_superlinear_efficiency_is_measured_again_once_before_it_is_called_a_fault(lab):
    # The sides of a 2x H200 sweep: 208 per GPU together against 189 one at a time, then a fair second look.
    many, one = _row(416.0, [416.0, 420.0, 412.0, 418.0]), _row(189.0, [189.0, 190.0, 188.0, 189.5])
    looks: list[int] = []

    def judge() -> Check:
        looks.append(len(many.spread.windows))
        eff = spread.of_ratio(spread.windows_of(many), spread.windows_of(one), 1 / 2)
        return verdicts.efficiency(lab, "scaling.sweep[style_transfer,2]", "sweep", eff, 2, FLOOR)

    check = remeasure.settle(judge, lambda: remeasure.merge_into(one, _row(208.0, [208.0] * 8)))
    assert looks == [4, 4] and check.status == "pass" and check.evidence["remeasured"] is True
    # The same fault twice stays a fault, and says it was measured again.
    fast = _row(189.0, [189.0, 190.0, 188.0, 189.5])
    check = remeasure.settle(
        lambda: verdicts.efficiency(
            lab, "s", "sweep", spread.of_ratio(spread.windows_of(many), spread.windows_of(fast), 1 / 2), 2, FLOOR
        ),
        lambda: remeasure.merge_into(fast, _row(189.0, [189.0] * 8)),
    )
    assert check.status == "error" and "still above 100 %" in check.message


def test_efficiency_straddling_the_floor_is_marginal_and_below_it_fails(lab):
    straddle = spread.of_ratio([172.0, 176.0, 180.0, 184.0, 188.0, 178.0, 182.0, 186.0], [100.0] * 8, 1 / 2)
    check = verdicts.efficiency(lab, "scaling.ddp[resnet50,2]", "ddp", straddle, 2, FLOOR)
    assert check.status == "marginal" and check.evidence["interval"][0] < 0.9 < check.evidence["interval"][1]
    assert check.threshold == FLOOR.name
    below = spread.of_ratio([160.0, 161.0, 162.0, 163.0, 164.0, 165.0, 166.0, 167.0], [100.0] * 8, 1 / 2)
    assert verdicts.efficiency(lab, "scaling.ddp[resnet50,2]", "ddp", below, 2, FLOOR).status == "fail"


def test_a_scaling_hint_never_points_at_a_check_that_passed(lab):
    lab.report.checks += [
        Check("probe.allreduce", "pass", "297.7 GB/s"),
        Check("probe.p2p", "pass", "peer access works"),
        Check("probe.gpus_alike.bf16", "fail", "cuda:1 at 70 % of the median"),
    ]
    many = Result("resnet50", "torch", "ddp", 2, "bf16", 160.0, "samples/s")
    many.telemetry = TelemetrySummary(
        10,
        0.1,
        per_gpu=[GpuTelemetry(0, util_mean=99.0), GpuTelemetry(1, util_mean=62.0, throttle_reasons=["hw_slowdown"])],
    )
    below = spread.of_ratio([160.0] * 8, [100.0] * 8, 1 / 2)
    check = verdicts.efficiency(lab, "scaling.ddp[resnet50,2]", "ddp", below, 2, FLOOR, many)
    ruled_out, left = check.message.split("Ruled out by this report: ")[1].split("Left: ")
    assert "probe.allreduce passed" in ruled_out and "probe.p2p passed" in ruled_out
    assert "probe.allreduce" not in left and "probe.p2p" not in left
    assert "probe.gpus_alike.bf16 fail" in left and "GPU 1 throttled by hw_slowdown" in left and "62 % busy" in left


def test_nothing_measured_yet_is_left_open_not_ruled_out(lab):
    below = spread.of_ratio([160.0] * 8, [100.0] * 8, 1 / 2)
    message = verdicts.efficiency(lab, "scaling.ddp[resnet50,2]", "ddp", below, 2, FLOOR).message
    assert "Ruled out" not in message and "the all-reduce bandwidth (not measured in this run)" in message


torch = pytest.importorskip("torch")


def test_ddp_one_and_two_processes_interleaved_in_one_real_job(monkeypatch):
    """Two gloo ranks; rank 0 also trains the workload as DDP over a group of itself alone, windows alternating."""
    from gpulab.launch import run_ddp_pair

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))
    cfg = RunConfig("stub", batch=4, steps=8, warmup=1, size="tiny")
    one, two = run_ddp_pair(cfg, 2, comm_backend=CommBackend.GLOO, builder="test_launch_stub:build", timeout_s=240)
    assert (one.launcher, one.n, one.devices, two.n, two.devices) == ("ddp", 1, ["cpu"], 2, ["cpu", "cpu"])
    for row in (one, two):
        assert len(row.spread.windows) == 8 and row.value == pytest.approx(statistics.median(row.spread.windows))
        assert row.iterations == 8 and row.batch == 4 and "ABBA" in row.params["interleaved"]
        assert row.params["loss_finite"] is True and row.comm_backend is CommBackend.GLOO
    assert two.params["world"] == 2 and one.params["world"] == 1
    # two ranks each consume a batch per step: twice the samples a window
    assert two.params["global_batch"] == 8


def test_a_rows_value_is_the_authority_over_windows_that_disagree_with_it():
    row = _row(100.0, [98.0, 99.0, 100.0, 101.0, 102.0])
    assert spread.windows_of(row) == row.spread.windows
    row.value *= 100  # a hand-edited baseline: its windows were left as they were
    assert spread.windows_of(row) == pytest.approx([9800.0, 9900.0, 10000.0, 10100.0, 10200.0])
