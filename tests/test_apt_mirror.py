"""The NVIDIA-repository source of nvidia_driver, cuda_toolkit and cudnn, run for real against a local mirror.

The mirror (tests/provision/apt_mirror.py) is signed with a key made for this run and ships it in a cuda-keyring
package, as NVIDIA does. Its driver packages are the R580 generation the roles choose, with the names, versions,
Depends and Provides of NVIDIA's Packages (tests/provision/driver_stand_ins.py: nvidia-driver-pinning-580, the
unversioned cuda-drivers and nvidia-fabricmanager, which Provides nvidia-fabricmanager-580, and what they pull), R590's
beside them as in NVIDIA's repository; they are empty but for the units the roles read and enable. Its
cuda-toolkit-12-2 and libcudnn9-cuda-12 carry contents from NVIDIA's cuDNN wheel and an nvcc that only reports its
release (NVIDIA's repository for Debian 12 starts at CUDA 12.2, Debian's nvcc is 11.8).

On Debian 12, with every source NVIDIA's repository: first a keyring holding an unexpected key is refused before it
is installed; then a dry run, the real run, and a second that changes nothing. On Debian 13, with the default
inventory: its driver source, auto, takes R580 from NVIDIA's repository (Debian 13's R550 is not a long-term branch),
the run enables the archive's non-free components in its deb822 sources, and a second run changes nothing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from guest.image import in_chroot
from playbook import ansible_playbook
from provision.apt_mirror import Mirror, build_mirror, control_of, cudnn_from_wheel, toolkit_stand_in
from provision.driver_stand_ins import NVIDIA_REPO_STANZAS, UNIT_FILES, nvidia_repo_stand_ins
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


def _release(version: str) -> list[int]:
    return [int(part) for part in version.split("-")[0].split(".")]


def driver_version(mirror: Mirror) -> str:
    """The driver a test plans: the oldest release among the mirror's driver meta packages (R580's cuda-drivers
    here, R590's beside it; cuda-drivers-535 where a test re-packages Debian's driver)."""
    versions = [control_of(deb)["Version"] for deb in mirror.repo.glob("cuda-drivers*.deb")]
    return min(versions, key=_release).split("-")[0]


# NVIDIA's R580 generation, and R590 beside it as in NVIDIA's repository: the newer branch that the pin and
# nvidia-driver-pinning-580 must keep out (cuda-drivers' dependencies have lower bounds only).
R580_GENERATION = [s for s in NVIDIA_REPO_STANZAS if s["Version"].split(".")[0] in ("580", "590")]
DRIVER = next(s["Version"] for s in R580_GENERATION if s["Package"] == "nvidia-driver-pinning-580").split("-")[0]
# What cuda-drivers 580 brings from the mirror, at the driver's version (nvidia-settings and the X tools aside).
DRIVER_PACKAGES = ("cuda-drivers", "nvidia-driver", "nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-persistenced")


def r580_mirror(tmp: Path, distro: str = "debian12", cuda_stack: bool = False) -> Mirror:
    """The signed mirror of NVIDIA's repository for `distro` (at tmp/mirror) with the R580 generation's driver
    packages, and with cuda_stack the CUDA 12.2 toolkit and cuDNN 9.10 for CUDA 12 under NVIDIA's names."""
    work, out = tmp / "work", tmp / "debs"
    work.mkdir()
    out.mkdir()
    debs = nvidia_repo_stand_ins(work / "driver", out, R580_GENERATION, UNIT_FILES)
    if cuda_stack:
        wheel = pinned_wheel("9.10-cu11")
        wheel_file = cached_pypi_file(wheel["path"], wheel["sha256"])
        debs += [
            toolkit_stand_in(work, out, "12.2", "12.2.140-1"),
            # The cu11 wheel's library stands in for the cu12 build (the test reads where it lands, not what it runs).
            *cudnn_from_wheel(wheel_file, work, out, "12", wheel["version"]),
        ]
    # gpg-agent's socket lives in the mirror's key directory: its path must stay short (under pytest-xdist too).
    return build_mirror(tmp / "mirror", debs, distro=distro)


@pytest.fixture
def mirror(tmp_path):
    return r580_mirror(tmp_path, cuda_stack=True)


def installed(root: Path, packages: list[str] | tuple[str, ...]) -> list[str]:
    """`<package> <version> <status>` of the packages dpkg knows (a name it does not know is left out), sorted."""
    proc = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f=${Package} ${Version} ${Status}\n", *packages],
        capture_output=True,
        text=True,
        check=False,
    )
    return sorted(line for line in proc.stdout.splitlines() if not line.endswith(" not-installed"))


