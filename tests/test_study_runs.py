"""Studies run for real through the command a user types: Dask workers (local, and a cluster started apart), every
run a row of the psweep database, failures recorded and resumed, the report and the comparison with the baseline."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("distributed")
ps = pytest.importorskip("psweep")

from gpulab.report.io import load_report  # noqa: E402
from gpulab.studies.runner import load_database  # noqa: E402

ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}

pytestmark = pytest.mark.slow  # trainings and commands in child processes: the full lane only


def gpulab(*args: str, timeout: float = 600, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, timeout=timeout, env=ENV, cwd=cwd
    )


def _image(path: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (48, 40), (120, 30, 200)).save(path)
    return path


def _study(tmp_path: Path, name: str, **extra) -> Path:
    doc = {
        "study": name,
        "workload": "style_transfer",
        "size": "tiny",
        "precision": "fp32",
        "fixed": {"width": 32, "iterations": 2},
        "workers": 2,
        **extra,
    }
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_neural_style_study_runs_all_252_runs_on_two_cpu_workers(tmp_path):
    out = tmp_path / "ns"
    started = time.perf_counter()
    proc = gpulab("study", "run", "neural-style", "--variant", "tiny", "--study-dir", str(out), "--workers", "2")
    wall = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "252 ok, 0 failed of 252 runs" in proc.stdout
    df = ps.df_read(str(out / "database.pk"))
    assert len(df) == 252 and set(df["status_"]) == {"ok"}
    for column in ("learning_rate", "style_scales", "content_weight_blend", "style_weight", "tv_weight"):
        assert column in df.columns
    assert df["seed"].nunique() == 252 and set(df["worker_"]) == {"cpu0", "cpu1"}
    assert set(df["_vary"]) == {"learning_rate", "style_scales", "content_weight_blend", "style_weight", "tv_weight",
                                "style_layer_weight_exp"}  # fmt: skip
    for _, row in df.iterrows():
        assert (out / row["output_"]).is_file()  # each run its own image
        assert len(row["loss_curve_"]) == 2 and row["wall_s_"] >= row["timed_s_"] > 0
    assert df["overhead_s_"].median() < 2.0  # warm workers: no process start per run
    # batch_runs: auto on CPU workers: a probe batch of 4 per worker, then CPU_AUTO (8) in near-equal batches
    batching = json.loads((out / "sessions.json").read_text())[-1]["batching"]
    assert batching["batch_runs"] == 8 and "CPU_AUTO" in batching["why"] and batching["probe_runs"] == 8
    assert (df["batch_runs_"] == 4).sum() == 8 and set(df["batch_runs_"]) == {4, 7, 8}
    html = (out / "report.html").read_text()
    rows = html.split("Images per parameter", 1)[1].split("<h3>")[1:]
    assert [row.count("<figure>") for row in rows] == [12] * 6  # each row of 13-75 runs subsampled to 12
    assert "Loss curves" in html and html.count("<tr") >= 253  # the runs table keeps all 252
    assert 'class="missing"' not in html and html.count('src="data:image/jpeg') == 6 * (12 + 2)  # tiles and references
    assert "252 of 252 runs ok" in (out / "report.md").read_text()
    report = load_report(out / "report.json")
    assert {(r.launcher, r.workload) for r in report.results} == {("cpu", "style_transfer")}
    compared = gpulab("compare", str(out / "report.json"), "baseline:neural-style-2018")
    assert compared.returncode == 0, compared.stderr
    assert "baseline:neural-style-2018" in compared.stdout and "270.0x" in compared.stdout
    again = gpulab("study", "resume", str(out))
    assert again.returncode == 0 and "nothing to run: all 252 runs" in again.stderr
    print(f"252 tiny runs on two CPU workers: {wall:.1f} s")


def test_a_batched_study_gives_each_run_its_one_by_one_result(tmp_path):
    vary = {"mode": "star", "params": {"learning_rate": [2, 30], "tv_weight": [1, 1000], "style_scales": [0.6, 1.8]}}
    path = _study(tmp_path, "batched", vary=vary, workers=1, fixed={"width": 32, "iterations": 3, "loop": "eager"})
    rows = {}
    for size in ("1", "6"):
        out = tmp_path / f"b{size}"
        proc = gpulab("study", "run", str(path), "--study-dir", str(out), "--batch-runs", size)
        assert proc.returncode == 0 and "6 ok, 0 failed of 6 runs" in proc.stdout, proc.stderr[-2000:]
        rows[size] = {r["_pset_hash"]: r for _, r in load_database(out).iterrows()}
    assert rows["1"].keys() == rows["6"].keys()
    for key, alone in rows["1"].items():
        batched = rows["6"][key]
        assert batched["batch_runs_"] == 6 and "batch_runs_" not in alone.index
        assert batched["final_loss_"] == pytest.approx(alone["final_loss_"], rel=1e-5)
        assert batched["seed"] == alone["seed"] and batched["output_"] != alone["output_"]
    sessions = json.loads((tmp_path / "b1" / "sessions.json").read_text())
    assert sessions[-1]["batching"] == {}  # batch_runs 1: the path of every study before batching


def _run_losing(path: Path, out: Path, lost: Path) -> subprocess.CompletedProcess[str]:
    """`study run` whose image `lost` goes away once the pre-flight checked it (the study directory is made right
    after, well before the workers have started): as a file on a share can, so its runs fail on their worker."""
    cmd = [sys.executable, "-m", "gpulab", "study", "run", str(path), "--study-dir", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.monotonic() + 300
    while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    lost.unlink()
    stdout, stderr = proc.communicate(timeout=600)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def test_a_failed_run_is_recorded_the_study_goes_on_and_resume_runs_only_it(tmp_path):
    good, missing = _image(tmp_path / "good.png"), _image(tmp_path / "later.png")
    path = _study(tmp_path, "content", vary={"mode": "zip", "params": {"content": [str(good), str(missing)]}}, repeat=2)
    out = tmp_path / "out"
    first = _run_losing(path, out, missing)
    assert first.returncode == 1 and "2 ok, 2 failed of 4 runs" in first.stdout, first.stderr[-2000:]
    df = load_database(out)
    failed = df[df["status_"] == "failed"]
    assert len(failed) == 2 and all("later.png" in f for f in failed["failure_"])
    assert all((out / pid / "error.txt").is_file() for pid in failed["_pset_id"])
    _image(missing)
    rerun = gpulab("study", "run", str(path), "--study-dir", str(out))
    assert rerun.returncode == 2 and "already holds this study; `gpulab study resume`" in rerun.stderr
    resumed = gpulab("study", "resume", str(out))
    assert resumed.returncode == 0 and "2 ok, 0 failed of 2 runs" in resumed.stdout, resumed.stderr
    df = load_database(out)
    assert len(df) == 6 and (df["status_"] == "ok").sum() == 4  # the failures stay on record
    assert len(json.loads((out / "sessions.json").read_text())) == 2


def test_finished_runs_survive_a_lost_database(tmp_path):
    path = _study(tmp_path, "lost", vary={"mode": "grid", "params": {"tv_weight": [1, 10, 100]}})
    out = tmp_path / "out"
    assert gpulab("study", "run", str(path), "--study-dir", str(out)).returncode == 0
    (out / "database.pk").unlink()  # as when a study is stopped before its database is written
    (out / "database.json").unlink()
    df = load_database(out)  # the rows come back from the runs' own saves, and reading writes nothing
    assert len(df) == 3 and set(df["status_"]) == {"ok"} and not (out / "database.json").exists()
    resumed = gpulab("study", "resume", str(out))
    assert resumed.returncode == 0 and "nothing to run" in resumed.stderr
    assert len(json.loads((out / "database.json").read_text())) == 3  # the session wrote the rows it found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_study_runs_on_a_dask_cluster_started_apart(tmp_path):
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-dashboard",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
    )
    # Workers start once the scheduler listens, as the docs say: `study worker` checks its address at once (a
    # scheduler still starting is "nothing answers"), and the command starts faster than Dask's scheduler does.
    listening = time.time() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.time() < listening and scheduler.poll() is None, "the scheduler did not start"
            time.sleep(0.5)
    workers = subprocess.Popen(
        [sys.executable, "-m", "gpulab", "study", "worker", address, "--workers", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        from distributed import Client

        deadline = time.time() + 120
        while True:
            try:
                with Client(address, timeout=5) as client:
                    names = [w["name"] for w in client.scheduler_info()["workers"].values()]
                if len(names) == 2:
                    break
            except OSError:
                pass
            assert time.time() < deadline, "the pinned workers did not join the scheduler"
            time.sleep(1)
        path = _study(tmp_path, "apart", vary={"mode": "grid", "params": {"tv_weight": [1, 10, 100, 1000]}})
        out = tmp_path / "out"
        proc = gpulab("study", "run", str(path), "--study-dir", str(out), "--scheduler", address)
        assert proc.returncode == 0, proc.stderr[-2000:]
        df = load_database(out)
        host = socket.gethostname().split(".")[0]
        assert len(df) == 4 and set(df["status_"]) == {"ok"}
        assert set(df["worker_"]) <= {f"{host}-cpu0", f"{host}-cpu1"} and sorted(names) == [
            f"{host}-cpu0",
            f"{host}-cpu1",
        ]
    finally:
        for proc in (workers, scheduler):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_refusals_leave_nothing_behind(tmp_path):
    path = _study(tmp_path, "big", workers=64)
    out = tmp_path / "out"
    proc = gpulab("study", "run", str(path), "--study-dir", str(out))
    assert proc.returncode == 2 and "64 CPU workers × 1 threads exceed" in proc.stderr
    proc = gpulab("study", "run", str(path), "--study-dir", str(out), "--scheduler", f"tcp://127.0.0.1:{_free_port()}")
    assert proc.returncode == 2 and "nothing answers at 127.0.0.1" in proc.stderr
    assert not out.exists()
    gone = tmp_path / "gone"
    proc = gpulab("study", "run", "chexnet", "--variant", "one-gpu", "--data", str(gone), "--study-dir", str(out))
    assert proc.returncode == 2 and f"data {gone}: no such file or directory; pass the data set's folder" in proc.stderr
    assert not out.exists()
    proc = gpulab("study", "resume", str(tmp_path / "nothing"))
    assert proc.returncode == 2 and "holds no study" in proc.stderr


@pytest.mark.parametrize("name", ["chexnet", "cifar10-vgg", "mnist-keras", "keras-scaling", "resnet50-285"])
def test_each_shipped_study_runs_at_its_tiny_size(tmp_path, name):
    from gpulab.studies.commands import shipped
    from gpulab.studies.spec import load_study

    study = load_study(shipped()[name], "tiny")
    if study.framework == "tensorflow":
        pytest.importorskip("tensorflow")
    out = tmp_path / name
    proc = gpulab("study", "run", name, "--variant", "tiny", "--study-dir", str(out), timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    df = load_database(out)
    assert len(df) >= 1 and set(df["status_"]) == {"ok"}
    assert all(isinstance(c, str) and c.startswith(sys.executable) for c in [_command(out, p) for p in df["_pset_id"]])
    if study.epochs:
        assert df["final_metric_"].notna().all() and all(len(r) == study.epochs["epochs"] for r in df["epoch_records_"])
    report = load_report(out / "report.json")
    assert {r.launcher for r in report.results} >= {p["launcher"] for p in _launchers(study)}
    assert (out / "report.html").is_file()


def _command(out: Path, pset_id: str) -> str:
    return (out / pset_id / "command.txt").read_text().split()[0]


def _launchers(study):
    from gpulab.studies.psets import parameter_sets

    return parameter_sets(study)
