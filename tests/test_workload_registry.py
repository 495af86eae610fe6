"""The workload registry: each workload declared in its own module, found by listing the package and through the
`gpulab.workloads` entry point group.

The mlp workload (tests/workloads/toymlp.py) is declared the way a package declares one, with an entry point in
its installed metadata; `gpulab run`, the suite's speedup rows and a study find it through that metadata alone.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpulab.errors import GpulabError, UnknownValue
from gpulab.names import Architecture
from gpulab.report.io import load_report
from gpulab.workloads import REGISTRY, registry
from gpulab.workloads.precision_plan import for_architecture

HERE = Path(__file__).parent
ROOT = HERE.parent
SEEDS = ("style_transfer", "mnist", "cifar10", "chexnet", "resnet50")


def _site(root: Path, entry: str = "mlp = toymlp:WORKLOAD") -> Path:
    """A site folder in which a package "toymlp" declares a workload: a dist-info with an entry point."""
    dist = root / "toymlp-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toymlp\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[gpulab.workloads]\n{entry}\n")
    return root


def test_the_built_in_workloads_are_found_in_the_seeds_order():
    assert tuple(REGISTRY) == SEEDS
    assert REGISTRY.names(epochs=True) == ("mnist", "cifar10", "chexnet", "resnet50")
    assert REGISTRY.names("tf_epochs") == ("mnist", "resnet50")
    assert REGISTRY.names(optimises_input=True) == ("style_transfer",)
    assert REGISTRY["chexnet"].metric == "mean AUC" and REGISTRY["mnist"].metric == "accuracy"


def test_every_declared_module_path_resolves():
    for w in REGISTRY.values():
        specs = (w.torch, w.tensorflow, w.recipe, w.tf_epochs, w.generated_data, w.references)
        for spec in specs:
            if spec is not None:
                module, _, attr = spec.partition(":")
                assert module.startswith("gpulab.workloads.") and attr, spec


def test_an_unknown_workload_names_the_known_ones():
    with pytest.raises(UnknownValue) as err:
        REGISTRY["nope"]
    assert (err.value.what, err.value.value, err.value.choices) == ("workload", "nope", tuple(REGISTRY))


@pytest.fixture
def mlp_declared(tmp_path, monkeypatch):
    """The mlp entry point visible to this process; the registry read again before and after."""
    site = _site(tmp_path / "site")
    monkeypatch.syspath_prepend(str(HERE / "workloads"))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    REGISTRY.forget()
    yield
    REGISTRY.forget()


def test_an_entry_point_adds_a_workload_after_the_built_in_ones(mlp_declared):
    assert tuple(REGISTRY) == (*SEEDS, "mlp")
    mlp = REGISTRY["mlp"]
    assert mlp.sizes["tiny"] == (16, 4) and not mlp.epochs and mlp.tensorflow is None
    plan = for_architecture(Architecture.VOLTA)
    assert plan.training("mlp").channels_last is False  # its declaration says NHWC does not apply
    assert plan.training("resnet50").channels_last is True


def test_an_entry_point_that_is_no_workload_is_refused(tmp_path, monkeypatch):
    site = _site(tmp_path / "site", "mlp = toymlp:SIZES")
    monkeypatch.syspath_prepend(str(HERE / "workloads"))
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    fresh = registry.Registry()
    with pytest.raises(GpulabError, match="toymlp:SIZES is not a gpulab workload named 'mlp'"):
        list(fresh)


STUDY = {
    "study": "mlp-width",
    "workload": "mlp",
    "size": "tiny",
    "precision": "fp32",
    "fixed": {"features": 8},
    "vary": {"mode": "grid", "params": {"hidden": [4, 16]}},
    "workers": 1,
}


@pytest.fixture(scope="module")
def outside_runs(tmp_path_factory):
    """`gpulab run mlp`, the suite's speedup rows for mlp and a two-run mlp study, started side by side."""
    tmp = tmp_path_factory.mktemp("outside")
    site = _site(tmp / "site")
    path = os.pathsep.join([str(site), str(HERE / "workloads"), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    (tmp / "mlp.yml").write_text(yaml.safe_dump(STUDY))
    gpulab = [sys.executable, "-m", "gpulab"]
    commands = {
        "run": [*gpulab, "run", "mlp", "--launcher", "cpu", "--size", "tiny", "--json", "--report", "r.json"],
        "suite": [
            *(sys.executable, "-m", "pytest", str(ROOT / "validate" / "test_speedup.py"), "-p", "no:cacheprovider"),
            *("--report-dir", "suite", "--tier", "standard", "-k", "mlp"),
        ],
        "study": [*gpulab, "study", "run", "mlp.yml", "--study-dir", "study"],
    }
    procs = {
        name: subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, cmd in commands.items()
    }
    done = {name: (proc.communicate(timeout=300), proc.returncode) for name, proc in procs.items()}
    return tmp, done


def test_the_outside_workload_touches_no_file_of_the_package():
    assert not list((ROOT / "src").rglob("toymlp*"))
    assert "mlp" not in (ROOT / "src" / "gpulab" / "workloads" / "__init__.py").read_text()


def test_gpulab_run_trains_the_outside_workload(outside_runs):
    tmp, done = outside_runs
    (out, err), code = done["run"]
    assert code == 0, err
    result = json.loads(out)
    assert (result["workload"], result["launcher"], result["batch"], result["iterations"]) == ("mlp", "cpu", 16, 4)
    assert result["value"] > 0 and result["params"]["last_loss"] < result["params"]["first_loss"]  # it trained
    assert [r.workload for r in load_report(tmp / "r.json").results] == ["mlp"]


def test_the_suite_runs_the_outside_workloads_speedup_rows(outside_runs):
    tmp, done = outside_runs
    (out, err), code = done["suite"]
    assert code == 0, out + err
    (path,) = (tmp / "suite").glob("report-*.json")
    report = load_report(path)
    cpu = {r.n: r for r in report.results if r.workload == "mlp" and r.launcher == "cpu"}
    assert 1 in cpu and len(cpu) == 2 and all(r.value > 0 and r.batch == 64 for r in cpu.values())
    assert [(s.workload, s.from_, s.to) for s in report.speedups] == [("mlp", "cpu:1", f"cpu:{max(cpu)}")]


def test_a_study_varies_the_outside_workloads_parameters(outside_runs):
    tmp, done = outside_runs
    (out, err), code = done["study"]
    assert code == 0, out + err
    assert "2 ok, 0 failed of 2 runs" in out
    rows = json.loads((tmp / "study" / "database.json").read_text())
    assert sorted(r["hidden"] for r in rows) == [4, 16] and all(r["workload"] == "mlp" for r in rows)
