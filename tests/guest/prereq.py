"""The prerequisite rule for heavy tests: skip with one line naming what is missing, fail under GPULAB_REQUIRE_ALL=1."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

PACKAGES_FILE = Path(__file__).resolve().parents[1] / "system-packages.txt"


@functools.cache
def system_packages() -> dict[str, tuple[str, ...]]:
    """tests/system-packages.txt: each package the tests need, with the commands and files they use from it."""
    table: dict[str, tuple[str, ...]] = {}
    for line in PACKAGES_FILE.read_text().splitlines():
        words = line.split()
        if words and not words[0].startswith("#"):
            table[words[0]] = tuple(words[1:])
    return table


@functools.cache
def provided_by() -> dict[str, str]:
    """Each command or file the tests use -> the package of tests/system-packages.txt that provides it."""
    return {thing: package for package, things in system_packages().items() for thing in things}


def package_of(thing: str) -> str:
    """The package that provides a command or file the tests look for; a thing the table lacks fails at once,
    on every machine, so that a new tool cannot slip in unlisted and pass only where someone installed it."""
    package = provided_by().get(thing)
    if package is None:
        pytest.fail(
            f"the tests look for {thing}, but no package in {PACKAGES_FILE} provides it: add it to that package's "
            "line (or a new line for its package)",
            pytrace=False,
        )
    return package


def require_all() -> bool:
    """True when CI asks that every prerequisite be present (GPULAB_REQUIRE_ALL=1)."""
    return os.environ.get("GPULAB_REQUIRE_ALL", "") not in ("", "0")


def missing(reason: str) -> NoReturn:
    """Skip (or fail under GPULAB_REQUIRE_ALL=1) with one line saying what is missing."""
    if require_all():
        pytest.fail(f"prerequisite missing (GPULAB_REQUIRE_ALL=1): {reason}", pytrace=False)
    pytest.skip(reason)


def require_root_tools(*tools: str) -> None:
    """Require root and the given executables on PATH."""
    if os.geteuid() != 0:
        missing("needs root (debootstrap, chroot, mounts and libvirt's system daemon)")
    packages = {t: package_of(t) for t in tools}
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        missing(f"needs {', '.join(absent)} (apt-get install {' '.join(sorted({packages[t] for t in absent}))})")


def require_tool(tool: str) -> str:
    """The path of an executable the tests run (skip, or fail under GPULAB_REQUIRE_ALL=1, naming its package)."""
    package = package_of(tool)
    path = shutil.which(tool)
    if path is None:
        missing(f"needs {tool} (apt-get install {package})")
    return path


def require_file(path: str) -> Path:
    """A file the tests read from a system package (firmware, schemas), by its absolute path."""
    package = package_of(path)
    if not Path(path).exists():
        missing(f"needs {path} (apt-get install {package})")
    return Path(path)


def require_module(name: str, extra: str) -> None:
    """Require an importable Python module, naming the extra that installs it."""
    import importlib.util

    if importlib.util.find_spec(name) is None:
        missing(f"needs the Python module {name} (pip install -c constraints.txt -e '.[{extra}]')")
