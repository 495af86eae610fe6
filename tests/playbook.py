"""Run gpulab's playbooks from tests: the repository's ansible.cfg, parsed PLAY RECAPs, and wheelhouses for nodes
without internet access (built once per recipe and cached outside the clone)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
_RECAP = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", re.MULTILINE)
_TASK = re.compile(r"^TASK \[(.+?)\] \*+$")
_CHANGED = re.compile(r"^changed: \[([^\]]+)\]")


def cache_root() -> Path:
    return Path(os.environ.get("GPULAB_CI_CACHE", "/var/cache/gpulab-ci"))


@dataclass
class Run:
    argv: list[str]
    rc: int
    output: str

    def recap(self) -> dict[str, dict[str, int]]:
        """{host: {ok: n, changed: n, failed: n, ...}} from the last PLAY RECAP."""
        tail = self.output.rsplit("PLAY RECAP", 1)[-1]
        return {
            host: {k: int(v) for k, v in (item.split("=") for item in counts.split())}
            for host, counts in _RECAP.findall(tail)
        }

    def recap_text(self) -> str:
        """The last PLAY RECAP block (up to the first blank line after it)."""
        tail = self.output.rsplit("PLAY RECAP", 1)[-1]
        return "PLAY RECAP" + tail.split("\n\n", 1)[0].rstrip()

    def changed_tasks(self) -> list[tuple[str, str]]:
        """(task name, host) for every task that reported changed."""
        out, task = [], ""
        for line in self.output.splitlines():
            if m := _TASK.match(line):
                task = m.group(1)
            elif m := _CHANGED.match(line):
                out.append((task, m.group(1).split(" -> ")[0]))
        return out

    def explain(self) -> str:
        return f"{' '.join(self.argv)} exited {self.rc}:\n{self.output[-6000:]}"


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment for ansible-playbook: the repository's ansible.cfg, no colour, and none of this machine's pip
    settings (a chroot target would inherit them and look for a certificate bundle and wheel folder it lacks)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "ANSIBLE_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
        ANSIBLE_STDOUT_CALLBACK="default",
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
    )
    env.update(extra)
    return env


def ansible_playbook(
    playbook: str | Path, inventory: Path, *args: str, timeout: float = 1800, env: dict[str, str] | None = None
) -> Run:
    """ansible-playbook from the repository root with the Ansible next to this Python; output printed and kept."""
    exe = Path(sys.executable).parent / "ansible-playbook"
    if not exe.is_file():
        from guest.prereq import missing

        missing(f"needs {exe.name} next to {sys.executable} (pip install -c constraints.txt -e '.[ansible]')")
    return run_logged([str(exe), "-i", str(inventory), str(playbook), *args], env=env or ansible_env(), timeout=timeout)


def run_logged(argv: list[str], *, env: dict[str, str], timeout: float) -> Run:
    """Run `argv` from the repository root, stdout and stderr together; the output printed (pytest shows it on a
    failure) and kept."""
    proc = subprocess.run(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(proc.stdout[-20000:])
    return Run(argv=argv, rc=proc.returncode, output=proc.stdout)


def gpulab_requirements(extras: tuple[str, ...] = ()) -> list[str]:
    """gpulab's dependencies from pyproject.toml (base plus the named extras), as pip requirement strings."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return reqs


def torch_cpu_requirements() -> list[str]:
    """gpulab with its torch extra and torch's CPU build at the pinned version (what a host without a GPU gets)."""
    from gpulab.compat.wheels import parse_pins

    torch = parse_pins((REPO / "constraints.txt").read_text())["torch"]
    return [*gpulab_requirements(("torch",)), f"torch=={torch}+cpu"]


def wheelhouse(requirements: list[str], python: str = "3.11") -> Path:
    """A directory of wheels for `requirements` (pinned by constraints.txt) for CPython `python` on x86_64 Linux,
    built with this Python's pip (which must be that version: sdist-only dependencies are built into wheels).

    Cached under ${GPULAB_CI_CACHE}/wheelhouse-<hash of requirements, constraints and Python>; built into a temporary
    directory and renamed, so an interrupted build never leaves a half wheelhouse."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if here != python:
        raise RuntimeError(f"building a wheelhouse for Python {python} needs Python {python} here, not {here}")
    constraints = (REPO / "constraints.txt").read_bytes()
    key = hashlib.sha256("\n".join([python, *requirements]).encode() + constraints).hexdigest()[:16]
    dest = cache_root() / f"wheelhouse-{key}"
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(tmp)]
        cmd += ["-c", str(REPO / "constraints.txt"), *requirements]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        try:
            tmp.rename(dest)
        except OSError:
            if not dest.is_dir():  # not a parallel build that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def snapshot_source(dest: Path) -> Path:
    """A copy of what gpulab's wheel is built from, so edits made to the checkout while a test runs cannot turn
    an idempotent second run into a rebuild."""
    dest.mkdir(parents=True, exist_ok=True)
    for item in ("pyproject.toml", "README.md", "constraints.txt"):
        shutil.copy2(REPO / item, dest / item)
    shutil.copytree(REPO / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
    return dest
