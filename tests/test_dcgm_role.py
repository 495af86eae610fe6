"""The nvidia_dcgm role (gpulab_dcgm: true), run for real in a Debian 12 root against a signed local mirror.

NVIDIA's repository cannot be reached from CI, so the mirror (tests/provision/apt_mirror.py) carries stand-ins under
NVIDIA's names and versions: cuda-drivers-535 re-packaged from Debian's nvidia-smi (as in test_apt_mirror.py), and
datacenter-gpu-manager-4-core / -cuda12 at 1:4.6.0-1 whose dcgmi only reports its version and whose core package
ships the nvidia-dcgm unit where NVIDIA's does. A P100 is assumed (no GPU here): R535 supports CUDA 12.2 at most, so
the role must pick the cuda12 runtime. In a chroot no service manager runs, so the host engine is enabled, not
started, and the role says so in one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from playbook import REPO, ansible_playbook
from provision.apt_mirror import (
    Mirror,
    build_mirror,
    control_of,
    cudnn_from_wheel,
    dcgm_stand_ins,
    downloaded_debs,
    renamed,
    toolkit_stand_in,
)
from provision.files import cached_pypi_file, pinned_wheel, serve, tree_state, without_apt_caches
from provision.inventory import chroot_inventory, require_ansible

GPU_STACK_ONLY = ("--skip-tags", "dl_frameworks")
P100 = "10de:15f8"
DCGM = "1:4.6.0-1"  # roles/nvidia_dcgm/defaults/main.yml: nvidia_dcgm_apt_version
# Heavy steps that have their own test (test_roles_chroot.py): the repackaged driver carries no kernel module.
NO_MODULE_BUILD = {
    "nvidia_driver_build_modules": False,
    "nvidia_driver_kernel_headers": False,
    "nvidia_driver_initramfs": False,
    "nvidia_driver_persistenced": False,
}
NOT_STARTED = (
    "nvidia-dcgm is enabled but not started: no service manager runs on image (connection "
    "community.general.chroot: a chroot or an image); it starts at the next boot."
)


def chroot(root: Path, *cmd: str) -> str:
    return subprocess.run(["chroot", str(root), *cmd], capture_output=True, text=True, check=True).stdout


def driver_version(mirror: Mirror) -> str:
    deb = next(mirror.repo.glob("cuda-drivers-535_*.deb"))
    return control_of(deb)["Version"].split("-")[0]


@pytest.fixture
def mirror(debian_root, tmp_path):
    sources = downloaded_debs(debian_root, ["nvidia-smi"])
    debian_version = control_of(sources["nvidia-smi"])["Version"]
    work, out = tmp_path / "work", tmp_path / "debs"
    work.mkdir()
    out.mkdir()
    wheel = pinned_wheel("9.10-cu11")
    debs = [
        # The driver, toolkit and cuDNN of the GPU stack the play installs first, as in test_apt_mirror.py.
        renamed(sources["nvidia-smi"], work, out, "cuda-drivers-535", debian_version.split("-")[0] + "-1"),
        toolkit_stand_in(work, out, "12.2", "12.2.140-1"),
        *cudnn_from_wheel(cached_pypi_file(wheel["path"], wheel["sha256"]), work, out, "12", wheel["version"]),
        *dcgm_stand_ins(work, out, "12", DCGM),
    ]
    return build_mirror(tmp_path / "mirror", debs)


def host_vars(root: Path, url: str, fingerprint: str, driver: str, **extra: object) -> dict:
    return {
        "root": root,
        "gpulab_preflight_gpu_pci_ids": [P100],
        "gpulab_profile": "none",
        "gpulab_stack": {"driver": driver, "cuda": "12.2", "cudnn": "9.10"},
        "gpulab_dcgm": True,
        "nvidia_driver_source": "cuda_repo",
        "cuda_toolkit_source": "cuda_repo",
        "cudnn_source": "cuda_repo",
        "nvidia_cuda_repo_base_url": url,
        "nvidia_cuda_repo_key_fingerprints": [fingerprint],
        **NO_MODULE_BUILD,
        **extra,
    }


def one_line(output: str) -> str:
    return " ".join(output.split())


@pytest.mark.slow
def test_the_exporter_without_containers_is_refused_before_any_change(debian_root, tmp_path):
    require_ansible()
    root = debian_root
    before = sorted(os.listdir(root / "etc/apt/sources.list.d")), sorted(os.listdir(root / "etc/apt/preferences.d"))
    hostvars = host_vars(
        root,
        "http://127.0.0.1:9/unused",
        "EB693B3035CD5710E231E123A4B469963BF863CC",
        "535",
        nvidia_dcgm_exporter=True,
        gpulab_containers=False,
    )
    refused = ansible_playbook(
        "playbooks/gpu_nodes.yml", chroot_inventory(tmp_path / "inventory", {"image": hostvars}), *GPU_STACK_ONLY
    )
    assert refused.rc == 2, refused.explain()
    said = one_line(refused.output)
    assert "nvidia_dcgm_exporter is true but gpulab_containers is false" in said
    assert "Set gpulab_containers: true (it installs the toolkit first), or set nvidia_dcgm_exporter: false." in said
    # Refused in the input checks, before the driver's role or the repository touched the host.
    assert refused.recap()["image"]["changed"] == 0, refused.changed_tasks()
    after = sorted(os.listdir(root / "etc/apt/sources.list.d")), sorted(os.listdir(root / "etc/apt/preferences.d"))
    assert after == before
    assert "cuda-keyring" not in chroot(root, "dpkg-query", "-W", "-f=${Package}\n")


@pytest.mark.slow
def test_dcgm_installs_pinned_held_and_enabled_from_a_signed_mirror(debian_root, mirror, tmp_path):
    require_ansible()
    root = debian_root
    driver = driver_version(mirror)
    with serve(mirror.served) as url:
        hostvars = host_vars(root, url, mirror.fingerprint, driver)
        inventory = chroot_inventory(tmp_path / "inventory", {"image": hostvars})
        # A dry run first: it passes and changes nothing, though NVIDIA's repository is not there yet.
        before = tree_state(root)
        dry = ansible_playbook("playbooks/gpu_nodes.yml", inventory, "--check", "--diff", *GPU_STACK_ONLY)
        assert dry.rc == 0, dry.explain()
        assert without_apt_caches(tree_state(root)) == without_apt_caches(before)
        first = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
        second = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
    print(first.recap_text())
    print(second.recap_text())
    assert first.rc == 0, first.explain()
    assert second.rc == 0, second.explain()
    assert second.recap()["image"]["changed"] == 0, second.changed_tasks()

    # R535 supports CUDA 12.2 at most: the cuda12 runtime, at the pinned version from the mirror, held.
    wanted = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"]
    status = chroot(root, "dpkg-query", "-W", "-f=${Package} ${Version} ${Status}\n", *wanted)
    assert sorted(status.splitlines()) == [f"{p} {DCGM} hold ok installed" for p in wanted]
    assert f"{url}/debian12/x86_64  Packages" in chroot(root, "apt-cache", "policy", "datacenter-gpu-manager-4-cuda12")
    assert f"*** {DCGM} 1001" in chroot(root, "apt-cache", "policy", "datacenter-gpu-manager-4-core")
    pin = (root / "etc/apt/preferences.d/gpulab-nvidia-dcgm").read_text()
    assert "Package: datacenter-gpu-manager-4*" in pin and f"Pin: version {DCGM}" in pin
    assert chroot(root, "dcgmi", "--version").strip() == "dcgmi  version: 4.6.0"

    # Enabled the way systemd does it offline: the unit linked into multi-user.target's wants.
    link = root / "etc/systemd/system/multi-user.target.wants/nvidia-dcgm.service"
    assert link.is_symlink(), sorted(p.name for p in link.parent.iterdir())
    assert os.readlink(link) in (f"/{lib}/systemd/system/nvidia-dcgm.service" for lib in ("usr/lib", "lib"))
    # Not started in a chroot, said in one line; no exporter unit unless asked for.
    for run in (first, second):
        assert NOT_STARTED in one_line(run.output)
    assert not (root / "etc/systemd/system/dcgm-exporter.service").exists()


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    "runtime, gpus",
    [("docker", "--gpus all"), ("podman", "--device nvidia.com/gpu=all")],
)
def test_the_exporter_unit_runs_the_pinned_image(tmp_path, runtime, gpus):
    """The unit as the role renders it (a container runtime and a GPU are needed to run it, so it is read here)."""
    require_ansible()
    role = REPO / "roles" / "nvidia_dcgm"
    unit = tmp_path / "dcgm-exporter.service"
    chosen = tmp_path / "chosen.yml"
    chosen.write_text(
        yaml.safe_dump(
            {
                "nvidia_dcgm_exporter_runtime": runtime,
                "nvidia_dcgm_exporter_digest": DIGEST,
                "nvidia_dcgm_exporter_port": 9500,
            }
        )
    )
    play = [
        {
            "name": "Render the dcgm-exporter unit",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            # The role's defaults and vars, then the inventory's choices (later files win).
            "vars_files": [str(role / "defaults" / "main.yml"), str(role / "vars" / "main.yml"), str(chosen)],
            "tasks": [
                {
                    "name": "Render",
                    "ansible.builtin.template": {
                        "src": str(role / "templates" / "dcgm-exporter.service.j2"),
                        "dest": str(unit),
                        "mode": "0644",
                    },
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    (tmp_path / "hosts").write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    run = ansible_playbook(tmp_path / "play.yml", tmp_path / "hosts")
    assert run.rc == 0, run.explain()
    text = unit.read_text()
    image = f"nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-ubuntu22.04@{DIGEST}"
    assert (
        f"ExecStart=/usr/bin/{runtime} run --rm --name dcgm-exporter {gpus} --cap-add SYS_ADMIN "
        f"--publish 9500:9400 {image}\n"
    ) in text
    assert f"ExecStartPre=-/usr/bin/{runtime} rm --force dcgm-exporter" in text
    assert "WantedBy=multi-user.target" in text
    assert ("Requires=docker.service" in text) == (runtime == "docker")


def _validate_only(tmp_path: Path, hostvars: dict) -> tuple[int, str]:
    """The role's input checks alone on this machine (they change nothing), then the CUDA major it chose."""
    play = [
        {
            "name": "Check the nvidia_dcgm inputs",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": hostvars,
            "tasks": [
                {
                    "name": "Gather the OS facts",
                    "ansible.builtin.setup": {"gather_subset": ["!all", "!min", "distribution"]},
                },
                {
                    "name": "Check",
                    "ansible.builtin.include_role": {
                        "name": "nvidia_dcgm",
                        "tasks_from": "validate.yml",
                        "public": True,
                    },
                },
                {"name": "Show", "ansible.builtin.debug": {"msg": "cuda major={{ nvidia_dcgm_cuda_major }}"}},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    (tmp_path / "hosts").write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    run = ansible_playbook(tmp_path / "play.yml", tmp_path / "hosts")
    return run.rc, one_line(run.output)


@pytest.mark.parametrize("driver, major", [("535.261.03", "12"), ("580.95.05", "13"), ("470", "11"), ("595", "13")])
def test_the_runtime_package_follows_the_drivers_cuda(tmp_path, driver, major):
    require_ansible()
    rc, said = _validate_only(tmp_path, {"gpulab_target_stack": {"driver": driver}})
    assert rc == 0, said
    assert f"cuda major={major}" in said


def test_a_driver_older_than_dcgm_supports_is_refused(tmp_path):
    require_ansible()
    rc, said = _validate_only(tmp_path, {"gpulab_target_stack": {"driver": "418.226.00"}})
    assert rc == 2, said
    assert (
        "The driver 418.226.00 supports CUDA 10 at most, and DCGM 4.6.0 is published for CUDA 11, 12, 13 only "
        "(datacenter-gpu-manager-4-cuda<N>): use a driver of R450 or newer (gpulab_stack.driver), or set "
        "nvidia_dcgm_cuda_major to one of those."
    ) in said
