"""nvidia_driver, cuda_toolkit and cudnn really run against a Debian 12 root (community.general.chroot).

playbooks/gpu_nodes.yml with the GPUs of a Tesla P100 assumed (there are none here): the driver from Debian
non-free with its DKMS module built for the root's kernel, CUDA 11.8 from nvidia-cuda-toolkit, and the cuDNN the
matrix matches to CUDA 11.8 on Pascal, from NVIDIA's pinned PyPI wheel (served from a local cache standing in for a
PyPI mirror). Then the same run again: nothing may change.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from playbook import ansible_playbook, gpulab_requirements, snapshot_source, wheelhouse
from provision.apt_mirror import candidate_version
from provision.files import cache_root, cached_pypi_file, pinned_wheel, serve
from provision.inventory import chroot_inventory, require_ansible

# The frameworks' venv (dl_frameworks, in the same play) has its own tests; these runs apply the GPU stack alone.
GPU_STACK_ONLY = ("--skip-tags", "dl_frameworks")

P100 = "10de:15f8"


def chroot(root: Path, *cmd: str) -> str:
    return subprocess.run(["chroot", str(root), *cmd], capture_output=True, text=True, check=True).stdout


def kernels(root: Path) -> list[str]:
    return sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))


@pytest.mark.slow
def test_driver_cuda_and_cudnn_install_in_a_debian_root_and_rerun_changes_nothing(debian_root, tmp_path):
    require_ansible()
    root = debian_root
    # Debian 12 non-free's current nvidia-driver (535.x; point releases and security updates move the x).
    package_version = candidate_version(root, "nvidia-driver")
    driver = package_version.split("-")[0]
    wheel = pinned_wheel("9.10-cu11")
    cached_pypi_file(wheel["path"], wheel["sha256"])
    source = snapshot_source(tmp_path / "source")
    with serve(cache_root() / "pypi") as pypi:
        host = {
            "root": root,
            "gpulab_preflight_gpu_pci_ids": [P100],
            "gpulab_profile": "none",
            "gpulab_stack": {"driver": driver, "cuda": "11.8"},  # cuDNN: the matrix's match for 11.8 on Pascal
            "cudnn_wheel_base_url": pypi,
            # The frameworks' venv comes last in the play: gpulab alone, offline, from a wheelhouse built here.
            "dl_frameworks_frameworks": [],
            "dl_frameworks_wheelhouse": str(wheelhouse(gpulab_requirements())),
            "dl_frameworks_gpulab_source": str(source),
            "dl_frameworks_constraints": str(source / "constraints.txt"),
            "dl_frameworks_controller_cache": str(tmp_path / "cache"),
        }
        inventory = chroot_inventory(tmp_path / "inventory", {"image": host})
        started = time.monotonic()
        first = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
        first_s = time.monotonic() - started
        started = time.monotonic()
        second = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
        second_s = time.monotonic() - started
    print(f"\nfirst run {first_s:.0f} s, second run {second_s:.0f} s")
    print(first.recap_text())
    print(second.recap_text())

    assert first.rc == 0, first.explain()
    assert first.recap()["image"]["changed"] > 0
    decision = (
        f"1x Tesla P100-PCIE-16GB; profile none: driver={driver}, kernel_modules=proprietary, cuda=11.8, cudnn=9.10"
    )
    assert decision in " ".join(first.output.split())
    assert second.rc == 0, second.explain()
    assert second.recap()["image"]["changed"] == 0, second.changed_tasks()

    # The driver: Debian's packages at the requested version, pinned and held; the module built for every kernel.
    status = chroot(
        root, "dpkg-query", "-W", "-f=${Package} ${Version} ${Status}\n", "nvidia-driver", "nvidia-kernel-dkms"
    )
    assert status.splitlines() == [
        f"{p} {package_version} hold ok installed" for p in ("nvidia-driver", "nvidia-kernel-dkms")
    ]
    assert f"Pin: version {driver}*" in (root / "etc/apt/preferences.d/gpulab-nvidia-driver").read_text()
    policy = subprocess.run(
        ["chroot", str(root), "apt-cache", "policy", "nvidia-driver", "libcuda1"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "W:" not in policy.stderr, policy.stderr  # apt understood the pin
    assert policy.stdout.count(f"*** {package_version} 1001") == 2, policy.stdout
    dkms = chroot(root, "dkms", "status")
    assert kernels(root), "the root has no kernel under /boot"
    for kernel in kernels(root):
        assert f"nvidia-current/{driver}, {kernel}, x86_64: installed" in dkms, dkms
        assert (root / f"lib/modules/{kernel}/updates/dkms/nvidia-current.ko").is_file()
        # nouveau blacklisted, and the initramfs rebuilt with the blacklist in it.
        initramfs = chroot(root, "lsinitramfs", f"/boot/initrd.img-{kernel}")
        assert "etc/modprobe.d/gpulab-blacklist-nouveau.conf" in initramfs
    assert "blacklist nouveau" in (root / "etc/modprobe.d/gpulab-blacklist-nouveau.conf").read_text()
    assert (root / "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service").is_symlink()
    assert "is installed but not active until image reboots" in " ".join(first.output.split())

    # CUDA 11.8: Debian's toolkit, /usr/local/cuda through alternatives, PATH and the linker configured.
    assert "release 11.8," in chroot(root, "nvcc", "--version")
    assert chroot(root, "readlink", "-f", "/usr/local/cuda").strip() == "/usr/lib/cuda"
    assert "CUDA_HOME=/usr/local/cuda" in (root / "etc/profile.d/gpulab-cuda.sh").read_text()
    assert (root / "etc/ld.so.conf.d/gpulab-cuda.conf").read_text().strip().endswith("/usr/local/cuda/lib64")

    # cuDNN 9.10 from the pinned wheel, unpacked into the toolkit's lib dir and found by the dynamic linker.
    unpacked = f"/opt/gpulab/cudnn/{wheel['version']}-cu11/nvidia/cudnn"
    assert (
        chroot(root, "readlink", "-f", "/usr/lib/cuda/lib64/libcudnn.so.9").strip() == f"{unpacked}/lib/libcudnn.so.9"
    )
    assert chroot(root, "readlink", "-f", "/usr/lib/cuda/lib64/libcudnn.so").strip() == f"{unpacked}/lib/libcudnn.so.9"
    assert re.search(
        r"libcudnn\.so\.9 \(libc6,x86-64\) => /usr/local/cuda/lib64/libcudnn\.so\.9", chroot(root, "ldconfig", "-p")
    )
    header = chroot(root, "cat", "/usr/lib/cuda/include/cudnn_version.h")  # a link into /opt/gpulab/cudnn
    assert re.search(r"#define CUDNN_MAJOR 9\b", header) and re.search(r"#define CUDNN_MINOR 10\b", header)
