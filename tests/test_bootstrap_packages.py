"""./bootstrap.sh on a machine without the tests' system packages or Python's venv module.

CI's machine already has every package, so these tests build the fresh situation themselves: a PATH whose
`dpkg-query` reads the installed packages from a state file (empty: nothing installed), whose `apt-get` records each
call and "installs" by adding to that file (or fails like a broken mirror), and, for the venv probe, a `python3`
that lacks venv/ensurepip until `python3-venv` is in the state file. `id` can claim another user. Everything after
the package step runs for real against this test run's venv.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from guest import prereq
from playbook import REPO

BOOTSTRAP = REPO / "bootstrap.sh"
# Every ./bootstrap.sh of the suite installs the checkout into the same venv: one worker runs them, one at a time.
pytestmark = pytest.mark.xdist_group("bootstrap")
SYSTEM_PACKAGES = list(prereq.system_packages())

# dpkg-query -W [-f FORMAT] PKG...: "ii " for packages in $STATE, dpkg's own message and exit 1 for the others.
FAKE_DPKG_QUERY = r"""#!/usr/bin/env bash
rc=0
for arg in "$@"; do
  case "$arg" in -W|-f=*|--showformat=*) continue ;; esac
  if grep -qx -- "$arg" "$STATE"; then printf 'ii '; else
    echo "dpkg-query: no packages found matching $arg" >&2; rc=1; fi
done
exit $rc
"""

# apt-get: every call recorded in $CALLS; "install" adds its packages to $STATE unless $APT_FAIL says otherwise.
FAKE_APT_GET = r"""#!/usr/bin/env bash
echo "$*" >> "$CALLS"
if [ -n "${APT_FAIL:-}" ]; then echo "E: $APT_FAIL" >&2; exit 100; fi
install=0
for arg in "$@"; do
  case "$arg" in install) install=1 ;; -*) ;; *) [ "$install" = 1 ] && echo "$arg" >> "$STATE" ;; esac
done
exit 0
"""

FAKE_ID = """#!/bin/sh
[ "$1" = -u ] && { echo 1000; exit 0; }
exec /usr/bin/id "$@"
"""

# python3 without venv/ensurepip until python3-venv is "installed"; otherwise the real interpreter.
FAKE_PYTHON = f"""#!/usr/bin/env bash
if [ "$1" = -c ] && [[ "$2" == *"import ensurepip, venv"* ]] && ! grep -qx python3-venv "$STATE"; then
  echo "ModuleNotFoundError: No module named 'ensurepip'" >&2; exit 1
