"""Fake KVM hosts for gpulab.vm tests: libvirt's test driver over tests/fixtures/libvirt/<host>.xml, plus the
sysfs tree beside it. Real libvirt-python and real libvirt parsing; only the hardware is made up."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from guest import prereq
from guest.prereq import missing

FIXTURES = Path(__file__).parent / "fixtures" / "libvirt"
GOLDEN = Path(__file__).parent / "golden" / "vm"
HOSTS = ("p100x4", "shared-groups", "h200x4", "geforce", "hgx-h100")


def require_libvirt() -> None:
    """libvirt-python importable (skip, or fail under GPULAB_REQUIRE_ALL=1, naming the install)."""
    from gpulab.errors import GpulabError
    from gpulab.vm.connection import libvirt_module

    try:
        libvirt_module()
    except GpulabError as err:
        missing(str(err))


def require_tool(tool: str) -> str:
    return prereq.require_tool(tool)


def uri(host: str) -> str:
    return f"test://{FIXTURES / f'{host}.xml'}"


def sysfs(host: str) -> Path | None:
    root = FIXTURES / f"{host}-sysfs"
    return root if root.is_dir() else None


def connect(host: str) -> Any:
    """A fresh test-driver connection (its state lives and dies with the connection)."""
    require_libvirt()
    from gpulab.vm import connect as vm_connect

    return vm_connect(uri(host))


def sysfs_copy(host: str, dest: Path, node_memory_mib: dict[int, int] | None = None) -> Path:
    """A writable copy of a host's sysfs tree under `dest`, with each node's MemTotal when given (the fixtures
    leave it out, so the memory of a NUMA node is unknown there)."""
    source = sysfs(host)
    assert source is not None, f"{host} has no sysfs tree"
    root = dest / f"{host}-sysfs"
    shutil.copytree(source, root, symlinks=True)
    for node, mib in (node_memory_mib or {}).items():
        meminfo = root / f"sys/devices/system/node/node{node}/meminfo"
        meminfo.write_text(f"Node {node} MemTotal:       {mib * 1024} kB\nNode {node} MemFree:        {mib * 512} kB\n")
    return root
