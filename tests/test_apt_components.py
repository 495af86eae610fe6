"""Debian's contrib, non-free and non-free-firmware enabled on the archive's own sources
(gpulab.provision.apt_components), in the format each file uses, or refused with nothing changed. The module runs
for real (ansible on localhost against a directory standing for /); a Debian 12 root without non-free gets them in
tests/test_roles_chroot.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from playbook import REPO, ansible_env
from provision.inventory import require_ansible

NON_FREE = ["contrib", "non-free", "non-free-firmware"]

DEB822 = """\
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.debian.org/debian-security
Suites: trixie-security
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""
OTHER = """\
Types: deb
URIs: https://download.docker.com/linux/debian
Suites: trixie
Components: stable
"""
ONE_LINE = """\
# Debian 12, as the installer writes it
deb http://mirror.example.org/debian/ bookworm main
deb-src http://mirror.example.org/debian/ bookworm main
deb [arch=amd64] http://mirror.example.org/debian/ bookworm-updates main non-free-firmware  # updates
deb http://security.debian.org/debian-security bookworm-security main
deb https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /
"""


def module(root: Path, suite: str, *extra: str) -> tuple[int, dict]:
    require_ansible("ansible")
    args = json.dumps({"components": NON_FREE, "suite": suite, "root": str(root)})
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "localhost",
            "-m",
            "gpulab.provision.apt_components",
            "-a",
            args,
            "-o",
            *extra,
        ],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    body = proc.stdout.split("=>", 1)[-1].strip()
    return proc.returncode, json.loads(body)


def tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_deb822_sources_get_the_components_and_other_repositories_are_left_alone(tmp_path):
    tree(tmp_path, {"etc/apt/sources.list.d/debian.sources": DEB822, "etc/apt/sources.list.d/docker.sources": OTHER})
    rc, out = module(tmp_path, "trixie", "--check")
    assert rc == 0 and out["changed"]
    assert (tmp_path / "etc/apt/sources.list.d/debian.sources").read_text() == DEB822  # --check wrote nothing
    rc, out = module(tmp_path, "trixie")
    assert out["files"] == [str(tmp_path / "etc/apt/sources.list.d/debian.sources")]
    text = (tmp_path / "etc/apt/sources.list.d/debian.sources").read_text()
    assert text == DEB822.replace(
        "Components: main\n", "Components: main contrib non-free non-free-firmware\n"
    ).replace("Components: main contrib\n", "Components: main contrib non-free non-free-firmware\n")
    assert (tmp_path / "etc/apt/sources.list.d/docker.sources").read_text() == OTHER
    rc, out = module(tmp_path, "trixie")
    assert rc == 0 and not out["changed"]


def test_one_line_sources_keep_their_options_and_comments(tmp_path):
    tree(tmp_path, {"etc/apt/sources.list": ONE_LINE})
    rc, out = module(tmp_path, "bookworm")
    assert rc == 0 and out["changed"]
    assert (tmp_path / "etc/apt/sources.list").read_text().splitlines() == [
        "# Debian 12, as the installer writes it",
        "deb http://mirror.example.org/debian/ bookworm main contrib non-free non-free-firmware",
        "deb-src http://mirror.example.org/debian/ bookworm main",
        "deb [arch=amd64] http://mirror.example.org/debian/ bookworm-updates main non-free-firmware contrib non-free"
        "  # updates",
        "deb http://security.debian.org/debian-security bookworm-security main contrib non-free non-free-firmware",
        "deb https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /",
    ]


def test_a_host_without_the_archive_s_sources_is_refused_with_nothing_changed(tmp_path):
    tree(tmp_path, {"etc/apt/sources.list.d/docker.sources": OTHER, "etc/apt/sources.list": ONE_LINE})
    rc, out = module(tmp_path, "trixie")
    assert rc != 0 and not out["changed"]
    assert out["msg"].startswith("no apt source of the trixie archive (a deb entry whose URI ends in /debian")
    assert "Components: main contrib non-free non-free-firmware" in out["msg"]
    assert (tmp_path / "etc/apt/sources.list").read_text() == ONE_LINE
