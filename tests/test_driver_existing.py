"""The decision about a driver already on a host (gpulab.compat.existing), from driver_facts-shaped answers.

Ubuntu's archive and NVIDIA's repository cannot be reached here: their hosts are decided from captured-format
answers (package names, versions and `apt-cache policy` origin lines as those archives write them). The Debian
cases also run for real in a Debian 12 root (tests/test_roles_chroot.py, tests/test_driver_existing_chroot.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpulab.compat.existing import decide, installed_driver

DEBIAN = "http://deb.debian.org/debian bookworm/non-free amd64 Packages"
UBUNTU = "http://archive.ubuntu.com/ubuntu jammy-updates/restricted amd64 Packages"
NVIDIA = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64  Packages"


def gpu(name: str, arch: str, pci_id: str) -> dict[str, Any]:
    return {"address": "0000:01:00.0", "pci_id": pci_id, "name": name, "architecture": arch, "compute_capability": ""}


P100 = gpu("Tesla P100-PCIE-16GB", "Pascal", "10de:15f8")
H100 = gpu("NVIDIA H100 80GB HBM3", "Hopper", "10de:2330")
H200 = gpu("NVIDIA H200", "Hopper", "10de:2335")
B200 = gpu("NVIDIA B200", "Blackwell", "10de:2901")


def plan(*gpus: dict[str, Any], driver: str = "535", cuda: tuple[str, ...] = ("11.8",), source: str = "distro"):
    return {"gpus": list(gpus), "driver": driver, "cuda": list(cuda), "sources": {"driver": source}}


def pkg(name: str, version: str, origin: str = DEBIAN, hold: bool = False) -> dict[str, Any]:
    return {"name": name, "version": version, "origin": origin, "hold": hold}


def facts(*packages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"packages": list(packages), "runfile": None, "dkms": [], "loaded": None, "managed": False}
    return {**base, **extra}


DEBIAN_535 = [
    pkg("nvidia-driver", "535.261.03-1~deb12u1"),
    pkg("nvidia-kernel-dkms", "535.261.03-1~deb12u1"),
    pkg("nvidia-smi", "535.261.03-1~deb12u1"),
    pkg("libnvidia-ml1", "535.261.03-1~deb12u1"),
]


def test_a_fresh_host_installs():
    decision = decide(facts(), plan(P100), "keep", "n1")
    assert decision.action == "install"
    assert decision.message == "No NVIDIA driver on n1: installing 535."


def test_a_hand_installed_driver_that_serves_the_plan_is_kept_held_where_it_is_and_nothing_removed():
    decision = decide(facts(*DEBIAN_535), plan(P100), "keep", "n1")
    assert decision.action == "keep"
    assert decision.installed_version == "535.261.03" and decision.packaging == "distro"
    assert not decision.change_held and not decision.remove_packages
    assert decision.hold == sorted(p["name"] for p in DEBIAN_535)
    assert "is kept on n1: it drives every GPU and serves CUDA 11.8; its packages stay as they are, held" in (
        decision.message
    )


def test_an_nvswitch_host_keeps_its_driver_only_beside_fabric_manager_at_its_exact_version():
    hgx = {**plan(H100, driver="570", cuda=("12.4",)), "nvswitch": True}
    r570 = [pkg("nvidia-headless-570-server", "570.195.03-0ubuntu0.22.04.1", UBUNTU)]
    missing = decide(facts(*r570), hgx, "keep", "hgx1")
    assert missing.action == "refuse"
    assert (
        "this NVSwitch host needs Fabric Manager 570.195.03 beside driver 570.195.03 and no Fabric Manager is "
        "installed" in missing.message
    )
    other = decide(facts(*r570, pkg("nvidia-fabricmanager-570", "570.172.08-0ubuntu1", UBUNTU)), hgx, "keep")
    assert other.action == "refuse" and "Fabric Manager 570.172.08 is installed" in other.message
    assert decide(facts(*r570), hgx, "replace").action == "replace"
    matched = [*r570, pkg("nvidia-fabricmanager-570", "570.195.03-0ubuntu1", UBUNTU)]
    kept = decide(facts(*matched), hgx, "keep", "hgx1")
    assert kept.action == "keep" and kept.hold == ["nvidia-fabricmanager-570", "nvidia-headless-570-server"]
    # The same driver without NVSwitches needs no Fabric Manager.
    assert decide(facts(*r570), {**hgx, "nvswitch": False}, "keep").action == "keep"


def test_gpulab_s_own_driver_for_this_plan_is_checked_in_place():
    decision = decide(facts(*DEBIAN_535, managed=True), plan(P100), "keep", "n1")
    assert decision.action == "install"
    assert "is the one gpulab planned (535, distro): checked in place" in decision.message
    # refuse mode lets gpulab's own driver through too: a re-run must converge, not stop.
    assert decide(facts(*DEBIAN_535, managed=True), plan(P100), "refuse").action == "install"


def test_an_older_debian_driver_that_cannot_serve_the_cuda_is_refused_with_the_package_list():
    old = [pkg("nvidia-tesla-470-driver", "470.256.02-1"), pkg("nvidia-tesla-470-kernel-dkms", "470.256.02-1")]
    decision = decide(facts(*old), plan(P100), "keep", "n1")
    assert decision.action == "refuse"
    assert decision.message == (
        "NVIDIA driver 470.256.02 (the distribution's packages) is in place on n1 and the plan is 535 (CUDA 11.8 "
        "needs a newer driver than R470 (CUDA <= 11.4)); nothing was changed. Replacing it would remove packages "
        "nvidia-tesla-470-driver, nvidia-tesla-470-kernel-dkms. Fix: set nvidia_driver_existing: replace to do "
        "that, or request a stack this driver serves (gpulab_stack)."
    )
    replaced = decide(facts(*old), plan(P100), "replace", "n1")
    assert replaced.action == "replace" and replaced.change_held
    assert replaced.remove_packages == ["nvidia-tesla-470-driver", "nvidia-tesla-470-kernel-dkms"]


def test_the_toolkit_and_container_packages_are_not_part_of_the_driver_to_remove():
    others = [pkg("nvidia-cuda-toolkit", "11.8.89~11.8.0-5~deb12u1"), pkg("libnvidia-container1", "1.18.2-1")]
    old = [pkg("nvidia-driver", "470.256.02-1"), *others]
    assert decide(facts(*old), plan(P100), "replace").remove_packages == ["nvidia-driver"]


def test_a_held_package_is_named_and_changed_only_under_replace():
    held = [pkg("nvidia-driver", "470.256.02-1", hold=True), pkg("nvidia-kernel-dkms", "470.256.02-1", hold=True)]
    refused = decide(facts(*held), plan(P100), "keep", "n1")
    assert refused.action == "refuse" and not refused.change_held
    assert "(the distribution's packages, held: nvidia-driver, nvidia-kernel-dkms)" in refused.message
    replaced = decide(facts(*held), plan(P100), "replace", "n1")
    assert replaced.change_held and replaced.held == ["nvidia-driver", "nvidia-kernel-dkms"]


def test_a_runfile_install_is_read_and_replaced_with_its_uninstaller_and_dkms_entries():
    runfile = facts(
        runfile={"uninstaller": "/usr/bin/nvidia-uninstall", "version": "470.256.02"},
        dkms=[{"module": "nvidia", "version": "470.256.02", "kernels": ["6.1.0-50-amd64"]}],
        loaded={"version": "470.256.02", "flavour": "proprietary"},
    )
    assert installed_driver(runfile) == ("470.256.02", "runfile")
    refused = decide(runfile, plan(P100), "keep", "n1")
    assert refused.action == "refuse"
    assert "NVIDIA driver 470.256.02 (NVIDIA's runfile installer) is in place on n1" in refused.message
    assert "would remove the runfile install (nvidia-uninstall); DKMS nvidia/470.256.02." in refused.message
    replaced = decide(runfile, plan(P100), "replace")
    assert replaced.action == "replace" and replaced.runfile and replaced.dkms == ["nvidia/470.256.02"]


def test_nvidia_s_packages_over_the_distribution_s_libraries_are_one_packaging():
    # NVIDIA's cuda-drivers-<branch> depends on libraries by Debian's names; gpulab installed both for this plan.
    mirror = "http://127.0.0.1:8000/debian12/x86_64  Packages"
    both = facts(pkg("cuda-drivers-535", "535.261.03-1", mirror), pkg("libnvidia-ml1", "535.261.03-1~deb12u1"))
    assert installed_driver(both) == ("535.261.03", "cuda_repo")
    converge = decide({**both, "managed": True}, plan(P100, source="cuda_repo"), "keep")
    assert converge.action == "install" and "checked in place" in converge.message


def test_a_runfile_driver_beside_packages_is_never_kept():
    mixed = facts(*DEBIAN_535, runfile={"uninstaller": "/usr/bin/nvidia-uninstall", "version": "535.261.03"})
    decision = decide(mixed, plan(P100), "keep")
    assert decision.packaging == "mixed" and decision.action == "refuse"
    assert "a runfile install and packages are both in place" in decision.message


def test_refuse_stops_on_any_driver_gpulab_did_not_install():
    decision = decide(facts(*DEBIAN_535), plan(P100), "refuse", "n1")
    assert decision.action == "refuse" and "(nvidia_driver_existing is refuse)" in decision.message


def test_ubuntu_s_desktop_driver_550_is_kept_on_an_h100_and_its_x_stack_is_never_removed_silently():
    # Ubuntu 22.04 with nvidia-driver-550 (X/GL driver included) from the restricted component.
    ubuntu = [
        pkg("nvidia-driver-550", "550.144.03-0ubuntu0.22.04.1", UBUNTU),
        pkg("nvidia-dkms-550", "550.144.03-0ubuntu0.22.04.1", UBUNTU),
        pkg("libnvidia-gl-550", "550.144.03-0ubuntu0.22.04.1", UBUNTU),
        pkg("xserver-xorg-video-nvidia-550", "550.144.03-0ubuntu0.22.04.1", UBUNTU),
        pkg("nvidia-utils-550", "550.144.03-0ubuntu0.22.04.1", UBUNTU),
    ]
    kept = decide(facts(*ubuntu), plan(H100, driver="570", cuda=("12.4",)), "keep", "u1")
    assert kept.action == "keep" and kept.installed_version == "550.144.03"
    # CUDA 12.8 needs R570: refused, and the list shows the X/GL stack that a replacement would take.
    refused = decide(facts(*ubuntu), plan(H100, driver="570", cuda=("12.8",)), "keep", "u1")
    assert refused.action == "refuse"
    assert "libnvidia-gl-550, xserver-xorg-video-nvidia-550" in refused.message


def test_nvidia_s_open_packages_on_a_b200_are_kept_and_proprietary_ones_refused():
    repo = [
        pkg("nvidia-open", "580.95.05-0ubuntu1", NVIDIA),
        pkg("nvidia-driver-580-open", "580.95.05-0ubuntu1", NVIDIA),
    ]
    target = plan(B200, driver="580", cuda=("12.8",), source="cuda_repo")
    open_loaded = facts(*repo, loaded={"version": "580.95.05", "flavour": "open"})
    assert installed_driver(open_loaded) == ("580.95.05", "cuda_repo")
    assert decide(open_loaded, target, "keep").action == "keep"
    proprietary = facts(*repo, loaded={"version": "580.95.05", "flavour": "proprietary"})
    refused = decide(proprietary, target, "keep")
    assert "driven only by the open kernel modules; the proprietary ones are in place" in refused.message


def test_an_h200_needs_its_first_driver_even_within_a_branch_that_knows_hopper():
    r535 = [pkg("nvidia-headless-535-server", "535.230.02-0ubuntu0.22.04.1", UBUNTU)]
    decision = decide(facts(*r535), plan(H200, driver="570", cuda=("12.4",)), "keep")
    assert decision.action == "refuse"
    assert "NVIDIA H200 needs driver >= 550.54.14" in decision.message


def test_a_mixed_three_host_inventory_gets_one_decision_per_host():
    """P100 with Debian's driver by hand, V100 with a runfile 470, H100 fresh: kept, refused (replaced on
    request), installed - the same plan for all three (one branch per fleet)."""
    v100 = gpu("Tesla V100-SXM2-16GB", "Volta", "10de:1db1")
    fleet_plan = plan(P100, v100, H100, driver="535", cuda=("11.8",))
    hosts = {
        "p100": facts(*DEBIAN_535),
        "v100": facts(runfile={"uninstaller": "/usr/bin/nvidia-uninstall", "version": "470.256.02"}),
        "h100": facts(),
    }
    actions = {h: decide(f, fleet_plan, "keep", h).action for h, f in hosts.items()}
    assert actions == {"p100": "keep", "v100": "refuse", "h100": "install"}
    actions = {h: decide(f, fleet_plan, "replace", h).action for h, f in hosts.items()}
    assert actions == {"p100": "replace", "v100": "replace", "h100": "install"}


def test_an_unknown_mode_is_one_clear_error():
    with pytest.raises(ValueError, match="nvidia_driver_existing is 'upgrade': use one of keep, replace, refuse"):
        decide(facts(), plan(P100), "upgrade")


def test_debian_s_cuda_toolkit_beside_debian_s_driver_is_still_the_distribution_s_packaging():
    # What a Debian 12 host holds after gpulab installed the archive's driver and nvidia-cuda-toolkit: the toolkit
    # brings nvidia-openjdk-8-jre and nvidia-opencl-dev, whose names start like NVIDIA's open-module packages.
    toolkit = [
        pkg("nvidia-cuda-toolkit", "11.8.89~11.8.0-5~deb12u1"),
        pkg("nvidia-cuda-dev", "11.8.89~11.8.0-5~deb12u1"),
        pkg("nvidia-opencl-dev", "11.8.89~11.8.0-5~deb12u1"),
        pkg("nvidia-openjdk-8-jre", "9.+8u252-b09-1~deb9u1~11.8.0-5~deb12u1"),
        pkg("nvidia-opencl-icd", "535.261.03-1~deb12u1"),
    ]
    host = facts(*[{**p, "hold": True} for p in DEBIAN_535], *toolkit, managed=True)
    assert installed_driver(host) == ("535.261.03", "distro")
    converge = decide(host, plan(P100), "replace", "n1")
    assert converge.action == "install" and "checked in place" in converge.message
    # NVIDIA's own open-module meta packages are still NVIDIA's packaging, wherever they came from.
    assert installed_driver(facts(pkg("nvidia-open-580", "580.95.05-1")))[1] == "cuda_repo"
