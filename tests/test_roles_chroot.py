"""nvidia_driver, cuda_toolkit and cudnn really run against a Debian 12 root (community.general.chroot).

playbooks/gpu_nodes.yml with the default inventory (gpulab_profile auto, the roles' default sources) and the GPUs of
a Tesla P100 assumed (there are none here): the pre-flight plans what Debian's archive and the pinned wheels
deliver - the archive's R535 driver with its DKMS module built for the root's kernel, CUDA 11.8 from
nvidia-cuda-toolkit, and the cuDNN the matrix matches to CUDA 11.8 on Pascal, from NVIDIA's pinned PyPI wheel (served
from a local cache standing in for a PyPI mirror). Then apt upgrades the kernel as an automatic update would, and
the same run again: the new kernel has its NVIDIA module and nothing may change. Last, an H200 assumed on the same
root: no configured source has its driver, so the run stops before any change, naming the source that has one.

The root starts as a stock Debian 12 host (the archive's main component only: the role enables contrib, non-free
and non-free-firmware) with a runfile install of R470 (a stand-in: NVIDIA's uninstaller, a libnvidia-ml.so no
package owns, its DKMS tree), which cannot serve CUDA 11.8: with nvidia_driver_existing: replace the role removes it
with its own uninstaller before installing Debian's driver, and the second run, still with replace, changes nothing.

The root starts without linux-headers-amd64 (the image has it): the driver role must install the headers meta
package of the installed kernel flavour, which is what brings the headers, and with them a DKMS build, for every
kernel apt installs later. The builds' compiles go through ccache, its objects kept outside the clone
(tests/provision/compiler_cache.py): DKMS still builds, links and installs each module.
"""

from __future__ import annotations

import re
import subprocess
import time
import warnings
from pathlib import Path

import pytest

from guest.image import in_chroot
from playbook import ansible_env, ansible_playbook, gpulab_requirements, snapshot_source, wheelhouse
from provision.apt_mirror import candidate_version
from provision.compiler_cache import compiler_cache, stats, with_masquerade
from provision.driver_stand_ins import runfile_install
from provision.files import cache_root, cached_pypi_file, pinned_wheel, serve, tree_state
from provision.inventory import chroot_inventory, require_ansible

# The frameworks' venv (dl_frameworks, in the same play) has its own tests; these runs apply the GPU stack alone.
GPU_STACK_ONLY = ("--skip-tags", "dl_frameworks")

P100, H200 = "10de:15f8", "10de:2335"


def chroot(root: Path, *cmd: str) -> str:
    return subprocess.run(["chroot", str(root), *cmd], capture_output=True, text=True, check=True).stdout


def kernels(root: Path) -> list[str]:
    return sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))


def installed_version(root: Path, package: str) -> str | None:
    proc = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f=${Version} ${Status}", package], capture_output=True, text=True
    )
    version, _, status = proc.stdout.partition(" ")
    return version if proc.returncode == 0 and status.endswith(" installed") else None


