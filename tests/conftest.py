"""Fixtures shared by gpulab's own tests (the guest image, libvirtd and a booted guest: see tests/guest), and how the
tests share the machine when pytest-xdist runs them on several workers (`./bootstrap.sh test` does)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Several workers share the machine's cores, each with torch's OpenMP threads: threads that wait spinning take the
# cores from the others. Waiting threads sleep instead (thread counts unchanged): two CPU epochs of the MNIST net on a
# loaded 2-core machine took 31-38 s instead of 46-85 s. Set before any test imports torch; children inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import timings
from guest.fixtures import (
    booted_guest,
    debian_root,
    guest_rootfs,
    libvirt_system,
    require_root_tools,
    trixie_root,
    trixie_rootfs,
)

__all__ = [
    "booted_guest",
    "debian_root",
    "guest_rootfs",
    "libvirt_system",
    "require_root_tools",
    "trixie_root",
    "trixie_rootfs",
]

# Tests that use one of these fixtures run on one worker, one after another (xdist's loadgroup): the booted guest and
# the system libvirtd exist once per session. (Debian roots need no group: each seeds its own apt archive from the
# shared cache of its suite, guest.image.seeded_archives, and each suite's root image is built once under a lock.)
SHARED_BY = (("guest", ("booted_guest", "libvirt_system")),)


def shared_group(fixturenames: tuple[str, ...] | list[str]) -> str | None:
    """The worker group of a test that uses `fixturenames`, or None when it may run anywhere."""
    return next((group for group, fixtures in SHARED_BY if set(fixtures) & set(fixturenames)), None)


def module_fixture_group(item: pytest.Item) -> str | None:
    """The worker group of a test that uses a module- or class-scoped fixture of the tests (one group per fixture):
    xdist's workers would each make it, and such fixtures are made once because they are dear (five TensorFlow
    trainings, 3 minutes: made on both workers, 3 minutes of one wasted)."""
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info is not None else None
        if defs and defs[-1].scope in ("module", "class") and defs[-1].baseid.startswith("tests/"):
            return f"{defs[-1].baseid}::{name}"
    return None


INTERN = sys.intern


@pytest.fixture(autouse=True)
def _ansible_stays_out_of_the_test_process() -> Iterator[None]:
    """Importing Ansible's module_utils replaces sys.intern, and torch's compiler, imported later on the same worker,
    then fails every workload; which tests meet on a worker varies with the run. Tests call Ansible's code in a
    child process; one that imports it here fails, named, and the worker gets its sys.intern back."""
    yield
    if sys.intern is not INTERN:
        sys.intern = INTERN
        pytest.fail("this test imported Ansible into the test process (sys.intern replaced): call it in a child")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        metavar="FILE",
        help="write each test's seconds to FILE at the end (tests/timings.py: the lanes and the order come from it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-durations")
    if path and not hasattr(config, "workerinput"):  # the xdist controller sees every worker's reports
        config.pluginmanager.register(timings.Recorder(Path(path)), "gpulab-durations")


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects: the measured slow tests are marked first
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = shared_group(getattr(item, "fixturenames", ())) or module_fixture_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    timings.arrange(items, timings.measured())
    if sys.intern is not INTERN:
        raise pytest.UsageError("a test module imports Ansible at its top (sys.intern replaced): import it in a child")
