"""A driver already in a Debian 12 root, met by playbooks/gpu_nodes.yml with the default inventory and a P100 assumed.

One root, one situation after the other, each played with the driver role alone (`--tags nvidia_driver`, the
pre-flight always runs): a runfile install and a held older driver are refused before any change, naming what a
replacement would remove; Debian's driver at an older version that still serves the plan, and the planned driver
installed by hand, are kept - nothing installed, removed or downloaded - and still managed: held, and out of
unattended-upgrades' reach. The replacement itself runs for real in
tests/test_roles_chroot.py (a runfile install replaced by Debian's driver, then a second run with changed=0).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from playbook import ansible_playbook
from provision.apt_mirror import candidate_version
from provision.driver_stand_ins import driver_packages, runfile_install
from provision.files import tree_state, without_apt_caches
from provision.inventory import chroot_inventory, require_ansible

P100 = "10de:15f8"
DRIVER_ONLY = ("--tags", "nvidia_driver")


def kernels(root: Path) -> list[str]:
    return sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))


def said(result) -> str:  # type: ignore[no-untyped-def]
    """The output as one line, with the YAML callback's quoting ('' for ') undone."""
    return " ".join(result.output.split()).replace("''", "'")


def play(inventory: Path):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    result = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *DRIVER_ONLY)
    print(f"play {time.monotonic() - started:.0f} s")
    return result


UNATTENDED = "etc/apt/apt.conf.d/51gpulab-nvidia-driver"


def selections(root: Path, *packages: str) -> dict[str, str]:
    out = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f=${Package} ${db:Status-Want}\n", *packages],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split() for line in out.splitlines())


def purge(root: Path, *packages: str) -> None:
    subprocess.run(
        ["chroot", str(root), "dpkg", "--set-selections"],
        input="".join(f"{p} install\n" for p in packages),
        text=True,
        check=True,
    )
    subprocess.run(["chroot", str(root), "dpkg", "--purge", *packages], check=True, capture_output=True)


@pytest.mark.slow
def test_a_driver_in_place_is_refused_or_kept_before_any_change(debian_root, tmp_path):
    require_ansible()
    root = debian_root
    inventory = chroot_inventory(
        tmp_path / "inventory", {"image": {"root": root, "gpulab_preflight_gpu_pci_ids": [P100]}}
    )

    # A runfile install of R470 (CUDA <= 11.4), where the plan is Debian's R535 with CUDA 11.8.
    runfile = runfile_install(root, "470.256.02", kernels(root))
    before = without_apt_caches(tree_state(root))
    refused = play(inventory)
    assert refused.rc == 2, refused.explain()
    assert refused.recap()["image"]["failed"] == 1 and refused.recap()["image"]["changed"] == 0
    assert (
        "NVIDIA driver 470.256.02 (NVIDIA's runfile installer) is in place on image and the plan is 535 (CUDA 11.8 "
        "needs a newer driver than R470 (CUDA <= 11.4)); nothing was changed. Replacing it would remove the runfile "
        "install (nvidia-uninstall); DKMS nvidia/470.256.02. Fix: set nvidia_driver_existing: replace"
    ) in said(refused)
    assert not [line for line in refused.output.splitlines() if line.startswith("TASK [nvidia_driver")]
    assert without_apt_caches(tree_state(root)) == before
    subprocess.run(["chroot", str(root), "/usr/bin/nvidia-uninstall"], check=True)
    assert not any(p.exists() for p in runfile)

    # Debian's R470 packages, held by the operator: refused, the held packages named; nothing released.
    held = {"nvidia-tesla-470-driver": "470.256.02-1", "nvidia-tesla-470-kernel-dkms": "470.256.02-1"}
    driver_packages(root, tmp_path / "debs-470", held, hold=True)
    before = without_apt_caches(tree_state(root))
    refused = play(inventory)
    assert refused.rc == 2, refused.explain()
    assert (
        "NVIDIA driver 470.256.02 (the distribution's packages, held: nvidia-tesla-470-driver, "
        "nvidia-tesla-470-kernel-dkms) is in place on image"
    ) in said(refused)
    assert "would remove packages nvidia-tesla-470-driver, nvidia-tesla-470-kernel-dkms." in said(refused)
    assert without_apt_caches(tree_state(root)) == before
    purge(root, *held)

    # Debian's driver at an older version (R525 serves CUDA 11.8 on a P100): kept and still managed - its packages
    # held, unattended-upgrades kept away - with nothing installed, removed or downloaded; a second run changes nothing.
    older = {"nvidia-driver": "525.147.05-7~deb12u1", "nvidia-kernel-dkms": "525.147.05-7~deb12u1"}
    driver_packages(root, tmp_path / "debs-525", older)
    before = without_apt_caches(tree_state(root))
    kept = play(inventory)
    assert kept.rc == 0, kept.explain()
    assert (
        "NVIDIA driver 525.147.05 (the distribution's packages) is kept on image: it drives every GPU and serves "
        "CUDA 11.8; its packages stay as they are, held (nvidia_driver_existing: replace installs 535 instead)."
    ) in said(kept)
    assert "TASK [nvidia_driver : Install the driver packages" not in kept.output
    assert selections(root, *older) == {p: "hold" for p in older}
    blacklist = (root / UNATTENDED).read_text()
    assert '"nvidia-";' in blacklist and '"libnvidia-";' in blacklist
    assert "No nvidia-persistenced unit on image" in said(kept)  # the stand-in packages ship none
    changed = {k for k, v in without_apt_caches(tree_state(root)).items() if before.get(k) != v}
    assert all(k in (UNATTENDED, "etc/apt/apt.conf.d") or k.startswith("var/lib/dpkg") for k in changed), changed
    again = play(inventory)
    assert again.rc == 0 and again.recap()["image"]["changed"] == 0, again.changed_tasks()
    purge(root, *older)
    (root / UNATTENDED).unlink()

    # The planned driver (the archive's own version) installed by hand: kept as it is, nothing pinned or held.
    version = candidate_version(root, "nvidia-driver")
    planned = {"nvidia-driver": version, "nvidia-kernel-dkms": version, "nvidia-smi": version}
    driver_packages(root, tmp_path / "debs-535", planned)
    kept = play(inventory)
    assert kept.rc == 0, kept.explain()
    assert f"NVIDIA driver {version.split('-')[0]} (the distribution's packages) is kept on image" in said(kept)
    assert selections(root, *planned) == {p: "hold" for p in planned}
    assert (root / UNATTENDED).is_file()
    assert not (root / "etc/apt/preferences.d/gpulab-nvidia-driver").exists()  # held, not pinned: not gpulab's
