"""NVIDIA's repository is preferred by the Label of its Release file, as NVIDIA's own cuda-repository-pin-600 does,
not by the host that serves it: a mirror host that also serves Debian's archive must not raise Debian's packages.
apt itself reads the role's rendered pin against two local repositories, one labelled as NVIDIA's."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import jinja2
import yaml

from guest import prereq
from playbook import REPO
from provision.apt_mirror import NVIDIA_LABEL, build_deb, release_file

ROLE = REPO / "roles/nvidia_cuda_repo"


def repository(base: Path, label: str, packages: dict[str, str]) -> Path:
    scan = prereq.require_tool("dpkg-scanpackages")
    repo = base / label.replace(" ", "-")
    repo.mkdir(parents=True)
    for name, version in packages.items():
        tree = base / "work" / f"{name}-{label}"
        (tree / "usr/share/doc" / name).mkdir(parents=True)
        build_deb(tree, repo, {"Package": name, "Version": version, "Architecture": "all", "Description": name})
    index = subprocess.run([scan, "."], cwd=repo, capture_output=True, text=True, check=True).stdout
    (repo / "Packages").write_text(index)
    (repo / "Packages.gz").write_bytes(gzip.compress(index.encode()))
    (repo / "Release").write_text(release_file(repo, label))
    return repo


def test_the_pin_raises_nvidia_s_repository_only(tmp_path: Path) -> None:
    apt_cache = prereq.require_tool("apt-cache")
    apt_get = prereq.require_tool("apt-get")
    nvidia = repository(tmp_path, NVIDIA_LABEL, {"cuda-keyring": "1.1-1", "libshared": "1.0-1"})
    debian = repository(tmp_path, "Debian", {"libshared": "2.0-1"})
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    pin = jinja2.Template((ROLE / "templates/cuda-repository-pin.j2").read_text()).render(
        ansible_managed="gpulab",
        nvidia_cuda_repo_label=defaults["nvidia_cuda_repo_label"],
        nvidia_cuda_repo_priority=defaults["nvidia_cuda_repo_priority"],
        nvidia_cuda_repo_url="http://mirror.example/cuda/repos/debian12/x86_64/",
    )
    state = tmp_path / "apt"
    for d in ("lists/partial", "cache/archives/partial", "prefs.d"):
        (state / d).mkdir(parents=True)
    (state / "status").write_text("")
    (state / "prefs.d/cuda-repository-pin-600").write_text(pin)
    (state / "sources.list").write_text(f"deb [trusted=yes] file:{nvidia} ./\ndeb [trusted=yes] file:{debian} ./\n")
    options = [
        f"-oDir::Etc::SourceList={state / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={state / 'lists'}",
        f"-oDir::Cache={state / 'cache'}",
        "-oDir::Etc::Preferences=/dev/null",
        f"-oDir::Etc::PreferencesParts={state / 'prefs.d'}",
        f"-oDir::State::status={state / 'status'}",
        "-oDebug::NoLocking=1",
    ]
    update = subprocess.run([apt_get, *options, "-q", "update"], capture_output=True, text=True, check=False)
    assert update.returncode == 0, update.stdout + update.stderr
    policy = subprocess.run([apt_cache, *options, "policy", "libshared"], capture_output=True, text=True, check=True)
    lines = [line.strip() for line in policy.stdout.splitlines()]
    # NVIDIA's build wins at 600 although Debian's is newer; Debian's stays at apt's default 500.
    assert "Candidate: 1.0-1" in lines, policy.stdout
    assert lines[lines.index("1.0-1 600") + 1].startswith(f"600 file:{nvidia}")
    assert lines[lines.index("2.0-1 500") + 1].startswith(f"500 file:{debian}")
