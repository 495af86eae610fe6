"""vfio_host keeps a dracut host on dracut: the vfio modules go into dracut's configuration (force_drivers) and every
image is rebuilt with dracut, never through initramfs-tools' files. The role's binding step runs on localhost with its
files redirected into a temporary directory and dpkg-query and dracut replaced by stand-ins that record their calls."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from playbook import ansible_playbook
from provision.inventory import require_ansible


def test_a_dracut_host_gets_the_vfio_modules_through_dracut(tmp_path: Path) -> None:
    require_ansible()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for name, body in {"dpkg-query": "printf installed", "dracut": f'echo "dracut $*" >> {log}'}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}})
    )
    play = [
        {
            "name": "vfio_host's binding step",
            "hosts": "localhost",
            "gather_facts": False,
            "environment": {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"},
            "tasks": [
                {"ansible.builtin.include_role": {"name": "vfio_host", "tasks_from": "bind.yml"}},
                {"ansible.builtin.meta": "flush_handlers"},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    extra = {
        "ansible_python_interpreter": sys.executable,
        "vfio_host_effective_ids": ["10de:1db4", "10de:10f2"],
        "_vfio_host_modprobe_conf": str(tmp_path / "gpulab-vfio-modprobe.conf"),
        "_vfio_host_modules_load_conf": str(tmp_path / "gpulab-vfio-modules-load.conf"),
        "_vfio_host_dracut_conf": str(tmp_path / "gpulab-vfio-dracut.conf"),
    }
    run = ansible_playbook(tmp_path / "play.yml", tmp_path / "hosts.yml", "-e", json.dumps(extra), timeout=300)
    assert run.rc == 0, run.explain()
    assert log.read_text().splitlines() == ["dracut --force --regenerate-all"]
    dracut_conf = (tmp_path / "gpulab-vfio-dracut.conf").read_text()
    assert 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "' in dracut_conf
    skipped = run.output.split("TASK [vfio_host : Put the vfio modules into the initramfs, so vfio-pci", 1)[1]
    assert "skipping: [localhost]" in skipped.split("TASK [", 1)[0]
