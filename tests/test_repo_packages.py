"""NVIDIA's repository package names by driver branch (matrix.yml nvidia_repository_packages), held against
NVIDIA's Packages structure: before R580 cuda-drivers-<branch> / nvidia-open-<branch> and
nvidia-fabricmanager-<branch>; from R580 nvidia-driver-pinning-<branch> first, then the unversioned cuda-drivers /
nvidia-open and nvidia-fabricmanager (which Provides nvidia-fabricmanager-<branch>).

NVIDIA's repository is not reachable from CI: apt itself resolves the role's names against stand-in packages that
carry NVIDIA's names, versions, Depends and Provides (tests/provision/driver_stand_ins.py), with gpulab's own pin
rendered from the role's template, so a wrong name or a branch that leaks fails here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from gpulab.compat.repo_packages import nvidia_repo_packages
from guest import prereq
from playbook import REPO, ansible_playbook
from provision.driver_stand_ins import NVIDIA_REPO_STANZAS, nvidia_repo_stand_ins
from provision.inventory import require_ansible

ROLE = REPO / "roles/nvidia_driver"
RELEASE = {"535": "535.261.03", "580": "580.95.05", "590": "590.48.01"}


def test_names_by_branch_follow_nvidia_s_guide():
    assert nvidia_repo_packages("535", "proprietary") == {
        "pinning": [],
        "driver": ["cuda-drivers-535"],
        "persistenced": ["nvidia-persistenced"],
        "fabricmanager": ["nvidia-fabricmanager-535"],
    }
    assert nvidia_repo_packages("535.261.03", "open")["driver"] == ["nvidia-open-535"]
    for branch in ("580", "590.48.01"):
        major = branch.split(".")[0]
        names = nvidia_repo_packages(branch, "open")
        assert names["pinning"] == [f"nvidia-driver-pinning-{major}"]
        assert names["driver"] == ["nvidia-open"]
        assert names["fabricmanager"] == ["nvidia-fabricmanager"]
        assert nvidia_repo_packages(branch, "proprietary")["driver"] == ["cuda-drivers"]


@pytest.mark.parametrize("branch", sorted(RELEASE))
@pytest.mark.parametrize("modules", ["open", "proprietary"])
def test_every_name_is_a_real_package_of_the_branch_in_nvidia_s_packages(branch, modules):
    names = nvidia_repo_packages(branch, modules)
    real = {(s["Package"], s["Version"]) for s in NVIDIA_REPO_STANZAS}
    for name in names["pinning"] + names["driver"] + names["persistenced"] + names["fabricmanager"]:
        # apt installs a version of a real package only; a name that is merely provided cannot be pinned.
        assert (name, f"{RELEASE[branch]}-1") in real, f"{name} {RELEASE[branch]} is not in NVIDIA's Packages"
    if int(branch) >= 580:
        fm = next(
            s for s in NVIDIA_REPO_STANZAS if s["Package"] == "nvidia-fabricmanager" and s["Version"].startswith(branch)
        )
        assert fm["Provides"] == f"nvidia-fabricmanager-{branch}"


def test_a_branch_older_than_nvidia_s_naming_or_a_bad_input_is_one_clear_line():
    with pytest.raises(ValueError, match=r"^NVIDIA's repository names no driver packages for R418; .* R450"):
        nvidia_repo_packages("418", "proprietary")
    with pytest.raises(ValueError, match="must be open or proprietary"):
        nvidia_repo_packages("580", "opensource")
    # The filter the role calls, in a child process: importing Ansible patches this interpreter's sys.intern, which
    # torch's compiler refuses later in the session.
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from ansible.errors import AnsibleFilterError;"
        "from ansible_collections.gpulab.provision.plugins.filter.repo_packages import nvidia_repo_packages as f;"
        "out = {'names': f(580, 'proprietary')}\n"
        "try:\n    f('', 'open')\nexcept AnsibleFilterError as err:\n    out['error'] = str(err)\n"
        "print(json.dumps(out))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(REPO / "collections")], capture_output=True, text=True, check=True
    )
    out = json.loads(proc.stdout)
    assert out["names"]["pinning"] == ["nvidia-driver-pinning-580"]
    assert "is not a number like 580" in out["error"]


def test_the_role_takes_nvidia_s_names_from_the_matrix_only():
    """One place: no repository name is spelled in the role; the distribution's own names stay in its vars."""
    spelled = re.compile(r"cuda-drivers-\{\{|nvidia-open-\{\{|nvidia-driver-pinning")
    for path in [*ROLE.rglob("tasks/**/*.yml"), ROLE / "vars/main.yml"]:
        for line in path.read_text().splitlines():
            if not line.lstrip().startswith("#"):
                assert not spelled.search(line), f"{path.name}: {line.strip()}"
    role_vars = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    assert "gpulab.provision.nvidia_repo_packages" in role_vars["_nvidia_driver_repo"]
    install = (ROLE / "tasks/family/Debian/install.yml").read_text()
    assert install.index("_nvidia_driver_repo_pinning") < install.index("name: Install the driver packages")


