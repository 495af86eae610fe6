"""Inventories for test runs (hosts reached through community.general.chroot, with the repository's group_vars), and
the Ansible prerequisite."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from guest.prereq import missing

REPO = Path(__file__).resolve().parents[2]


def chroot_inventory(directory: Path, hosts: dict[str, dict[str, Any]], group: str = "gpu_nodes") -> Path:
    """Write `directory`/hosts.yml with `hosts` (name -> vars; `root` is the chroot directory) in `group`.

    inventory/group_vars is linked next to it, so the test runs see the same defaults and pins a real inventory
    does."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "group_vars").symlink_to(REPO / "inventory" / "group_vars")
    entries = {}
    for name, hostvars in hosts.items():
        values = dict(hostvars)
        root = values.pop("root")
        # The chroot runs reach Debian's archive, never NVIDIA's repository: Debian's packaging is their driver
        # source unless a test names another (the default, auto, takes NVIDIA's repository where Debian's branch is
        # past its end of life; tests/test_driver_source_auto.py decides that without a root).
        values.setdefault("nvidia_driver_source", "distro")
        entries[name] = {
            "ansible_connection": "community.general.chroot",
            "ansible_host": str(root),
            "ansible_python_interpreter": "/usr/bin/python3",
            **values,
        }
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": entries}}}}, sort_keys=False))
    return path


def require_ansible(*tools: str) -> None:
    """Skip (fail under GPULAB_REQUIRE_ALL=1) unless Ansible's commands sit next to this Python."""
    absent = [t for t in (tools or ("ansible-playbook",)) if not (Path(sys.executable).parent / t).exists()]
    if absent:
        missing(f"needs {', '.join(absent)} (pip install -c constraints.txt -e '.[ansible]')")