def assert_branch_580_from_the_mirror(root: Path, first_output: str) -> None:
    """The pinning package and the driver packages from the mirror at R580's release, held where the role holds;
    nothing of R590 (the mirror's newest) and nothing of the Debian archive's own driver."""
    pinning = installed(root, ["nvidia-driver-pinning-580"])
    assert pinning[0].startswith(f"nvidia-driver-pinning-580 {DRIVER}-1 ") and pinning[0].endswith(" ok installed")
    held = {"cuda-drivers"}
    assert installed(root, DRIVER_PACKAGES) == sorted(
        f"{p} {DRIVER}-1 {'hold' if p in held else 'install'} ok installed" for p in DRIVER_PACKAGES
    )
    everything = chroot(root, "dpkg-query", "-W", "-f=${Package} ${Version}\n")
    assert " 590." not in everything
    assert f"Pin: version {DRIVER}*" in (root / "etc/apt/preferences.d/gpulab-nvidia-driver").read_text()
    assert f"*** {DRIVER}-1 1001" in chroot(root, "apt-cache", "policy", "cuda-drivers")
    # Persistence mode on through a drop-in over NVIDIA's unit, its own command line kept.
    assert (root / "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service").is_symlink()
    dropin = (root / "etc/systemd/system/nvidia-persistenced.service.d/gpulab-persistence-mode.conf").read_text()
    exec_start = [line for line in dropin.splitlines() if line.startswith("ExecStart=")]
    assert exec_start == [
        "ExecStart=",
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose --persistence-mode",
    ], dropin
    assert "is installed but not active until image reboots" in " ".join(first_output.split())


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
        # The persistence daemon's unit is NVIDIA's here (the stand-in carries it).
        hostvars = {
            **host_vars(root, url, mirror),
            "nvidia_driver_fabricmanager": True,
            "nvidia_driver_persistenced": True,
        }
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
    # R580's packages came from the mirror at the requested release, none of R590's; the driver is held.
    assert_branch_580_from_the_mirror(root, first.output)
    # Fabric Manager, the toolkit and cuDNN from the mirror at the requested versions, held.
    wanted = {
        "nvidia-fabricmanager": f"{DRIVER}-1",
        "cuda-toolkit-12-2": "12.2.140-1",
        "libcudnn9-cuda-12": "9.10.2.21-1",
        "libcudnn9-dev-cuda-12": "9.10.2.21-1",
    }
    assert installed(root, list(wanted)) == sorted(f"{p} {v} hold ok installed" for p, v in wanted.items())
    policy = chroot(root, "apt-cache", "policy", "cuda-toolkit-12-2")
    assert f"{url}/debian12/x86_64  Packages" in policy
    # Fabric Manager 580 is the unversioned package that provides nvidia-fabricmanager-580, at the driver's version,
    # enabled; it cannot start in a root, and the run says so.
    assert "Provides: nvidia-fabricmanager-580" in chroot(root, "dpkg", "-s", "nvidia-fabricmanager")
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


# suite: (root fixture, NVIDIA's repository folder, the archive's CUDA that auto keeps for the toolkit)
DEFAULT_INVENTORY_HOSTS = {
    "bookworm": ("debian_root", "debian12", "11.8"),
    "trixie": ("trixie_root", "debian13", "12.4"),
}


@pytest.mark.slow
@pytest.mark.parametrize("suite", sorted(DEFAULT_INVENTORY_HOSTS))
def test_debian_12_and_13_with_the_default_inventory_take_r580_from_the_signed_mirror(suite, request, tmp_path):
    """The driver play with the default inventory on a stock Debian 12 or 13 host, a P100 assumed: only NVIDIA's
    repository is a mirror (its URL and key). Debian 12's archive has R535 (past its end of life), Debian 13's R550
    (not long-term): auto takes NVIDIA's R580 for both. The toolkit's and cuDNN's roles have their own tests."""
    require_ansible()
    fixture, distro, archive_cuda = DEFAULT_INVENTORY_HOSTS[suite]
    root = request.getfixturevalue(fixture)
    mirror = r580_mirror(tmp_path, distro)
    # A stock Debian host: deb822 sources with the archive's main component only, in apt's lists too.
    sources = root / "etc/apt/sources.list.d/debian.sources"
    stock = sources.read_text()
    assert stock.count("Components: main contrib non-free non-free-firmware\n") == 2, stock
    sources.write_text(stock.replace("Components: main contrib non-free non-free-firmware", "Components: main"))
    in_chroot(root, "apt-get", "update", "-q")
    with serve(mirror.served) as url:
        host = {
            "root": root,
            "gpulab_preflight_gpu_pci_ids": [P100],
            "nvidia_driver_source": "auto",  # the roles' default (chroot_inventory's is distro)
            "nvidia_cuda_repo_base_url": url,
            "nvidia_cuda_repo_key_fingerprints": [mirror.fingerprint],
            # The stand-in nvidia-kernel-dkms carries no module source (test_roles_chroot.py builds a real one).
            "nvidia_driver_build_modules": False,
        }
        inventory = chroot_inventory(tmp_path / "inventory", {"image": host})
        first = ansible_playbook("playbooks/gpu_nodes.yml", inventory, "--tags", "nvidia_driver")
        second = ansible_playbook("playbooks/gpu_nodes.yml", inventory, "--tags", "nvidia_driver")
    print(first.recap_text())
    print(second.recap_text())
    assert first.rc == 0, first.explain()
    assert second.rc == 0, second.explain()
    assert second.recap()["image"]["changed"] == 0, second.changed_tasks()

    said = " ".join(first.output.split()).replace("''", "'")  # the YAML callback's quoting undone
    # auto took NVIDIA's repository for the driver, the archive's own CUDA stays the toolkit's source.
    assert f"profile auto: driver={DRIVER}, kernel_modules=proprietary, cuda={archive_cuda}," in said
    assert "from driver cuda_repo, cuda distro, cudnn wheel" in said
    assert "the driver comes from NVIDIA's repository (R580, long-term, supported until" in said  # and why
    assert_branch_580_from_the_mirror(root, first.output)
    # NVIDIA's repository for the release, through the mirror; Debian's own sources in deb822 with the components
    # the default toolkit source (Debian's nvidia-cuda-toolkit) needs.
    cuda_list = (root / f"etc/apt/sources.list.d/cuda-{distro}-x86_64.list").read_text()
    assert f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {url}/{distro}/x86_64/ /" in cuda_list
    assert sources.read_text() == stock
    assert not (root / "etc/apt/sources.list").exists()
    assert "blacklist nouveau" in (root / "etc/modprobe.d/gpulab-blacklist-nouveau.conf").read_text()
