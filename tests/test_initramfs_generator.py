"""nvidia_driver keeps a dracut host on dracut: the nouveau blacklist reaches its images through dracut (omit_drivers
and dracut's own rebuild), and initramfs-tools, which would replace dracut, is never installed there. The role's
initramfs step runs on localhost with dpkg-query, lsinitrd and dracut replaced by stand-ins that record their calls."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from playbook import REPO, ansible_playbook
from provision.inventory import require_ansible

KERNEL = "6.12.48+deb13-amd64"


def stub(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def test_a_dracut_host_is_rebuilt_with_dracut_and_gets_no_initramfs_tools(tmp_path: Path) -> None:
    require_ansible()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    stub(bin_dir, "dpkg-query", 'echo "$*" >> ' + f"{log}\n" + "printf installed")
    # dracut's listing of an image built before the blacklist: nouveau's module is in it.
    stub(
        bin_dir,
        "lsinitrd",
        f'echo "lsinitrd $*" >> {log}\necho "usr/lib/modules/{KERNEL}/kernel/drivers/gpu/drm/nouveau/nouveau.ko.xz"',
    )
    stub(bin_dir, "dracut", f'echo "dracut $*" >> {log}')
    generators = yaml.safe_load((REPO / "roles/nvidia_driver/vars/main.yml").read_text())["_nvidia_driver_initramfs"]
    generators["dracut"]["config"] = str(tmp_path / "gpulab-nouveau.conf")
    extra = {
        "_nvidia_driver_initramfs": generators,
        "nvidia_driver_kernels": [KERNEL],
        "nvidia_driver_nouveau": {"changed": False},
        "nvidia_driver_install": {"changed": False},
        "ansible_python_interpreter": sys.executable,
    }
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}})
    )
    play = [
        {
            "name": "nvidia_driver's initramfs step",
            "hosts": "localhost",
            "gather_facts": False,
            "environment": {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"},
            "tasks": [
                # The family's step (family/<os_family>/initramfs.yml) is chosen by the host's OS family.
                {"ansible.builtin.setup": {"gather_subset": ["!all", "!min", "distribution"]}},
                {"ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": "initramfs.yml"}},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run = ansible_playbook(tmp_path / "play.yml", tmp_path / "hosts.yml", "-e", json.dumps(extra), timeout=300)
    assert run.rc == 0, run.explain()
    calls = log.read_text().splitlines()
    assert f"dracut --force /boot/initrd.img-{KERNEL} {KERNEL}" in calls
    assert f"lsinitrd /boot/initrd.img-{KERNEL}" in calls
    assert not any("update-initramfs" in c for c in calls)
    assert (tmp_path / "gpulab-nouveau.conf").read_text().splitlines()[-1] == 'omit_drivers+=" nouveau "'
    skipped = run.output.split("TASK [nvidia_driver : Install initramfs-tools", 1)[1].split("TASK [", 1)[0]
    assert "skipping: [localhost]" in skipped
