"""TensorFlow launchers on the CPU: every workload at tiny size, MirroredStrategy over 2 logical CPUs, a 2-process
sweep, and TensorFlow rows next to torch rows in one report. Every TensorFlow run happens in a fresh process."""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpulab.errors import GpulabError, UnknownValue
from gpulab.records import Result, RunConfig
from gpulab.workloads import data
from gpulab.workloads.cifar10 import data as cifar_data
from gpulab.workloads.mnist import data as mnist_data

pytest.importorskip("tensorflow", reason="TensorFlow is not installed: pip install 'gpulab[tf]' to test its backend")

from gpulab.launch.spec import Launch
from gpulab.launch.sweep import run_sweep
from gpulab.launch.tf_launch import run_mirrored, run_tf_cpu

WORKLOADS = ("mnist", "cifar10", "chexnet", "resnet50", "style_transfer")

pytestmark = pytest.mark.slow  # trainings and commands in child processes: the full lane only


def tiny(workload: str, **kw: object) -> RunConfig:
    cfg = RunConfig(workload, size="tiny", warmup=1, steps=2)
    if workload == "style_transfer":
        cfg.params = {"width": 48}
    elif workload in ("chexnet", "resnet50"):
        cfg.params = {"image": 32}
    return dataclasses.replace(cfg, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def cpu_rows() -> dict[str, Result]:
    # the runs are separate processes; tracing is single-threaded, so two at a time use both cores
    with ThreadPoolExecutor(2) as pool:
        futures = {w: pool.submit(run_tf_cpu, tiny(w), 1) for w in ("chexnet", "resnet50", "cifar10", "mnist")}
        futures["style_transfer"] = pool.submit(run_tf_cpu, tiny("style_transfer"), 1)
        return {w: f.result() for w, f in futures.items()}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_runs_two_steps(cpu_rows: dict[str, Result], workload: str) -> None:
    r = cpu_rows[workload]
    assert (r.framework, r.launcher, r.workload, r.n, r.device) == ("tensorflow", "cpu", workload, 1, "cpu")
    assert r.iterations == 2 and r.value > 0 and r.unit == "samples/s"
    assert r.params["loss_finite"] is True and math.isfinite(r.params["final_loss"])
    assert r.params["steps_run"] == 3  # warm-up + timed
    assert r.params["tensorflow"] and r.params["compiled"] == "tf.function"


def test_mirrored_runs_both_replicas() -> None:
    cfg = tiny("mnist", params={"learning_rate": 0.5})
    r = run_mirrored(cfg, 2, "per_device", True)
    assert (r.framework, r.launcher, r.n, r.device) == ("tensorflow", "mirrored", 2, None)
    assert r.devices == ["cpu:0", "cpu:1"]
    assert r.params["strategy"] == "MirroredStrategy" and r.params["replicas"] == 2
    assert r.params["replicas_ran"] == [0, 1]  # the replica ids each replica returned from the last step
    assert r.batch == 16 and r.params["global_batch"] == 32
    assert r.params["lr"] == 1.0 and r.params["learning_rate"] == 1.0 and r.params["lr_factor"] == 2
    assert r.params["loss_finite"] is True


def test_mirrored_global_batch_and_refusals() -> None:
    with pytest.raises(GpulabError, match="does not divide"):
        run_mirrored(tiny("mnist", batch=9), 2, "global")
    with pytest.raises(GpulabError, match="optimises an input"):
        run_mirrored(tiny("style_transfer"), 2)


def test_sweep_two_processes(tmp_path: Path) -> None:
    r = run_sweep(Launch(tiny("mnist"), "tensorflow", "sweep", gpus=2, sweep_dir=tmp_path / "sweep"))
    assert (r.framework, r.launcher, r.n) == ("tensorflow", "sweep", 2)
    assert r.devices == ["cpu", "cpu"] and len(r.params["runs"]) == 2
    assert all(run["samples_per_s"] > 0 for run in r.params["runs"])
    assert (tmp_path / "sweep" / "database.pk").exists()


def test_bad_inputs_fail_before_tensorflow_starts() -> None:
    with pytest.raises(UnknownValue) as err:
        run_tf_cpu(RunConfig("bogus", size="tiny"))
    assert err.value.what == "workload"
    with pytest.raises(GpulabError, match="--threads must be at least 1"):
        run_tf_cpu(RunConfig("mnist", size="tiny"), 0)


def test_workload_errors_come_back_from_the_child() -> None:
    with pytest.raises(GpulabError, match="unknown parameter"):
        run_tf_cpu(tiny("mnist", params={"nope": 1}))


def test_tf_and_torch_rows_in_one_report(cpu_rows: dict[str, Result], tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="torch is not installed: no torch row to compare with")
    from gpulab.launch import run_cpu
    from gpulab.records import Report
    from gpulab.report.io import load_report, write_report
    from report_builders import minimal_fingerprint

    torch_row = run_cpu(tiny("mnist"), 1)
    tf_row = cpu_rows["mnist"]
    report = Report(fingerprint=minimal_fingerprint().to_dict(), tier="run")
    report.results.extend([torch_row, tf_row])
    path = tmp_path / "report.json"
    write_report(report, path)
    loaded = load_report(path)
    keys = [r.key() for r in loaded.results]
    assert keys[0][1] == "torch" and keys[1][1] == "tensorflow"
    assert keys[0][:1] + keys[0][2:] == keys[1][:1] + keys[1][2:]
    assert set(torch_row.params) & set(tf_row.params) >= {"per_device_batch", "global_batch", "final_loss", "size"}


@pytest.mark.parametrize(
    "workload, writer",
    [
        ("mnist", lambda root: mnist_data.write_digits(root)),
        ("cifar10", lambda root: cifar_data.write_batches(root, per_batch=8)),
        ("resnet50", lambda root: data.write_image_folder(root, 8, label_columns=1, classes=285, side=40)),
    ],
)
def test_real_data_goes_through_tf_data(tmp_path: Path, workload: str, writer: object) -> None:
    writer(tmp_path)  # type: ignore[operator]
    result = run_tf_cpu(tiny(workload, data=tmp_path, batch=4), 1)
    assert result.framework == "tensorflow" and result.value > 0
    assert result.params["data"] == str(tmp_path)  # None would mean synthetic tensors
