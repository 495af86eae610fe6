"""The NVIDIA-repository source of nvidia_driver, cuda_toolkit and cudnn, run for real against a local mirror.

The mirror (tests/provision/apt_mirror.py) is signed with a key made for this run and ships it in a cuda-keyring
package, as NVIDIA does; its packages carry NVIDIA's names (cuda-drivers-535, cuda-toolkit-12-2,
libcudnn9-cuda-12) and contents re-packaged from Debian's archive and NVIDIA's cuDNN wheel (the toolkit's nvcc only
reports its release: NVIDIA's repository for Debian 12 starts at CUDA 12.2, Debian's nvcc is 11.8). First a keyring
holding an unexpected key is refused before it is installed; then the real run, and a second that changes nothing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from playbook import ansible_playbook
from provision.apt_mirror import (
    Mirror,
    build_deb,
    build_mirror,
    control_of,
    cudnn_from_wheel,
    downloaded_debs,
    renamed,
    toolkit_stand_in,
)
from provision.files import cached_pypi_file, pinned_wheel, serve, tree_state, without_apt_caches
from provision.inventory import chroot_inventory, require_ansible

# The frameworks' venv (dl_frameworks, in the same play) has its own tests; these runs apply the GPU stack alone.
GPU_STACK_ONLY = ("--skip-tags", "dl_frameworks")

P100 = "10de:15f8"

# Heavy steps that have their own test (test_roles_chroot.py): the repackaged driver carries no kernel module.
NO_MODULE_BUILD = {
    "nvidia_driver_build_modules": False,
    "nvidia_driver_kernel_headers": False,
    "nvidia_driver_initramfs": False,
    "nvidia_driver_persistenced": False,
}


def chroot(root: Path, *cmd: str) -> str:
    return subprocess.run(["chroot", str(root), *cmd], capture_output=True, text=True, check=True).stdout


def driver_version(mirror: Mirror) -> str:
    """The driver the mirror's cuda-drivers-535 carries (Debian's current nvidia-smi, whatever point release)."""
    deb = next(mirror.repo.glob("cuda-drivers-535_*.deb"))
    return control_of(deb)["Version"].split("-")[0]


def fabricmanager_stand_in(work: Path, out_dir: Path, branch: str, version: str) -> Path:
    """nvidia-fabricmanager-<branch> with its systemd unit at NVIDIA's path (the daemon itself cannot run here)."""
    tree = work / "fabricmanager"
    unit = tree / "lib/systemd/system/nvidia-fabricmanager.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(
        "[Unit]\nDescription=NVIDIA fabric manager service (stand-in)\n[Service]\nType=forking\n"
        "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    control = {
        "Package": f"nvidia-fabricmanager-{branch}",
        "Version": version,
        "Architecture": "amd64",
        "Description": f"Fabric Manager {version} stand-in (its unit file only)",
    }
    return build_deb(tree, out_dir, control)


@pytest.fixture
def mirror(debian_root, tmp_path):
    sources = downloaded_debs(debian_root, ["nvidia-smi"])
    debian_version = control_of(sources["nvidia-smi"])["Version"]
    wheel = pinned_wheel("9.10-cu11")
    wheel_file = cached_pypi_file(wheel["path"], wheel["sha256"])
    work, out = tmp_path / "work", tmp_path / "debs"
    work.mkdir()
    out.mkdir()
    debs = [
        # NVIDIA versions its packages <driver>-1; the dependencies stay Debian's, at Debian's version.
        renamed(sources["nvidia-smi"], work, out, "cuda-drivers-535", debian_version.split("-")[0] + "-1"),
        fabricmanager_stand_in(work, out, "535", debian_version.split("-")[0] + "-1"),
        toolkit_stand_in(work, out, "12.2", "12.2.140-1"),
        # The cu11 wheel's library stands in for the cu12 build (the test reads where it lands, not what it runs).
        *cudnn_from_wheel(wheel_file, work, out, "12", wheel["version"]),
    ]
    return build_mirror(tmp_path / "mirror", debs)


def host_vars(root: Path, url: str, mirror: Mirror, fingerprint: str | None = None) -> dict:
    return {
        "root": root,
        "gpulab_preflight_gpu_pci_ids": [P100],
        "gpulab_profile": "none",
        "gpulab_stack": {"driver": driver_version(mirror), "cuda": "12.2", "cudnn": "9.10"},
        "nvidia_driver_source": "cuda_repo",
        "cuda_toolkit_source": "cuda_repo",
        "cudnn_source": "cuda_repo",
        "nvidia_cuda_repo_base_url": url,
        "nvidia_cuda_repo_key_fingerprints": [fingerprint or mirror.fingerprint],
        **NO_MODULE_BUILD,
    }


