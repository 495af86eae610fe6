"""What a run tells its user while and after it trains: progress, memory needed, and why a GPU waited."""

from __future__ import annotations

import dataclasses

import pytest

from gpulab.launch import progress
from gpulab.launch.advice import gpu_busy_advice
from gpulab.records import GpuTelemetry, Result, TelemetrySummary


class CountingSession:
    model = None
    samples_per_step = 4
    steps = 6

    def __init__(self) -> None:
        self.info: dict = {}
        self.losses = iter(range(100, 0, -1))

    def step(self):
        return float(next(self.losses))


def test_the_timed_loop_reports_steps_rate_and_time_left(monkeypatch):
    from gpulab.launch.measuring import timed_loop

    monkeypatch.setattr(progress, "INTERVAL_S", 0.0)
    seen: list[progress.Progress] = []
    with progress.listening(seen.append):
        timing = timed_loop(CountingSession(), 2, ["cpu"])
    assert [(p.phase, p.done) for p in seen] == [("warm-up", 1), ("warm-up", 2)] + [("timed", k) for k in range(1, 7)]
    last = seen[-1]
    assert last.text().startswith("timed 6/6 · ") and "samples/s" in last.text() and last.left_s == 0
    assert (timing.first_loss, timing.loss) == (100.0, 93.0)  # the first warm-up loss and the last timed one
    with progress.listening(seen.append):
        pass
    timed_loop(CountingSession(), 0, ["cpu"])  # no listener: nothing reported, nothing fails
    assert len(seen) == 8


def test_progress_text():
    p = progress.Progress("timed", 25, 100, 128, 10.0)
    assert p.rate == pytest.approx(320.0) and p.left_s == pytest.approx(30.0)
    assert p.text() == "timed 25/100 · 320 samples/s · 30 s left"
    assert progress.Progress("warm-up", 1, 3, 8, 150.0).text() == "warm-up 1/3 · 5:00 left"


def _row(util: float, data: str | None, workers: int | None) -> Result:
    tel = TelemetrySummary(samples=10, interval_s=0.1, per_gpu=[GpuTelemetry(0, util_mean=util)])
    params = {"data": data, "num_workers": workers}
    return Result(
        "resnet50", "torch", "gpu", 1, "bf16", 360.0, "samples/s", device="cuda:0", params=params, telemetry=tel
    )


def test_a_starved_gpu_is_explained():
    starved = gpu_busy_advice(_row(11, "/data/jpegs", 1))
    assert starved.startswith("GPU busy only 11 % of the timed loop: the input pipeline (1 DataLoader workers)")
    assert "try --num-workers" in starved
    assert "launch-bound" in gpu_busy_advice(_row(40, None, None))
    assert gpu_busy_advice(_row(83, "/data/jpegs", 12)) is None
    assert gpu_busy_advice(dataclasses.replace(_row(11, None, None), telemetry=None)) is None


def test_a_run_records_its_loader_workers_and_learning(tmp_path):
    pytest.importorskip("torch")
    from gpulab.launch import run_cpu
    from gpulab.records import RunConfig

    synthetic = run_cpu(RunConfig("mnist", size="tiny", steps=20, warmup=1), threads=1)
    assert synthetic.params["num_workers"] is None  # no loader without real data
    assert synthetic.params["first_loss"] is not None and synthetic.params["loss_falling"] in (True, False)


def test_away_from_a_terminal_a_run_prints_a_few_progress_lines():
    import io

    from gpulab.launch.commands import _show

    class Described:
        def describe(self) -> str:
            return "mnist on cpu"

    out = io.StringIO()
    show = _show(None, Described(), stream=out)  # type: ignore[arg-type]
    show(progress.Progress("warm-up", 3, 3, 64, 0.3))
    for done in range(1, 201):
        show(progress.Progress("timed", done, 200, 64, done * 0.01))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("mnist on cpu, warm-up: 3/3 steps (100 %)")
    timed = [line for line in lines if ", timed: " in line]
    assert len(timed) == 10 and timed[-1].startswith("mnist on cpu, timed: 200/200 steps (100 %)")
    assert "left" in timed[0]
