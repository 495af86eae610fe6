"""Launchers on the CPU: cpu threads, DDP over gloo with two real processes, DataParallel pass-through, a psweep
sweep of two CPU processes, the batch policy and the linear scaling rule. The GPU paths run in validate/."""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

import pytest

from gpulab.errors import GpulabError, UnknownValue
from gpulab.launch import Launch, plan_batch, run_cpu, run_dataparallel, run_ddp, run_gpu, run_sweep
from gpulab.launch.planning import check_config, config_from_dict, config_to_dict, resolve_builder
from gpulab.names import CommBackend
from gpulab.records import Report, Result, RunConfig
from gpulab.report.io import jsonable, report_json, schema_errors, write_report
from test_launch_stub import BUILDER, stub_data, stub_model

torch = pytest.importorskip("torch")
TESTS = Path(__file__).parent
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour of a machine without GPUs")


@pytest.fixture
def child_path(monkeypatch):
    """Child processes (DDP ranks, sweep runs) import the stub workload from tests/."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])))


def assert_reportable(result: Result) -> None:
    """The result fits the report schema (report_json validates and refuses NaN and non-JSON values)."""
    report_json(Report(fingerprint={"host": {"hostname": "test"}}, results=[result]))


@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_launcher_uses_the_threads_asked_for(threads):
    before = torch.get_num_threads()
    r = run_cpu(RunConfig("stub", size="tiny", warmup=1), threads, builder=BUILDER)
    assert (r.launcher, r.n, r.device, r.devices, r.framework) == ("cpu", threads, "cpu", ["cpu"], "torch")
    assert r.unit == "samples/s" and r.value > 0 and math.isfinite(r.value)
    assert r.batch == 8 and r.iterations == 5
    # five steps are five timed windows: the figure is their median, the interval their range (too few for 90 %)
    assert len(r.spread.windows) == 5 and r.value == pytest.approx(statistics.median(r.spread.windows))
    assert r.spread.low <= r.value <= r.spread.high and r.spread.method == "order statistics"
    assert sum(8 / w for w in r.spread.windows) == pytest.approx(r.seconds, rel=0.2)  # the windows cover the loop
    assert r.params["threads"] == threads and r.params["batch_policy"] == "per_device"
    assert r.params["global_batch"] == 8 and r.params["lr_scaled"] is False
    assert r.params["data"] is None and r.params["model"] == "linear 4->2"  # session.info is kept
    assert r.params["loss_finite"] is True and len(r.params["weights"]) == 10  # finish() facts are kept
    assert torch.get_num_threads() == before
    assert_reportable(r)


def test_ddp_over_gloo_matches_one_process_on_the_whole_batch(child_path, tmp_path):
    """Two gloo ranks with 4 samples each, linear scaling rule on: one step must equal one process training
    on the 8 samples with lr × 2 (DDP averages the gradients)."""
    cfg = RunConfig("stub", batch=4, steps=1, warmup=0, size="tiny", params={"learning_rate": 0.05})
    r = run_ddp(cfg, 2, scale_lr=True, comm_backend=CommBackend.GLOO, builder=BUILDER, timeout_s=240)
    assert (r.launcher, r.n, r.devices, r.batch, r.iterations) == ("ddp", 2, ["cpu", "cpu"], 4, 1)
    p = r.params
    assert r.comm_backend is CommBackend.GLOO and "backend" not in p
    assert p["world"] == 2 and len(p["rank_seconds"]) == 2
    assert p["batch_policy"] == "per_device" and p["per_device_batch"] == 4 and p["global_batch"] == 8
    assert p["lr_scaled"] is True and p["lr_base"] == 0.05 and p["lr"] == pytest.approx(0.1) and p["lr_factor"] == 2
    assert p["lr_param"] == "learning_rate" and p["workload_params"] == {"learning_rate": 0.05}
    assert p["lr_used"] == pytest.approx(0.1)  # the workload was built with the scaled lr
    # one step, one window: samples of both ranks over the slowest rank's window
    assert r.spread.windows == [pytest.approx(r.value)] and r.value == pytest.approx(8 / r.seconds, rel=0.05)

    model = stub_model(0)
    xs, ys = zip(*(stub_data(seed, 4) for seed in (0, 1)), strict=True)
    loss = torch.nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys))
    loss.backward()
    with torch.no_grad():
        expected = torch.cat([(q - 0.1 * q.grad).flatten() for q in model.parameters()])
    got = torch.tensor(p["weights"])
    assert torch.allclose(got, expected, atol=1e-6, rtol=0), (got - expected).abs().max()
    # the written report records the row's process-group backend in its own field, and matches the schema
    report = Report(fingerprint={"host": {"hostname": "test"}}, results=[r])
    written = json.loads(write_report(report, tmp_path / "r.json").read_text())
    assert written["results"][0]["comm_backend"] == "gloo" and schema_errors(written) == []


def test_dataparallel_passes_through_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("DataParallel on GPUs runs in validate/")
    r = run_dataparallel(RunConfig("stub", batch=4, size="tiny", warmup=1), 1, builder=BUILDER)
    assert (r.launcher, r.n, r.devices, r.batch) == ("dataparallel", 1, ["cpu"], 4)
    assert r.params["pass_through"] is True and r.params["global_batch"] == 4
    with pytest.raises(GpulabError, match="--gpus 2 cannot run here"):
        run_dataparallel(RunConfig("stub", size="tiny"), 2, builder=BUILDER)


def test_sweep_of_two_cpu_processes_writes_a_psweep_database(child_path, tmp_path):
    psweep = pytest.importorskip("psweep")
    if torch.cuda.is_available():
        pytest.skip("the GPU sweep runs in validate/")
    cfg = RunConfig("stub", batch=8, steps=20, warmup=1, size="tiny")
    r = run_sweep(
        Launch(
            cfg,
            launcher="sweep",
            gpus=2,
            sweep_dir=tmp_path / "sweep",
            batch_policy="global",
            builder=BUILDER,
            timeout_s=240,
        )
    )
    db = psweep.df_read(str(tmp_path / "sweep" / "database.pk"))
    assert len(db) == 2
    for column in ("_run_id", "_pset_id", "_exec_host", "_pset_runtime", "failure"):
        assert column in db.columns
    assert db["failure"].isna().all() and db["_run_id"].nunique() == 1
    assert (tmp_path / "sweep" / "database.json").is_file()
    assert (r.launcher, r.n, r.devices, r.batch, r.iterations) == ("sweep", 2, ["cpu", "cpu"], 4, 20)
    runs = r.params["runs"]
    assert len(runs) == 2 and {run["pset_id"] for run in runs} == set(db["_pset_id"])
    # the machine's throughput per timed window: the two runs' windows added, window by window; the figure their median
    assert len(r.spread.windows) == 8 and r.value == pytest.approx(statistics.median(r.spread.windows))
    assert r.spread.low <= sum(run["samples_per_s"] for run in runs) * 1.5 and r.spread.high > 0
    assert all(run["started_together"] for run in runs) and {run["slot"] for run in runs} == {0, 1}
    assert r.params["batch_policy"] == "global" and r.params["global_batch"] == 8
    assert r.params["psweep_db"] == str((tmp_path / "sweep" / "database.pk").resolve())
    assert r.seconds >= max(run["seconds"] for run in runs)  # wall clock includes process start
    for run in runs:  # a run's process = start-up + timed loop + tear-down, all inside the sweep's wall clock
        assert run["before_timed_s"] > 0 and run["after_timed_s"] >= 0
        assert run["before_timed_s"] + run["seconds"] + run["after_timed_s"] <= r.seconds + 0.05
        assert (tmp_path / "sweep" / run["pset_id"] / "result.json").is_file()
    assert_reportable(r)


def test_sweep_runs_in_turn_when_there_are_more_runs_than_devices(child_path, tmp_path):
    psweep = pytest.importorskip("psweep")
    if torch.cuda.is_available():
        pytest.skip("the GPU sweep runs in validate/")
    with pytest.raises(GpulabError, match="does not share evenly"):
        run_sweep(Launch(RunConfig("stub"), launcher="sweep", gpus=2, sweep_dir=tmp_path, runs=3, builder=BUILDER))
    r = run_sweep(
        Launch(
            RunConfig("stub", steps=20, warmup=1, size="tiny"),
            launcher="sweep",
            gpus=1,
            sweep_dir=tmp_path / "sw",
            runs=2,
            builder=BUILDER,
        )
    )
    db = psweep.df_read(str(tmp_path / "sw" / "database.pk")).sort_values("started")
    assert len(db) == 2 and list(db["slot"]) == [0, 0]
    assert db["started"].iloc[1] >= db["ended"].iloc[0]  # one after another on the one device
    assert r.n == 1 and r.params["runs_per_device"] == 2
    rates = [run["samples_per_s"] for run in r.params["runs"]]
    # the device's throughput (its turns averaged window by window), not the sum of turns
    assert r.value == pytest.approx(statistics.median(r.spread.windows))
    assert min(rates) * 0.5 < r.value < max(rates) * 1.5


def test_batch_plan_per_device_and_global():
    cfg = RunConfig("stub", batch=32, params={"learning_rate": 0.1})
    weak = plan_batch(cfg, 4)
    assert (weak.per_device, weak.global_batch, weak.lr) == (32, 128, None)
    assert weak.device_config(cfg).batch == 32 and weak.device_config(cfg).params == {"learning_rate": 0.1}
    scaled = plan_batch(cfg, 4, scale_lr=True)
    assert scaled.lr == pytest.approx(0.4) and scaled.device_config(cfg).params["learning_rate"] == pytest.approx(0.4)
    assert scaled.params()["lr_factor"] == 4 and scaled.params()["lr_base"] == 0.1
    assert cfg.params == {"learning_rate": 0.1}  # the caller's config is left alone
    other = plan_batch(RunConfig("x", batch=2, params={"lr": 0.5}), 2, scale_lr=True)  # a workload calling it lr
    assert other.lr_param == "lr" and other.device_config(RunConfig("x", params={"lr": 0.5})).params == {"lr": 1.0}
    strong = plan_batch(cfg, 4, "global")
    assert (strong.per_device, strong.global_batch) == (8, 32)
    default = plan_batch(RunConfig("stub"), 2)
    assert default.per_device is None and default.resolved(16).global_batch == 32


@pytest.mark.parametrize(
    ("cfg", "n", "policy", "scale", "message"),
    [
        (RunConfig("stub", batch=30), 4, "global", False, "does not divide over 4"),
        (RunConfig("stub"), 2, "global", False, "needs the global batch"),
        (RunConfig("stub", batch=8, params={"learning_rate": 0.1}), 2, "global", True, "drop --scale-lr"),
        (RunConfig("stub", batch=8), 2, "per_device", True, "--param learning_rate="),
        (RunConfig("stub", batch=8, params={"learning_rate": "fast"}), 2, "per_device", True, "not a number"),
    ],
)
def test_batch_plan_refuses_what_cannot_work(cfg, n, policy, scale, message):
    with pytest.raises(GpulabError, match=message):
        plan_batch(cfg, n, policy, scale)


def test_batch_plan_refuses_an_unknown_policy():
    with pytest.raises(UnknownValue) as err:
        plan_batch(RunConfig("stub"), 2, "strong", False)
    assert (err.value.what, err.value.value) == ("batch policy", "strong")


def test_config_is_checked_before_anything_starts(tmp_path):
    with pytest.raises(UnknownValue) as err:  # a config's JSON form is read at its edge
        config_from_dict({**config_to_dict(RunConfig("stub")), "precision": "fp8"})
    assert (err.value.what, err.value.value) == ("precision", "fp8")
    with pytest.raises(UnknownValue) as err:
        check_config(RunConfig("stub", size="huge"), BUILDER)
    assert (err.value.what, err.value.value) == ("size", "huge")
    with pytest.raises(GpulabError, match="--data"):
        check_config(RunConfig("stub", data=tmp_path / "missing"), BUILDER)
    with pytest.raises(GpulabError, match="MODULE:FUNCTION"):
        resolve_builder("no_colon")
    with pytest.raises(GpulabError, match="cannot import"):
        resolve_builder("gpulab_no_such_module:build")


def test_wrappers_refuse_a_workload_without_a_model():
    with pytest.raises(GpulabError, match="gpulab sweep"):
        run_dataparallel(RunConfig("stub_input", size="tiny", warmup=0), 1, builder=BUILDER)


@no_gpu
def test_gpu_launchers_say_what_is_missing_without_a_gpu():
    with pytest.raises(GpulabError, match="needs a CUDA GPU"):
        run_gpu(RunConfig("stub", size="tiny"), builder=BUILDER)
    with pytest.raises(GpulabError, match="nccl backend needs CUDA GPUs"):
        run_ddp(RunConfig("stub", size="tiny"), 2, comm_backend=CommBackend.NCCL, builder=BUILDER)
    with pytest.raises(GpulabError, match="exceed the"):
        run_ddp(RunConfig("stub", size="tiny"), (os.cpu_count() or 1) + 1, builder=BUILDER)


def test_jsonable_makes_params_safe_for_the_report():
    data = jsonable({"p": Path("/x"), "t": (1, 2.5), "nan": float("nan"), 3: torch.tensor(2.0), "s": {"a"}})
    assert data == {"p": "/x", "t": [1, 2.5], "nan": None, "3": 2.0, "s": ["a"]}
