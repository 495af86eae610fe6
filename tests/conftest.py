"""Fixtures shared by gpulab's own tests (the guest image, libvirtd and a booted guest: see tests/guest), and how the
tests share the machine when pytest-xdist runs them on several workers (`./bootstrap.sh test` does)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

# Several workers share the machine's cores, each with torch's OpenMP threads: threads that wait spinning take the
# cores from the others. Waiting threads sleep instead (thread counts unchanged): two CPU epochs of the MNIST net on a
# loaded 2-core machine took 31-38 s instead of 46-85 s. Set before any test imports torch; children inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = shared_group(getattr(item, "fixturenames", ()))
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    # The slow tests first, the longest of them (measured) at the very front, each else in collection order: the
    # workers take them while many short tests are left to even out the end, instead of one worker starting a
    # quarter-hour root test when the other is nearly done.
    items.sort(key=_run_order)
    if sys.intern is not INTERN:
        raise pytest.UsageError("a test module imports Ansible at its top (sys.intern replaced): import it in a child")


LONGEST_FIRST = (  # the slowest files, longest first: the Debian 12 root with its kernel upgrade, the booted guest, ...
    "test_roles_chroot.py",
    "test_site_guest.py",
    "test_container_toolkit.py",
    "test_operations.py",  # two multi-node rolls in Debian roots
    "test_apt_mirror.py",
    "test_role_nvidia_driver.py",
    "test_dcgm_role.py",
)


def _run_order(item: pytest.Item) -> tuple[bool, int]:
    name = item.path.name
    return item.get_closest_marker("slow") is None, LONGEST_FIRST.index(name) if name in LONGEST_FIRST else 99