@pytest.mark.slow
def test_the_nvidia_repository_path_installs_from_a_signed_mirror(debian_root, mirror, tmp_path):
    require_ansible()
    root = debian_root
    driver = driver_version(mirror)
    with serve(mirror.served) as url:
        # A keyring holding another key than the one expected is refused before it is installed.
        wrong = host_vars(root, url, mirror, "EB693B3035CD5710E231E123A4B469963BF863CC")  # NVIDIA's, not the mirror's
        refused = ansible_playbook(
            "playbooks/gpu_nodes.yml", chroot_inventory(tmp_path / "refused", {"image": wrong}), *GPU_STACK_ONLY
        )
        assert refused.rc == 2, refused.explain()
        said = " ".join(refused.output.split())
        assert f"holds keys ['{mirror.fingerprint}'], expected ['EB693B3035CD5710E231E123A4B469963BF863CC']" in said
        assert "the download is not NVIDIA's keyring" in said
        assert not (root / "usr/share/keyrings/cuda-archive-keyring.gpg").exists()
        assert "cuda-keyring" not in chroot(root, "dpkg-query", "-W", "-f=${Package}\n")

        # Fabric Manager as on an NVSwitch system (sysfs here has no NVSwitch to find).
        hostvars = {**host_vars(root, url, mirror), "nvidia_driver_fabricmanager": True}
        inventory = chroot_inventory(tmp_path / "inventory", {"image": hostvars})
        # A dry run on the fresh host: it passes, shows the changes it can and changes nothing.
        before = tree_state(root)
        dry = ansible_playbook("playbooks/gpu_nodes.yml", inventory, "--check", "--diff", *GPU_STACK_ONLY)
        assert dry.rc == 0, dry.explain()
        assert without_apt_caches(tree_state(root)) == without_apt_caches(before)
        assert "is not configured on image yet, so the packages it would deliver cannot be simulated" in " ".join(
            dry.output.split()
        )
        assert "+Pin: version" in dry.output
        first = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
        second = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
    print(first.recap_text())
    print(second.recap_text())
    assert first.rc == 0, first.explain()
    assert second.rc == 0, second.explain()
    assert second.recap()["image"]["changed"] == 0, second.changed_tasks()

    # The keyring package is installed, and its sources file now names the mirror instead of NVIDIA.
    assert "ii  cuda-keyring" in chroot(root, "dpkg", "-l", "cuda-keyring")
    sources = (root / "etc/apt/sources.list.d/cuda-debian12-x86_64.list").read_text()
    assert f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {url}/debian12/x86_64/ /" in sources
    assert "developer.download.nvidia.com" not in sources
    # Every package came from the mirror at the requested version, and is held.
    wanted = {
        "cuda-drivers-535": f"{driver}-1",
        "nvidia-fabricmanager-535": f"{driver}-1",
        "cuda-toolkit-12-2": "12.2.140-1",
        "libcudnn9-cuda-12": "9.10.2.21-1",
        "libcudnn9-dev-cuda-12": "9.10.2.21-1",
    }
    status = chroot(root, "dpkg-query", "-W", "-f=${Package} ${Version} ${Status}\n", *wanted)
    assert sorted(status.splitlines()) == sorted(f"{p} {v} hold ok installed" for p, v in wanted.items())
    policy = chroot(root, "apt-cache", "policy", "cuda-toolkit-12-2")
    assert f"{url}/debian12/x86_64  Packages" in policy
    # The driver's dependencies come from Debian at the same driver version, which the pin keeps.
    assert chroot(root, "dpkg-query", "-W", "-f=${Version}", "libnvidia-ml1").startswith(f"{driver}-")
    assert f"Pin: version {driver}*" in (root / "etc/apt/preferences.d/gpulab-nvidia-driver").read_text()
    assert f"*** {driver}-1 1001" in chroot(root, "apt-cache", "policy", "cuda-drivers-535")
    # Fabric Manager at the driver's version, enabled; it cannot start in a root, and the run says so.
    assert (root / "etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service").is_symlink()
    assert "Fabric Manager is enabled and starts with the driver at the next boot; not started now" in " ".join(
        first.output.split()
    )
    # CUDA 12.2 at NVIDIA's path is the default toolkit; cuDNN from the repository's packages.
    assert "release 12.2," in chroot(root, "/usr/local/cuda/bin/nvcc", "--version")
    assert chroot(root, "readlink", "-f", "/usr/local/cuda").strip() == "/usr/local/cuda-12.2"
    assert re.search(
        r"libcudnn\.so\.9 \(libc6,x86-64\) => (/usr)?/lib/x86_64-linux-gnu/libcudnn\.so\.9",
        chroot(root, "ldconfig", "-p"),
    )