def upgrade_kernel(root: Path) -> list[str]:
    """What an automatic upgrade does to the kernel: the installed meta packages move to the archive's newest
    version, bringing that kernel (and, if its meta package is installed, its headers). Returns the new kernels."""
    before = set(kernels(root))
    argv = ["apt-get", "install", "-y", "-q", "--only-upgrade", "linux-image-amd64", "linux-headers-amd64"]
    # The .deb cache is shared with other test sessions' roots: wait while one of them downloads.
    for _ in range(60):
        try:
            in_chroot(root, *argv)
            break
        except RuntimeError as err:
            if "Could not get lock /var/cache/apt/archives/lock" not in str(err):
                raise
            time.sleep(10)
    else:
        raise RuntimeError("the shared apt archive cache stayed locked for 10 minutes")
    return sorted(set(kernels(root)) - before)


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
    # The module builds (DKMS, for the image's kernel and the upgrade's) go through a compiler cache kept across runs.
    with serve(cache_root() / "pypi") as pypi, compiler_cache(root):
        env = with_masquerade(ansible_env())
        # The default inventory's stack settings (inventory/group_vars): gpulab_profile auto, the default sources.
        host = {
            "root": root,
            "gpulab_preflight_gpu_pci_ids": [P100],
            "nvidia_driver_existing": "replace",
            "cudnn_wheel_base_url": pypi,
            # The frameworks' venv comes last in the play: gpulab alone, offline, from a wheelhouse built here.
            "dl_frameworks_frameworks": [],
            "dl_frameworks_wheelhouse": str(wheelhouse(gpulab_requirements())),
            "dl_frameworks_gpulab_source": str(source),
            "dl_frameworks_constraints": str(source / "constraints.txt"),
            "dl_frameworks_controller_cache": str(tmp_path / "cache"),
        }
        inventory = chroot_inventory(tmp_path / "inventory", {"image": host})
        # A host installed without kernel headers: only the role can bring the headers meta package.
        in_chroot(root, "dpkg", "--remove", "linux-headers-amd64")
        assert installed_version(root, "linux-headers-amd64") is None
        runfile = runfile_install(root, "470.256.02", kernels(root))
        # A stock Debian 12 host: main only, in apt's lists too. The role enables contrib, non-free and
        # non-free-firmware on the archive's deb822 sources and refreshes the lists.
        sources = root / "etc/apt/sources.list.d/debian.sources"
        stock = sources.read_text()
        sources.write_text(stock.replace("Components: main contrib non-free non-free-firmware", "Components: main"))
        in_chroot(root, "apt-get", "update", "-q")
        started = time.monotonic()
        first = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY, env=env)
        first_s = time.monotonic() - started
        assert first.rc == 0, first.explain()
        assert installed_version(root, "linux-headers-amd64") is not None
        print("dkms status after the first run:\n" + chroot(root, "dkms", "status"))

        # The kernel update an unattended upgrade would install (none when the image already has the newest).
        image_kernels = kernels(root)
        started = time.monotonic()
        new_kernels = []
        if candidate_version(root, "linux-image-amd64") != installed_version(root, "linux-image-amd64"):
            new_kernels = upgrade_kernel(root)
            assert len(new_kernels) == 1, (image_kernels, new_kernels)
        else:
            warnings.warn("the archive has no kernel newer than the image's: no kernel upgrade tried", stacklevel=1)
        upgrade_s = time.monotonic() - started

        started = time.monotonic()
        second = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY, env=env)
        second_s = time.monotonic() - started
        print("compiler cache:\n" + stats(root))
    print(f"\nfirst run {first_s:.0f} s, upgrade to {new_kernels} {upgrade_s:.0f} s, second run {second_s:.0f} s")
    print(first.recap_text())
    print(second.recap_text())

    assert first.recap()["image"]["changed"] > 0
    # The runfile install went first, through its own uninstaller; nothing of it is left.
    assert (
        "NVIDIA driver 470.256.02 (NVIDIA's runfile installer) on image is replaced by 535: removing the runfile "
        "install (nvidia-uninstall); DKMS nvidia/470.256.02."
    ) in " ".join(first.output.split()).replace("''", "'")  # the YAML callback writes ' as ''
    assert sources.read_text() == stock
    assert (root / "var/log/nvidia-uninstall.log").read_text() == "nvidia-uninstall --silent\n"
    assert not any(p.exists() for p in runfile if p.name != "nvidia-smi")
    decision = (
        "1x Tesla P100-PCIE-16GB; profile auto: driver=535, kernel_modules=proprietary, cuda=11.8, cudnn=9.10, "
        "torch=2.7+cu118, tensorflow=2.21, python=3.11; from driver distro, cuda distro, cudnn wheel"
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
    # The archive's branch is pinned, not its point release: its security updates of R535 still apply.
    assert "Pin: version 535.*" in (root / "etc/apt/preferences.d/gpulab-nvidia-driver").read_text()
    policy = subprocess.run(
        ["chroot", str(root), "apt-cache", "policy", "nvidia-driver", "libcuda1"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "W:" not in policy.stderr, policy.stderr  # apt understood the pin
    assert policy.stdout.count(f"*** {package_version} 1001") == 2, policy.stdout
    dkms = chroot(root, "dkms", "status")
    print("dkms status at the end:\n" + dkms)
    assert image_kernels, "the root has no kernel under /boot"
    assert kernels(root) == sorted(image_kernels + new_kernels)
    # Kernels follow the archive; the driver does not, and unattended-upgrades is told to leave it alone.
    assert chroot(root, "dpkg-query", "-W", "-f=${Status}", "linux-image-amd64").startswith("install ")
    blacklist = (root / "etc/apt/apt.conf.d/51gpulab-nvidia-driver").read_text()
    assert 'Unattended-Upgrade::Package-Blacklist {\n    "nvidia-";\n    "libnvidia-";' in blacklist
    listed = chroot(root, "apt-config", "dump", "Unattended-Upgrade::Package-Blacklist")
    assert 'Unattended-Upgrade::Package-Blacklist:: "libcuda1";' in listed, listed
    for kernel in kernels(root):  # the image's kernel and the one the upgrade brought
        assert f"nvidia-current/{driver}, {kernel}, x86_64: installed" in dkms, dkms
        assert (root / f"lib/modules/{kernel}/updates/dkms/nvidia-current.ko").is_file()
        # nouveau blacklisted, and the initramfs rebuilt with the blacklist in it.
        initramfs = chroot(root, "lsinitramfs", f"/boot/initrd.img-{kernel}")
        assert "etc/modprobe.d/gpulab-blacklist-nouveau.conf" in initramfs
    assert "blacklist nouveau" in (root / "etc/modprobe.d/gpulab-blacklist-nouveau.conf").read_text()
    assert (root / "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service").is_symlink()
    # Persistence mode on through a drop-in over Debian's unit, its own command line kept.
    unit = chroot(root, "sh", "-c", "grep -h '^ExecStart=' /lib/systemd/system/nvidia-persistenced.service")
    dropin = (root / "etc/systemd/system/nvidia-persistenced.service.d/gpulab-persistence-mode.conf").read_text()
    print(f"Debian's unit: {unit.strip()}\ndrop-in:\n{dropin}")
    exec_start = [line for line in dropin.splitlines() if line.startswith("ExecStart=")]
    assert exec_start[0] == "ExecStart=" and exec_start[1].startswith("ExecStart=/usr/bin/nvidia-persistenced")
    assert exec_start[1].endswith(" --persistence-mode") and "--no-persistence-mode" not in exec_start[1]
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

    # An H200 on the same root with the same defaults: Debian's archive has no driver for it (R550 and newer), so the
    # pre-flight refuses before any role runs, naming the source that has one.
    h200 = chroot_inventory(tmp_path / "h200", {"image": {"root": root, "gpulab_preflight_gpu_pci_ids": [H200]}})
    before = tree_state(root)
    started = time.monotonic()
    refused = ansible_playbook("playbooks/gpu_nodes.yml", h200, *GPU_STACK_ONLY)
    print(f"H200 refusal {time.monotonic() - started:.0f} s")
    assert refused.rc == 2, refused.explain()
    assert refused.recap()["image"]["failed"] == 1 and refused.recap()["image"]["changed"] == 0
    said = " ".join(refused.output.split())
    assert "pre-flight refused this host's stack (1 problem(s)); nothing was changed:" in said
    assert (
        "[driver] Debian 12's archive has no driver for NVIDIA H200: it packages R535, R470, and NVIDIA H200 needs "
        "driver >= 550.54.14. Fix: set nvidia_driver_source: cuda_repo (NVIDIA's repository or a mirror of it)"
    ) in said
    assert not [line for line in refused.output.splitlines() if line.startswith(("TASK [nvidia_driver", "TASK [cuda"))]
    assert tree_state(root) == before
