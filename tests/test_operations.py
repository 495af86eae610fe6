"""Operating the playbooks on a fleet: a dry run on a fresh host, tags that select one role, rolling driver changes.

Real runs of playbooks/gpu_nodes.yml (and site.yml) against Debian 12 roots through community.general.chroot, a
Tesla P100 assumed (there is no GPU here).
"""

from __future__ import annotations

import re
from pathlib import Path

from guest import image
from playbook import ansible_playbook, gpulab_requirements, snapshot_source, wheelhouse
from provision.apt_mirror import build_mirror, control_of, downloaded_debs, renamed
from provision.files import cache_root, cached_pypi_file, pinned_wheel, serve, tree_state, without_apt_caches
from provision.inventory import chroot_inventory, require_ansible
from test_apt_mirror import host_vars

P100 = "10de:15f8"
_ROLE_TASK = re.compile(r"^TASK \[(\w+) : ", re.MULTILINE)


def default_host(root: Path, tmp_path: Path, pypi: str) -> dict:
    """The default inventory's stack settings with a P100 assumed; gpulab alone in the venv, offline."""
    source = snapshot_source(tmp_path / "source")
    return {
        "root": root,
        "gpulab_preflight_gpu_pci_ids": [P100],
        "cudnn_wheel_base_url": pypi,
        "dl_frameworks_frameworks": [],
        "dl_frameworks_wheelhouse": str(wheelhouse(gpulab_requirements())),
        "dl_frameworks_gpulab_source": str(source),
        "dl_frameworks_constraints": str(source / "constraints.txt"),
        "dl_frameworks_controller_cache": str(tmp_path / "cache"),
        "gpulab_validate_reports_dir": str(tmp_path / "reports"),
        "gpulab_validate_controller_cache": str(tmp_path / "bundles"),
    }


def test_a_dry_run_on_a_fresh_host_passes_and_changes_nothing(debian_root, tmp_path):
    require_ansible()
    wheel = pinned_wheel("9.10-cu11")
    cached_pypi_file(wheel["path"], wheel["sha256"])
    with serve(cache_root() / "pypi") as pypi:
        inventory = chroot_inventory(tmp_path / "inventory", {"image": default_host(debian_root, tmp_path, pypi)})
        before = tree_state(debian_root)
        dry = ansible_playbook("site.yml", inventory, "--check", "--diff")
        # A role's tag runs that role alone (after the pre-flight, which every role needs).
        tagged = {
            tag: ansible_playbook("playbooks/gpu_nodes.yml", inventory, "--check", "--tags", tag)
            for tag in ("cuda_toolkit", "dl_frameworks")
        }
    assert dry.rc == 0, dry.explain()
    ran = set(_ROLE_TASK.findall(dry.output))
    assert {"nvidia_driver", "cuda_toolkit", "cudnn", "dl_frameworks", "gpulab_validate"} <= ran, ran
    assert "--check: the validation (tier quick) would run on image now" in " ".join(dry.output.split())
    assert "+Pin: version 535.*" in dry.output  # --diff shows what the run would write
    for tag, run in tagged.items():
        assert run.rc == 0, run.explain()
        assert set(_ROLE_TASK.findall(run.output)) == {"gpulab_preflight", tag}, run.output
    assert without_apt_caches(tree_state(debian_root)) == without_apt_caches(before)


HOOK = """\
- name: Record the {what} of {{{{ inventory_hostname }}}}
  ansible.builtin.lineinfile:
    path: {log}
    line: "{what} {{{{ inventory_hostname }}}}"
    create: true
    mode: "0644"
  delegate_to: localhost
"""


def test_a_rolling_driver_upgrade_drains_one_node_at_a_time_and_resumes_it_once_verified(debian_root, tmp_path):
    """Two nodes, -e gpulab_serial=1 and --tags nvidia_driver: each node is drained just before its driver
    changes, one batch after the other; in a root no reboot can happen, so both stay drained; the next run (driver
    in place, nothing pending) returns them to service and drains nothing."""
    require_ansible()
    sources = downloaded_debs(debian_root, ["nvidia-smi"])
    version = control_of(sources["nvidia-smi"])["Version"]
    (tmp_path / "work").mkdir()
    (tmp_path / "debs").mkdir()
    driver_deb = renamed(
        sources["nvidia-smi"], tmp_path / "work", tmp_path / "debs", "cuda-drivers-535", version.split("-")[0] + "-1"
    )
    mirror = build_mirror(tmp_path / "mirror", [driver_deb])
    log = tmp_path / "hooks.log"
    for what in ("drain", "resume"):
        (tmp_path / f"{what}.yml").write_text(HOOK.format(what=what, log=log))
    with image.fresh_root(tmp_path / "root2") as root2, serve(mirror.served) as url:
        hosts = {}
        for name, root in (("node1", debian_root), ("node2", root2)):
            hosts[name] = {
                **host_vars(root, url, mirror),
                "nvidia_driver_drain_tasks": str(tmp_path / "drain.yml"),
                "nvidia_driver_resume_tasks": str(tmp_path / "resume.yml"),
            }
        inventory = chroot_inventory(tmp_path / "inventory", hosts)
        args = ("--tags", "nvidia_driver", "-e", "gpulab_serial=1")
        first = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *args)
        assert first.rc == 0, first.explain()
        assert log.read_text().splitlines() == ["drain node1", "drain node2"]
        # One batch after the other: the driver install ran once per node, each time for that node alone.
        installs = re.findall(
            r"^TASK \[nvidia_driver : Install the driver packages.*?\n(?:.*\n)*?(changed|ok): \[(\w+)\]",
            first.output,
            re.MULTILINE,
        )
        assert installs == [("changed", "node1"), ("changed", "node2")], installs
        assert set(_ROLE_TASK.findall(first.output)) <= {"gpulab_preflight", "nvidia_driver", "nvidia_cuda_repo"}
        said = " ".join(first.output.split())
        for name, root in (("node1", debian_root), ("node2", root2)):
            assert f"{name} stays drained until it reboots into NVIDIA driver" in said
            assert (root / "var/lib/gpulab/drained-for-driver").is_file()
            assert not (root / "usr/local/cuda").exists()  # --tags nvidia_driver: the toolkit role did not run

        second = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *args)
        assert second.rc == 0, second.explain()
        assert log.read_text().splitlines() == ["drain node1", "drain node2", "resume node1", "resume node2"]
        for root in (debian_root, root2):
            assert not (root / "var/lib/gpulab/drained-for-driver").exists()
