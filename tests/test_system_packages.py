"""tests/system-packages.txt is the one list of what the tests need from the system, and it is true.

Two holds: every command the tests run (or look for) is in the table, so that a fresh machine installs it; and each
entry of the table is provided by its package, as dpkg says where the package is installed (under CI's
GPULAB_REQUIRE_ALL=1 every package must be installed)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from guest import prereq

TESTS = Path(__file__).parent
# Calls that run a system command: subprocess's, and the tests' own runners of system commands.
SUBPROCESS = {"subprocess.run", "subprocess.check_output", "subprocess.check_call", "subprocess.call"}
SUBPROCESS |= {"subprocess.Popen", "shutil.which"}
SYSTEM_RUNNERS = {"run", "_run", "image.run"}  # in tests/guest and tests/provision only: there they run system tools


def _commands_run_by_the_tests() -> dict[str, list[str]]:
    """Each literal command (the first word of an argv) a test or helper runs, with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        if "device" in path.relative_to(TESTS).parts[:-1]:
            continue  # scripts for a GPU machine (nvidia-smi there), not run by the tests here
        helpers = path.parent.name in ("guest", "provision")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = ast.unparse(node.func)
            if func not in SUBPROCESS and not (helpers and func in SYSTEM_RUNNERS):
                continue
            first = node.args[0]
            if isinstance(first, (ast.List, ast.Tuple)) and first.elts:
                first = first.elts[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.setdefault(first.value, []).append(f"{path.relative_to(TESTS)}:{node.lineno}")
    return found


def test_every_command_the_tests_run_has_its_package_in_the_table() -> None:
    commands = _commands_run_by_the_tests()
    # The scan must see the commands it exists for; an empty or blind scan would hold anything.
    assert {"qemu-img", "mkfs.ext4", "dpkg-scanpackages", "gpg", "virsh", "chroot"} <= commands.keys()
    unlisted = {cmd: where for cmd, where in commands.items() if cmd not in prereq.provided_by()}
    assert not unlisted, f"commands the tests run with no package in {prereq.PACKAGES_FILE}: {unlisted}"


def test_every_tool_a_heavy_fixture_requires_is_in_the_table() -> None:
    from guest import fixtures

    for tool in fixtures.BOOT_TOOLS:
        assert prereq.package_of(tool)


def test_the_scan_finds_an_unlisted_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "guest").mkdir()
    (tmp_path / "guest" / "helper.py").write_text('run(["mkisofs", "-o", "x.iso"])\n')
    (tmp_path / "test_x.py").write_text('import subprocess\nsubprocess.run(["ovmfctl", "--help"])\nrun(["matrix"])\n')
    (tmp_path / "device").mkdir()
    (tmp_path / "device" / "probe.py").write_text('import subprocess\nsubprocess.run(["nvidia-smi"])\n')
    monkeypatch.setattr(f"{__name__}.TESTS", tmp_path)
    assert _commands_run_by_the_tests() == {"mkisofs": ["guest/helper.py:1"], "ovmfctl": ["test_x.py:2"]}


def _installed(package: str) -> bool:
    run = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", package], capture_output=True, text=True)
    return run.returncode == 0 and run.stdout.startswith("ii")


def _owners(path: str) -> set[str]:
    """The packages dpkg says ship `path` (tried as given, then resolved and across the merged /usr)."""
    candidates = [path, os.path.realpath(path)]
    for p in list(candidates):
        if p.startswith("/usr/"):
            candidates.append(p.removeprefix("/usr"))
        else:
            candidates.append("/usr" + p)
    for candidate in candidates:
        run = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
        # "pkg1, pkg2:amd64: /path" per line; "diversion by dash from: /bin/sh" lines name no owner.
        lines = [line for line in run.stdout.splitlines() if not line.startswith("diversion by ")]
        if run.returncode == 0 and lines:
            return {o.strip().split(":")[0] for o in lines[0].rsplit(": ", 1)[0].split(",")}
    return set()


def _depends(package: str) -> set[str]:
    """The package and what it depends on directly (pkg-config's command is its dependency pkgconf's)."""
    run = subprocess.run(["dpkg-query", "-W", "-f=${Depends}", package], capture_output=True, text=True, check=True)
    names = {alt.split()[0].split(":")[0] for dep in run.stdout.split(",") for alt in dep.split("|") if alt.strip()}
    return {package} | names


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg (a Debian or Ubuntu machine)")
@pytest.mark.parametrize("package", sorted(prereq.system_packages()))
def test_each_package_provides_what_the_table_says(package: str) -> None:
    if not _installed(package):
        prereq.missing(f"{package} is not installed (./bootstrap.sh test installs tests/system-packages.txt)")
    wrong = {}
    for thing in prereq.system_packages()[package]:
        path = thing if thing.startswith("/") else shutil.which(thing)
        if path is None or not Path(path).exists():
            wrong[thing] = f"not on this machine although {package} is installed"
            continue
        owners = _owners(path)
        if not owners & _depends(package):
            wrong[thing] = f"{path} belongs to {sorted(owners) or 'no package'}, not {package}"
    assert not wrong, f"tests/system-packages.txt is wrong about {package}: {wrong}"
