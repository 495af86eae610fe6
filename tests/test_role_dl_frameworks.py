"""The dl_frameworks role: the matrix's wheel choice (unit), the controller-side archive (unit), and the role
really run into a Debian 12 root (community.general.chroot) from a wheelhouse, twice: the second run changes
nothing, a changed gpulab source is reinstalled, bad input is refused before the node is touched."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from playbook import REPO, ansible_playbook, snapshot_source, torch_cpu_requirements, wheelhouse

sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.gpulab.provision.plugins.plugin_utils import bundle, gpulab_wheel

from gpulab.compat import wheels as frameworks
from gpulab.errors import GpulabError

CONSTRAINTS = (REPO / "constraints.txt").read_text()
P100, H200 = "10de:15f8", "10de:2335"


def plan(**kwargs):
    kwargs.setdefault("python", "3.11")
    kwargs.setdefault("constraints", CONSTRAINTS)
    return frameworks.plan_frameworks(**kwargs)


def pin(name: str) -> str:
    return frameworks.parse_pins(CONSTRAINTS)[name]


# -- the matrix's choice ---------------------------------------------------------------------------------------------


def test_pascal_gets_the_cu126_torch_build_and_tf_with_its_cuda_wheels():
    p = plan(frameworks=["torch", "tensorflow"], gpu_pci_ids=[P100] * 4, driver="580.95.05")
    assert p.gpu == "Tesla P100-PCIE-16GB" and p.compute_capability == "6.0"
    torch, tf = p.choices
    assert torch.build == "cu126" and torch.requirement == f"torch=={pin('torch')}+cu126"
    assert tf.requirement == f"tensorflow[and-cuda]=={pin('tensorflow')}"
    assert p.extras == ["torch", "tf"] and p.dropped_pins == []


def test_a_host_without_gpus_gets_cpu_builds():
    p = plan(frameworks=["torch", "tensorflow"], gpu_pci_ids=[])
    assert p.gpu is None
    assert [c.requirement for c in p.choices] == [
        f"torch=={pin('torch')}+cpu",
        f"tensorflow-cpu=={pin('tensorflow-cpu')}",
    ]
    assert p.extras == ["torch", "tf-cpu"]
    assert "no NVIDIA GPU" in p.summary()


def test_the_profile_release_is_honoured_and_its_old_pins_are_dropped():
    p = plan(
        frameworks=["torch", "tensorflow"],
        gpu_pci_ids=[H200],
        driver="580.95.05",
        torch="2.13+cu130",
        tensorflow="2.20",
    )
    assert p.choices[0].requirement == f"torch=={pin('torch')}+cu130"
    assert p.choices[1].requirement == "tensorflow[and-cuda]==2.20.*"
    assert set(p.dropped_pins) == {"tensorflow", "tensorflow-cpu", "keras"}
    kept = p.constraints(CONSTRAINTS)
    assert "tensorflow==" not in kept and "keras==" not in kept and f"torch=={pin('torch')}" in kept


def test_an_older_torch_release_is_pinned_by_release_not_by_the_constraints():
    p = plan(frameworks=["torch"], gpu_pci_ids=[P100], torch="2.9")
    assert p.choices[0].requirement == "torch==2.9.*" and p.choices[0].build == "cu126"
    assert set(p.dropped_pins) == {"torch", "torchvision"}


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"frameworks": ["torch"], "gpu_pci_ids": [P100], "torch": "2.13+cu130"}, ["kernels", "cu126"]),
        ({"frameworks": ["tensorflow"], "gpu_pci_ids": [], "tensorflow": "2.21", "python": "3.8"}, ["Python", "3.8"]),
        ({"frameworks": ["jax"], "gpu_pci_ids": []}, ["jax", "dl_frameworks_frameworks"]),
        ({"frameworks": ["torch"], "gpu_pci_ids": ["10de:ffff"]}, ["10de:ffff", "matrix.yml"]),
        ({"frameworks": ["torch"], "gpu_pci_ids": ["nvidia"]}, ["not a PCI id"]),
        ({"frameworks": ["torch"], "gpu_pci_ids": [P100], "driver": "390.1"}, ["driver 390.1", "Fix"]),
    ],
)
def test_an_impossible_request_names_the_problem_and_the_fix(kwargs, words):
    with pytest.raises(GpulabError) as err:
        plan(**kwargs)
    for word in words:
        assert word in str(err.value)


def test_requirements_offline_and_online():
    p = plan(frameworks=["torch"], gpu_pci_ids=[P100])
    offline = frameworks.requirements_text(p, "0.1.0+gabc", "/stage/wheels", "/stage/constraints.txt", offline=True)
    assert offline.splitlines()[1:] == [
        "--no-index",
        "--find-links /stage/wheels",
        "-c /stage/constraints.txt",
        "gpulab[torch]==0.1.0+gabc",
        f"torch=={pin('torch')}+cu126",
    ]
    online = frameworks.requirements_text(p, "0.1.0+gabc", "/w", None, offline=False, index_url="https://mirror/simple")
    assert "--index-url https://mirror/simple" in online
    assert "--extra-index-url https://download.pytorch.org/whl/cu126" in online
    assert "--no-index" not in online and "-c " not in online


# -- the controller-side archive ---------------------------------------------------------------------------------------


def test_archives_are_reproducible_and_named_by_content(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    (src / "sub" / "__pycache__").mkdir()
    (src / "sub" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    members = [(f"src/{rel}", src / rel) for rel in bundle.tree_files(src)]
    assert [m[0] for m in members] == ["src/a.txt", "src/sub/b.txt"]
    first, built = bundle.keyed_tar(tmp_path / "out1", "x", members)
    (src / "a.txt").touch()  # a new mtime alone changes nothing
    second, _ = bundle.keyed_tar(tmp_path / "out2", "x", [(n, p) for n, p in members])
    assert built and first.name == second.name and first.read_bytes() == second.read_bytes()
    again, built_again = bundle.keyed_tar(tmp_path / "out1", "x", members)
    assert again == first and not built_again
    with tarfile.open(first) as tar:
        assert {m.name: (m.mtime, m.uid) for m in tar.getmembers() if m.isfile()} == {
            "src/a.txt": (bundle.EPOCH, 0),
            "src/sub/b.txt": (bundle.EPOCH, 0),
        }
    (src / "a.txt").write_text("changed")
    changed, _ = bundle.keyed_tar(tmp_path / "out1", "x", members)
    assert changed != first


def test_the_wheel_version_is_labelled_with_the_source_hash():
    text, version = gpulab_wheel.labelled_version('[project]\nname = "gpulab"\nversion = "0.1.0"\n', "abc123")
    assert version == "0.1.0+gabc123" and 'version = "0.1.0+gabc123"' in text
    with pytest.raises(gpulab_wheel.WheelError):
        gpulab_wheel.labelled_version("[project]\n", "abc")
    assert gpulab_wheel.wheel_version(Path("gpulab-0.1.0+gabc-py3-none-any.whl")) == "0.1.0+gabc"


# -- the role, for real -----------------------------------------------------------------------------------------------

PLAYBOOK = """\
- name: Frameworks venv
  hosts: all
  gather_facts: true
  roles:
    - role: dl_frameworks
