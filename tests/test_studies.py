"""Study files and their parameter sets: the vocabulary (star, grid, zip, spaced values, variants, repeats and
seeds), every bad input as one error naming the key, the shipped studies and their published baselines."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from gpulab.errors import GpulabError
from gpulab.report.io import load_report
from gpulab.studies import baselines
from gpulab.studies.commands import shipped, study_path, study_variants
from gpulab.studies.psets import parameter_sets
from gpulab.studies.spec import load_study, study_from_dict, with_overrides

BASE = {"study": "s", "workload": "style_transfer"}


def _sets(**extra):
    return parameter_sets(study_from_dict({**BASE, **extra}))


def test_star_varies_one_parameter_at_a_time_around_the_fixed_centre():
    sets = _sets(
        fixed={"learning_rate": 5, "tv_weight": 7},
        vary={"mode": "star", "params": {"learning_rate": [1, 5, 9], "tv_weight": [0, 7]}},
    )
    assert [(p["learning_rate"], p["tv_weight"], p["_vary"]) for p in sets] == [
        (1, 7, "learning_rate"),
        (5, 7, "learning_rate"),
        (9, 7, "learning_rate"),
        (5, 0, "tv_weight"),
        (5, 7, "tv_weight"),
    ]
    assert [p["seed"] for p in sets] == [0, 1, 2, 3, 4]  # the centre runs twice, as two runs with their own seeds


def test_grid_zip_and_repeats():
    grid = _sets(vary={"mode": "grid", "params": {"learning_rate": [1, 2], "tv_weight": [3, 4, 5]}}, repeat=2, seed=10)
    assert len(grid) == 12 and len({(p["learning_rate"], p["tv_weight"], p["repeat"]) for p in grid}) == 12
    assert sorted(p["seed"] for p in grid) == list(range(10, 22))
    zipped = _sets(vary={"mode": "zip", "params": {"learning_rate": [1, 2, 3], "tv_weight": ["x", "y", "z"]}})
    assert [(p["learning_rate"], p["tv_weight"]) for p in zipped] == [(1, "x"), (2, "y"), (3, "z")]
    assert _sets() == [{"study": "s", "workload": "style_transfer", "framework": "torch", "size": "standard",
                        "precision": "plan", "launcher": "worker", "repeat": 0, "seed": 0}]  # fmt: skip


def test_spaced_values():
    (lin,) = [_sets(vary={"params": {"learning_rate": {"linspace": [0, 1, 5]}}})]
    assert [p["learning_rate"] for p in lin] == [0, 0.25, 0.5, 0.75, 1]
    log = [p["learning_rate"] for p in _sets(vary={"params": {"learning_rate": {"logspace": [0.1, 1000, 5]}}})]
    assert log == [0.1, 1, 10, 100, 1000]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({**BASE, "colour": 1}, "unknown key(s) colour"),
        ({"workload": "mnist"}, "study: None is not a name"),
        ({**BASE, "vary": {"mode": "spiral"}}, "vary.mode: 'spiral' is not one of star, grid, zip"),
        (
            {**BASE, "vary": {"mode": "zip", "params": {"learning_rate": [1, 2], "tv_weight": [1]}}},
            "zip takes lists of one length",
        ),
        ({**BASE, "vary": {"params": {"learning_rate": []}}}, "vary.params.learning_rate: not a non-empty list"),
        ({**BASE, "vary": {"params": {"learning_rate": {"logspace": [0, 1, 3]}}}}, "positive ends for logspace"),
        ({**BASE, "vary": {"params": {"seed": [1, 2]}}}, "seed cannot be varied"),
        ({**BASE, "repeat": 0}, "repeat: 0 is not a whole number"),
        ({**BASE, "epochs": {"epochs": 0}}, "epochs.epochs: 0 is not a whole number"),
        ({**BASE, "launcher": "torchrun"}, "launcher: 'torchrun' is not worker or one of"),
        ({**BASE, "size": "huge"}, "size: 'huge' is not one of"),
        ({**BASE, "precision": "fp8"}, "precision: 'fp8' is not plan or one of"),
        ({**BASE, "vary": {"params": {"launcher": ["gpu", "ddp"]}}}, "set launcher: to the first one's launcher"),
        (["not", "a", "mapping"], "is not a mapping"),
    ],
)
def test_bad_study_files_name_the_key(data, expected):
    with pytest.raises(GpulabError, match="study") as err:
        study_from_dict(data)
    assert expected in str(err.value)


def test_several_problems_are_reported_at_once():
    with pytest.raises(GpulabError) as err:
        study_from_dict({**BASE, "repeat": -1, "size": "huge", "colour": 1})
    assert "3 problems" in str(err.value)


def test_variants_and_files(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text(
        yaml.safe_dump(
            {
                **BASE,
                "fixed": {"learning_rate": 1, "tv_weight": 2},
                "variants": {"tiny": {"fixed": {"learning_rate": 3}}},
            }
        )
    )
    assert load_study(path).fixed == {"learning_rate": 1, "tv_weight": 2}
    assert load_study(path, "tiny").fixed == {"learning_rate": 3, "tv_weight": 2}  # mappings merge one level deep
    with pytest.raises(GpulabError, match="has no variant 'huge'; its variants: tiny"):
        load_study(path, "huge")
    path.write_text("study: [unclosed")
    with pytest.raises(GpulabError, match="is not valid YAML"):
        load_study(path)
    with pytest.raises(GpulabError, match="study file"):
        load_study(tmp_path)  # a directory is refused before anything is read


def test_overrides_from_the_command_line(tmp_path):
    study = study_from_dict({**BASE, "fixed": {"learning_rate": 1}, "vary": {"params": {"tv_weight": [1, 2]}}})
    changed = with_overrides(study, {"vgg_weights": "/w.pth"}, tmp_path)
    assert changed.fixed == {"learning_rate": 1, "vgg_weights": "/w.pth"} and changed.data == tmp_path
    assert changed.document["fixed"]["vgg_weights"] == "/w.pth"  # what resume reads
    with pytest.raises(GpulabError, match="--param tv_weight: the study varies it"):
        with_overrides(study, {"tv_weight": 3}, None)


def test_every_shipped_study_loads_with_a_tiny_variant():
    assert {"neural-style"} <= set(shipped())
    for name, path in shipped().items():
        assert "tiny" in study_variants(path), name
        study = load_study(path)
        tiny = load_study(path, "tiny")
        assert tiny.size == "tiny" and parameter_sets(tiny), name
        if study.baseline:
            assert study.baseline in baselines.names(), name
    full = load_study(study_path("neural-style"))
    assert len(parameter_sets(full)) == 252 and full.fixed["iterations"] == 1000 and full.fixed["width"] == 512
    assert {len(v) for v in full.vary.params.values()} <= set(range(13, 76))
    with pytest.raises(GpulabError, match="neither a study file nor a shipped study"):
        study_path("no-such-study")


def test_shipped_baselines_are_reports_with_provenance():
    for name in baselines.names():
        report = load_report(baselines.path(name))  # schema-valid
        assert report.tier == "published" and report.results, name
        prov = report.provenance or {}
        assert prov.get("source") and prov.get("hardware") and prov.get("figures"), name
    ns = baselines.load("baseline:neural-style-2018")
    gpu = next(r for r in ns.results if r.launcher == "gpu")
    assert gpu.seconds == 60 and gpu.iterations == 1000
    assert {(r.launcher, r.n, r.seconds) for r in ns.results if r.launcher == "cpu"} == {
        ("cpu", 1, 16200),
        ("cpu", 20, 2700),
    }
    with pytest.raises(GpulabError, match="no shipped baseline 'nope'"):
        baselines.path("baseline:nope")


def _run(device, timed, status="ok"):
    return SimpleNamespace(status=status, timed_s=timed, device=device, precision=None)


def test_the_one_line_comparison_with_the_published_run():
    study = load_study(study_path("neural-style"))
    line = baselines.compare_line(
        study, [_run("gpu0 GPU-x", 5.0), _run("gpu0 GPU-x", 6.0), _run("gpu0 x", 9, "failed")]
    )
    assert line is not None and "1× Tesla P100-PCIE-16GB (2018): 60 s per run" in line
    assert "5.50 s median over 2 runs" in line and "10.9× faster" in line
    tiny = load_study(study_path("neural-style"), "tiny")
    assert "no ratio" in (baselines.compare_line(tiny, [_run("gpu0 x", 0.1)]) or "")
    assert "no run of this study ran on a GPU" in (baselines.compare_line(study, [_run("cpu0", 3.0)]) or "")


def _epoch_run(launcher, device, seconds, status="ok"):
    epochs = [{"epoch": i + 1, "seconds": s} for i, s in enumerate(seconds)]
    gpus = int(device.partition("×")[2])
    return SimpleNamespace(status=status, device=device, values={"launcher": launcher}, epochs=epochs, gpus_used=gpus)


def test_a_scaling_baseline_is_set_beside_this_machines_own_ratio_per_epoch():
    study = load_study(study_path("resnet50-285"))
    runs = [
        _epoch_run("ddp", "ddp×1", [30.0, 10.0, 10.4, 9.6]),  # the first epoch (warm-up) left out: 10.0 s
        _epoch_run("ddp", "ddp×2", [20.0, 5.2, 5.3]),
        _epoch_run("dataparallel", "dataparallel×2", [25.0, 8.0]),
        _epoch_run("ddp", "ddp×4", [9.0, 1.0], status="failed"),
    ]
    line = baselines.compare_line(study, runs) or ""
    assert line.startswith("published (tensorflow mirrored): 3.08× on 4 GPUs (77% per GPU)"), line
    assert "per epoch against 10.00 s on one GPU: ddp 1.90× on 2 (95%), dataparallel 1.25× on 2 (62%)" in line
    alone = baselines.compare_line(study, runs[1:3]) or ""
    assert "no epoch runs on one and on several GPUs" in alone
    # The neural-style baseline's 20 are vCPUs, not GPUs: no scaling line, the per-run one.
    style = load_study(study_path("neural-style"))
    assert "per run" in (baselines.compare_line(style, [_run("gpu0 x", 5.0)]) or "")


def test_a_study_file_relative_data_path_is_relative_to_the_file(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump({**BASE, "data": "images"}))
    assert load_study(path).data == Path(tmp_path.resolve()) / "images"


def _whole_machine_pset(**extra):
    study = load_study(study_path("resnet50-285"))
    pset = {**study.fixed, "workload": "resnet50", "framework": "torch", "size": "full", "precision": "plan"}
    return {**pset, "launcher": "ddp", "gpus": 2, "batch": 64, "num_workers": 8, "epochs": 3, **extra}


def test_a_gpulab_run_child_gets_the_studys_loader_workers_and_its_gpus_precision_plan(monkeypatch, tmp_path):
    from gpulab.hw import nvml
    from gpulab.records import GpuInfo
    from gpulab.studies import task

    # No GPU: `precision: plan` is fp32, said on the command line.
    cmd = task.gpulab_run_command(_whole_machine_pset(), tmp_path / "r.json")
    assert cmd[cmd.index("--num-workers") + 1] == "8" and cmd[cmd.index("--batch") + 1] == "64"
    assert cmd[cmd.index("--precision") + 1] == "fp32" and "--channels-last" not in cmd
    # An H100 seen through NVML (this process opens no CUDA context): its plan, bf16 and NHWC for ResNet50.
    h100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", "GPU-1", "0000:1b:00.0", "10de:2330", compute_capability="9.0")
    monkeypatch.setattr(nvml, "load_nvml", lambda: (object(), None))
    monkeypatch.setattr(nvml, "query", lambda: SimpleNamespace(gpus=[h100]))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cmd = task.gpulab_run_command(_whole_machine_pset(), tmp_path / "r.json")
    assert cmd[cmd.index("--precision") + 1] == "bf16" and "--channels-last" in cmd
    cmd = task.gpulab_run_command(_whole_machine_pset(precision="tf32", channels_last=False), tmp_path / "r.json")
    assert cmd[cmd.index("--precision") + 1] == "tf32" and "--channels-last" not in cmd
    assert task.planned({"workload": "resnet50"}, "no such board", None) is None
