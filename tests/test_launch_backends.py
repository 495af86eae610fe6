"""Launch backends: a framework added as one module runs through `gpulab run` and `gpulab sweep` unchanged.

The toyfw backend (tests/backends/) is declared the way a package declares one, with a `gpulab.backends` entry
point in its installed metadata; the commands below find it through that metadata alone.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.errors import UnknownValue
from gpulab.launch import backends
from gpulab.launch.spec import Launch, WorkerMessage
from gpulab.names import CommBackend, Precision
from gpulab.records import RunConfig

HERE = Path(__file__).parent
LAUNCH = Path(__file__).parents[1] / "src" / "gpulab" / "launch"


@pytest.fixture
def toyfw_installed(tmp_path):
    """An environment in which a package "toyfw" declares its backend: a dist-info with an entry point."""
    site = tmp_path / "site"
    dist = site / "toyfw-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfw\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[gpulab.backends]\ntoyfw = toyfw_backend:BACKEND\n")
    path = os.pathsep.join([str(site), str(HERE / "backends"), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, PYTHONPATH=path)


def gpulab(env, *args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_a_new_framework_runs_through_gpulab_run(toyfw_installed, tmp_path):
    done = gpulab(
        toyfw_installed,
        *("run", "linear", "--framework", "toyfw", "--launcher", "cpu", "--size", "tiny", "--warmup", "2"),
        *("--param", "learning_rate=0.1", "--json", "--report", "r.json"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["framework"], result["launcher"], result["unit"]) == ("toyfw", "cpu", "samples/s")
    assert result["value"] > 0 and result["iterations"] == 50 and result["batch"] == 32
    assert abs(result["params"]["w"] - 3) < 0.5  # it really trained
    report = json.loads((tmp_path / "r.json").read_text())  # appended and valid against the schema
    assert [r["framework"] for r in report["results"]] == ["toyfw"]


def test_a_new_framework_runs_through_gpulab_sweep(toyfw_installed, tmp_path):
    done = gpulab(
        toyfw_installed,
        *("sweep", "linear", "--framework", "toyfw", "--gpus", "2", "--runs", "4", "--size", "tiny"),
        *("--sweep-dir", "sw", "--json"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["framework"], result["launcher"], result["n"]) == ("toyfw", "sweep", 2)
    runs = result["params"]["runs"]
    assert sorted(r["run_index"] for r in runs) == [0, 1, 2, 3] and all(r["samples_per_s"] > 0 for r in runs)
    assert result["value"] > 0
    assert (tmp_path / "sw" / "database.pk").is_file()


def test_a_launcher_the_framework_lacks_is_named(toyfw_installed, tmp_path):
    done = gpulab(toyfw_installed, "run", "linear", "--framework", "toyfw", "--launcher", "ddp", cwd=tmp_path)
    assert done.returncode == 2
    assert "--framework toyfw runs --launcher cpu, not ddp (--launcher ddp is offered by --framework torch)" in (
        done.stderr
    )
    bad = gpulab(toyfw_installed, "run", "mnist", "--framework", "toyfw", "--launcher", "cpu", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown workload 'mnist'; choose one of: linear" in bad.stderr


def test_an_undeclared_framework_is_refused(tmp_path):
    done = gpulab(dict(os.environ), "run", "linear", "--framework", "toyfw", cwd=tmp_path)
    assert done.returncode == 2 and "invalid choice: 'toyfw'" in done.stderr
    with pytest.raises(UnknownValue) as err:
        backends.get("toyfw")
    assert (err.value.what, err.value.value, err.value.choices) == ("framework", "toyfw", ("torch", "tensorflow"))


def test_built_in_backends():
    torch_backend, tf_backend = backends.get("torch"), backends.get("tensorflow")
    assert torch_backend.launchers == ("cpu", "gpu", "ddp", "dataparallel") and torch_backend.takes_builder
    assert tf_backend.launchers == ("cpu", "gpu", "mirrored") and not tf_backend.takes_builder
    assert tf_backend.pin(3) == "3"  # TensorFlow is not imported in the parent: GPUs by ordinal


def test_the_launchers_name_no_framework():
    """The sweep, the dispatch and the commands ask the backend; only backends and their workers name one."""
    for name in ("sweep.py", "dispatch.py", "commands.py", "planning.py", "measuring.py", "spec.py", "peers.py"):
        text = (LAUNCH / name).read_text()
        assert '"tensorflow"' not in text and "tf_launch" not in text and "tf_worker" not in text, name


def _launch_imports() -> dict[str, set[str]]:
    """gpulab.launch module -> the gpulab.launch modules it imports (the package's __init__ only re-exports)."""
    graph: dict[str, set[str]] = {}
    for path in [*LAUNCH.glob("*.py"), *LAUNCH.glob("backends/*.py")]:
        rel = path.relative_to(LAUNCH).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__").removesuffix("__init__") or "__init__"
        if name == "__init__":
            continue
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpulab.launch"):
                base = node.module.removeprefix("gpulab.launch").lstrip(".")
                found.update([base] if base else [a.name for a in node.names])
            elif isinstance(node, ast.Import):
                found.update(
                    a.name.removeprefix("gpulab.launch.") for a in node.names if a.name.startswith("gpulab.launch.")
                )
        graph[name] = {m for m in found if m != name}
    return graph


def test_no_import_circle_in_the_launch_layer():
    graph = _launch_imports()
    assert "tf_launch" not in graph["sweep"] and "sweep" not in graph["tf_launch"]

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and (seen.add(nxt) or reaches(nxt, goal, seen))):
                return True
        return False

    circles = sorted(m for m in graph if reaches(m, m, set()))
    assert circles == [], f"modules importing themselves through others: {circles}"


def test_worker_message_round_trip(tmp_path):
    from gpulab.launch.planning import plan_batch

    cfg = RunConfig("mnist", precision=Precision.BF16, batch=16, params={"learning_rate": 0.1})
    message = WorkerMessage(cfg, plan_batch(cfg, 2, scale_lr=True), "ddp", comm_backend=CommBackend.GLOO, threads=2)
    again = WorkerMessage.read(message.write(tmp_path / "m.json"))
    assert again == message and again.plan.lr == pytest.approx(0.2) and again.comm_backend is CommBackend.GLOO


def test_launch_describes_itself():
    launch = Launch(RunConfig("resnet50", precision=Precision.BF16), launcher="ddp", gpus=4)
    assert launch.describe() == "resnet50 (torch ddp, bf16, size standard)"