@pytest.fixture(scope="module")
def nvidia_repo(tmp_path_factory) -> Path:
    """A local apt repository of the stand-ins (dpkg-scanpackages), trusted for the simulated installs."""
    prereq.require_tool("dpkg-deb")
    scan = prereq.require_tool("dpkg-scanpackages")
    base = tmp_path_factory.mktemp("nvidia-repo")
    repo = base / "repo"
    repo.mkdir()
    nvidia_repo_stand_ins(base / "work", repo)
    packages = subprocess.run([scan, "--multiversion", "."], cwd=repo, capture_output=True, text=True, check=True)
    (repo / "Packages").write_text(packages.stdout)
    return repo


def simulate(repo: Path, tmp: Path, branch: str, names: list[str], pinned: bool = True) -> subprocess.CompletedProcess:
    """`apt-get -s install` of the names against the repository alone, with gpulab's pin for the branch."""
    apt_get = prereq.require_tool("apt-get")
    (tmp / "lists/partial").mkdir(parents=True, exist_ok=True)
    (tmp / "cache/archives/partial").mkdir(parents=True, exist_ok=True)
    (tmp / "prefs.d").mkdir(exist_ok=True)
    (tmp / "status").write_text("")
    (tmp / "sources.list").write_text(f"deb [trusted=yes] file:{repo} ./\n")
    role_vars = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    pin = jinja2.Template((ROLE / "templates/nvidia-driver-pin.j2").read_text()).render(
        ansible_managed="gpulab",
        nvidia_driver_version=branch,
        _nvidia_driver_pin_packages=role_vars["_nvidia_driver_pin_packages"],
        _nvidia_driver_apt_version=f"{branch}.*",
    )
    if pinned:
        (tmp / "prefs.d/gpulab-nvidia-driver").write_text(pin)
    options = [
        f"-oDir::Etc::SourceList={tmp / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={tmp / 'lists'}",
        f"-oDir::Cache={tmp / 'cache'}",
        "-oDir::Etc::Preferences=/dev/null",
        f"-oDir::Etc::PreferencesParts={tmp / 'prefs.d'}",
        f"-oDir::State::status={tmp / 'status'}",
        "-oDebug::NoLocking=1",
        "-oAPT::Get::List-Cleanup=0",
    ]
    subprocess.run([apt_get, *options, "-q", "update"], capture_output=True, text=True, check=True)
    return subprocess.run(
        [apt_get, *options, "-s", "--no-install-recommends", "install", *names],
        capture_output=True,
        text=True,
        check=False,
    )