fi
exec {sys.executable} "$@"
"""


class FreshMachine:
    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.state = root / "installed"
        self.state.write_text("")
        self.calls = root / "apt-calls"
        self.calls.write_text("")
        self.tmp = root / "tmp"
        self.tmp.mkdir()
        for name, text in (("dpkg-query", FAKE_DPKG_QUERY), ("apt-get", FAKE_APT_GET)):
            self.tool(name, text)

    def tool(self, name: str, text: str) -> None:
        path = self.bin / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def install(self, *packages: str) -> None:
        with self.state.open("a") as fh:
            fh.writelines(f"{p}\n" for p in packages)

    def apt_calls(self) -> list[str]:
        return self.calls.read_text().splitlines()

    def bootstrap(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        environ = {
            "PATH": f"{self.bin}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/root"),
            "STATE": str(self.state),
            "CALLS": str(self.calls),
            "TMPDIR": str(self.tmp),
            "GPULAB_VENV": sys.prefix,  # this run's venv: its extras are installed, nothing is downloaded
            **{k: v for k, v in os.environ.items() if k.startswith("PIP_")},
            **env,
        }
        return subprocess.run(
            [str(BOOTSTRAP), *args], env=environ, capture_output=True, text=True, timeout=300, check=False
        )


@pytest.fixture
def machine(tmp_path: Path) -> FreshMachine:
    return FreshMachine(tmp_path)


def test_the_fake_dpkg_query_fails_like_the_real_one_on_an_absent_package(machine: FreshMachine) -> None:
    # The original failure: dpkg-query exits 1 as soon as one package is absent, which under pipefail ended the run.
    run = subprocess.run(
        [str(machine.bin / "dpkg-query"), "-W", "-f=${db:Status-Abbrev}", "gcc"],
        env={**os.environ, "STATE": str(machine.state)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1 and "no packages found matching gcc" in run.stderr
    if shutil.which("dpkg-query", path="/usr/bin:/bin"):
        real = subprocess.run(
            ["dpkg-query", "-W", "gpulab-no-such-package"], capture_output=True, text=True, check=False
        )
        assert real.returncode == 1 and "no packages found matching" in real.stderr


def test_test_installs_every_missing_system_package_then_runs_pytest(machine: FreshMachine) -> None:
    machine.install("gcc", "pkg-config")  # a machine that has a few of them
    run = machine.bootstrap("test", "--version")
    assert run.returncode == 0, run.stdout + run.stderr
    absent = [p for p in SYSTEM_PACKAGES if p not in ("gcc", "pkg-config")]
    assert f"installing system packages: {' '.join(absent)}" in run.stdout
    calls = machine.apt_calls()
    assert calls[0] == "update -qq"
    assert (
        calls[1].split()[-len(absent) :] == absent and "install" in calls[1] and "--no-install-recommends" in calls[1]
    )
    assert "pytest" in run.stdout + run.stderr  # `pytest --version` ran: the run went past the package step


def test_test_installs_nothing_when_every_package_is_there(machine: FreshMachine) -> None:
    machine.install(*SYSTEM_PACKAGES)
    run = machine.bootstrap("test", "--version")
    assert run.returncode == 0, run.stdout + run.stderr
    assert machine.apt_calls() == []
    assert "installing system packages" not in run.stdout


def test_a_package_in_state_other_than_installed_counts_as_absent(machine: FreshMachine) -> None:
    # "rc" (removed, config files left) is what dpkg reports after `apt-get remove`: the package is not there.
    machine.tool(
        "dpkg-query",
        FAKE_DPKG_QUERY.replace("printf 'ii '", "if [ \"$arg\" = gcc ]; then printf 'rc '; else printf 'ii '; fi"),
    )
    machine.install(*SYSTEM_PACKAGES)
    run = machine.bootstrap("test", "--version")
    assert "installing system packages: gcc" in run.stdout
    assert machine.apt_calls()[1].split()[-1] == "gcc"


def test_a_failing_apt_get_is_named_with_its_output_and_the_fix(machine: FreshMachine) -> None:
    run = machine.bootstrap("test", "--version", APT_FAIL="Unable to locate package libvirt-dev")
    assert run.returncode == 2
    assert "bootstrap: apt-get update failed (exit 100)" in run.stderr
    assert "E: Unable to locate package libvirt-dev" in run.stderr
    assert "check the machine's apt sources and network" in run.stderr
    assert "pytest" not in run.stdout


def test_packages_still_absent_after_apt_get_stop_the_run(machine: FreshMachine) -> None:
    machine.tool("apt-get", 'echo "$*" >> "$CALLS"; exit 0\n')  # says yes, installs nothing
    run = machine.bootstrap("test", "--version")
    assert run.returncode == 2
    assert "apt-get reported success but these packages are still not installed: libvirt-dev" in run.stderr


def test_as_a_user_the_missing_packages_and_the_command_are_named(machine: FreshMachine) -> None:
    machine.tool("id", FAKE_ID)
    machine.install(*[p for p in SYSTEM_PACKAGES if p not in ("debootstrap", "xorriso")])
    run = machine.bootstrap("test", "--version")
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == (
        "bootstrap: missing system packages: debootstrap xorriso; "
        "install them with: sudo apt-get install debootstrap xorriso"
    )
    assert machine.apt_calls() == []


def test_a_python_without_venv_gets_python3_venv_installed(machine: FreshMachine) -> None:
    machine.tool("python3", FAKE_PYTHON)
    run = machine.bootstrap("validate", "--version")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Python's venv module is missing" in run.stdout
    assert machine.apt_calls()[1].split()[-1] == "python3-venv"


def test_a_python_without_venv_as_a_user_names_the_package(machine: FreshMachine) -> None:
    machine.tool("python3", FAKE_PYTHON)
    machine.tool("id", FAKE_ID)
    run = machine.bootstrap("validate", "--version")
    assert run.returncode == 2
    assert "install them with: sudo apt-get install python3-venv" in run.stderr


def test_an_unwritable_venv_path_is_named(machine: FreshMachine, tmp_path: Path) -> None:
    machine.install(*SYSTEM_PACKAGES)
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = machine.bootstrap("validate", "--version", GPULAB_VENV=str(blocker / "venv"))
    assert run.returncode == 2
    assert f"bootstrap: creating the virtual environment {blocker / 'venv'} failed" in run.stderr
    assert "set GPULAB_VENV to another path" in run.stderr


def test_a_failing_pip_install_is_named(machine: FreshMachine, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    run = machine.bootstrap("validate", "--version", GPULAB_VENV=str(venv))
    assert run.returncode == 2
    assert "bootstrap: upgrading pip in" in run.stderr and "failed (exit" in run.stderr
    assert "check that PyPI (or PIP_INDEX_URL) is reachable" in run.stderr