"""


def write_inventory(path: Path, root: Path, **hostvars) -> Path:
    host = {
        "ansible_connection": "community.general.chroot",
        "ansible_host": str(root),
        "ansible_python_interpreter": "/usr/bin/python3",
        **hostvars,
    }
    path.write_text(yaml.safe_dump({"all": {"hosts": {"image": host}}}))
    return path


def in_root(root: Path, *cmd: str) -> str:
    return subprocess.run(["chroot", str(root), *cmd], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_role_installs_torch_from_a_wheelhouse_into_a_debian_root_idempotently(debian_root, tmp_path):
    houses = wheelhouse(torch_cpu_requirements())
    source = snapshot_source(tmp_path / "source")
    common = {
        "dl_frameworks_frameworks": ["torch"],
        "dl_frameworks_wheelhouse": str(houses),
        "dl_frameworks_gpulab_source": str(source),
        "dl_frameworks_constraints": str(source / "constraints.txt"),
        "dl_frameworks_controller_cache": str(tmp_path / "cache"),
    }
    playbook = tmp_path / "frameworks.yml"
    playbook.write_text(PLAYBOOK)

    # Bad input is refused on the controller, before anything reaches the node.
    bad = write_inventory(tmp_path / "bad.yml", debian_root, **{**common, "dl_frameworks_wheelhouse": "/nonexistent"})
    refused = ansible_playbook(playbook, bad)
    assert refused.rc != 0 and "dl_frameworks_wheelhouse /nonexistent: no such directory" in refused.output
    assert not (debian_root / "opt/gpulab").exists()

    inventory = write_inventory(tmp_path / "inventory.yml", debian_root, **common)
    first = ansible_playbook(playbook, inventory)
    assert first.rc == 0, first.explain()
    assert first.recap()["image"]["changed"] > 0
    assert f"torch=={pin('torch')}+cpu (cpu)" in first.output  # the matrix's CPU choice, said in one line

    venv = "/opt/gpulab/venvs/default"
    freeze = in_root(debian_root, f"{venv}/bin/pip", "freeze")
    assert f"torch=={pin('torch')}+cpu" in freeze
    gpulab_line = next(line for line in freeze.splitlines() if line.startswith("gpulab=="))
    assert "+g" in gpulab_line  # the source-hash label
    probe = "import torch, gpulab.compat; print(torch.__version__, torch.version.cuda)"
    assert in_root(debian_root, f"{venv}/bin/python", "-c", probe).split() == [f"{pin('torch')}+cpu", "None"]
    requirements = (debian_root / "opt/gpulab/stage/default/requirements.txt").read_text()
    assert "--no-index" in requirements.splitlines()

    second = ansible_playbook(playbook, inventory)
    assert second.rc == 0, second.explain()
    print("second run:", second.recap_text())
    assert second.recap()["image"]["changed"] == 0, second.changed_tasks()

    # A change to gpulab's source is a new version: the node gets it, nothing else is reinstalled.
    init = source / "src/gpulab/__init__.py"
    init.write_text(init.read_text() + "# rebuilt\n")
    third = ansible_playbook(playbook, inventory)
    assert third.rc == 0, third.explain()
    new_line = next(
        line for line in in_root(debian_root, f"{venv}/bin/pip", "freeze").splitlines() if "gpulab==" in line
    )
    assert new_line != gpulab_line
    assert "# rebuilt" in in_root(
        debian_root, f"{venv}/bin/python", "-c", "import gpulab, inspect; print(inspect.getsource(gpulab))"
    )
    assert {task for task, _ in third.changed_tasks()} >= {
        "dl_frameworks : Install gpulab and the frameworks into the venv"
    }


def test_more_gpulab_extras_ride_along_and_bad_names_are_refused():
    p = plan(frameworks=["torch"], gpu_pci_ids=[], extras=["vm", "torch"])
    assert p.extras == ["torch", "vm"]
    assert "gpulab[torch,vm]==" in frameworks.requirements_text(p, "0.1.0", "/w", None, offline=True)
    with pytest.raises(GpulabError, match="not extra names"):
        plan(frameworks=[], gpu_pci_ids=[], extras=["vm; rm -rf /"])