def role_request(branch: str, modules: str) -> list[str]:
    """What the Debian family's install.yml and fabricmanager.yml ask apt for: the pinning package, then names at
    the branch's versions."""
    names = nvidia_repo_packages(branch, modules)
    versioned = names["driver"] + names["persistenced"] + names["fabricmanager"]
    return names["pinning"] + [f"{n}={branch}.*" for n in versioned]


@pytest.mark.parametrize("branch", sorted(RELEASE))
@pytest.mark.parametrize("modules", ["open", "proprietary"])
def test_apt_installs_the_role_s_names_and_only_the_planned_branch(nvidia_repo, tmp_path, branch, modules):
    run = simulate(nvidia_repo, tmp_path, branch, role_request(branch, modules))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    installed = dict(re.findall(r"^Inst (\S+) \((\S+)", run.stdout, re.MULTILINE))
    kernel = "nvidia-kernel-open-dkms" if modules == "open" else "nvidia-kernel-dkms"
    assert installed[kernel] == f"{RELEASE[branch]}-1"
    assert all(v.startswith(f"{branch}.") for v in installed.values()), installed


def test_the_old_names_fail_from_r580_so_the_mirror_catches_them(nvidia_repo, tmp_path):
    """The names gpulab used before: R590 has no cuda-drivers-590, and R580's nvidia-fabricmanager-580 is only
    provided, so apt cannot install it at a version."""
    assert simulate(nvidia_repo, tmp_path / "a", "590", ["cuda-drivers-590=590.*"]).returncode != 0
    assert simulate(nvidia_repo, tmp_path / "b", "580", ["nvidia-fabricmanager-580=580.*"]).returncode != 0


def test_unpinned_the_branch_meta_package_pulls_the_next_branch(nvidia_repo, tmp_path):
    """Why the branch is pinned: cuda-drivers-580's lower bounds let apt take R590's libraries and modules."""
    run = simulate(nvidia_repo, tmp_path, "580", ["cuda-drivers-580"], pinned=False)
    assert run.returncode == 0, run.stdout[-2000:]
    assert re.search(r"^Inst nvidia-kernel-dkms \(590\.", run.stdout, re.MULTILINE)


def test_the_role_renders_the_names_for_each_branch(tmp_path):
    """nvidia_driver's own variables, rendered by Ansible for R535, R580 and R590 (open and proprietary)."""
    require_ansible()
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}})
    )
    tasks = [{"ansible.builtin.include_vars": {"file": str(ROLE / "vars/main.yml")}}]
    for version in ("535.261.03", "580.95.05", "590.48.01"):
        for modules in ("open", "proprietary"):
            tasks.append(
                {
                    "ansible.builtin.copy": {
                        "content": "{{ {'driver': _nvidia_driver_repo_packages[nvidia_driver_kernel_modules], "
                        "'pinning': _nvidia_driver_repo_pinning, 'fabricmanager': _nvidia_driver_repo_fabricmanager, "
                        "'persistenced': _nvidia_driver_repo_persistenced} | to_json }}",
                        "dest": str(tmp_path / f"{version}-{modules}.json"),
                        "mode": "0644",
                    },
                    "vars": {"nvidia_driver_version": version, "nvidia_driver_kernel_modules": modules},
                }
            )
    play = [{"name": "names", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    extra = json.dumps({"ansible_python_interpreter": sys.executable})
    run = ansible_playbook(tmp_path / "play.yml", tmp_path / "hosts.yml", "-e", extra, timeout=300)
    assert run.rc == 0, run.explain()
    for version in ("535.261.03", "580.95.05", "590.48.01"):
        for modules in ("open", "proprietary"):
            rendered = json.loads((tmp_path / f"{version}-{modules}.json").read_text())
            names = nvidia_repo_packages(version, modules)
            assert rendered == {k: names[k] for k in ("driver", "pinning", "fabricmanager", "persistenced")}
    assert json.loads((tmp_path / "580.95.05-open.json").read_text())["fabricmanager"] == ["nvidia-fabricmanager"]
