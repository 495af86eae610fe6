"""The pre-flight of every play: GPU facts from sysfs, the matrix check, and refusals before any change.

The decision itself (`resolve`) is tested directly; the module runs for real against a sysfs tree rebuilt from
the captured 4x H200 machine; the refusals are real ansible-playbook runs of playbooks/gpu_nodes.yml against a
Debian 12 root (chroot) whose files are compared before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.compat.data import cudnn_wheel_pins
from gpulab.compat.resolve import Request, resolve, summary
from playbook import REPO, ansible_env, ansible_playbook
from provision.files import tree_state
from provision.inventory import chroot_inventory, require_ansible

# The frameworks' venv (dl_frameworks, in the same play) has its own tests; these runs apply the GPU stack alone.
GPU_STACK_ONLY = ("--skip-tags", "dl_frameworks")

CAPTURE = REPO / "tests" / "fixtures" / "h200x4-firecracker" / "sysfs-nvidia-pci.txt"
P100, V100, H200, B200 = "10de:15f8", "10de:1db5", "10de:2335", "10de:2901"
# The inventory's cuDNN wheel pins and the roles' default sources, as a run with the default inventory has them.
PINS = cudnn_wheel_pins()
NVIDIA = {"driver": "cuda_repo", "cuda": "cuda_repo", "cudnn": "wheel"}


def gpus(*pci_ids: str) -> list[dict[str, str]]:
    return [{"address": f"0000:0{i}:00.0", "pci_id": p} for i, p in enumerate(pci_ids)]


# Debian's own packaging for the driver (the default, auto, is decided in tests/test_driver_source_auto.py).
ARCHIVE = {"driver": "distro"}


def check(
    *pci_ids: str,
    profile: str = "none",
    python: str = "3.11",
    os_release: str = "12",
    sources: dict[str, str] | None = None,
    **stack: object,
):
    distribution = "Ubuntu" if "." in os_release else "Debian"
    req = Request(
        gpus=gpus(*pci_ids),
        profile=profile,
        stack=stack,
        host_python=python,
        distribution=distribution,
        distribution_version=os_release,
        sources=sources or {},
        cudnn_wheels=PINS,
    )
    return resolve(req)


# -- the decision -----------------------------------------------------------------------------------------------
def test_auto_plans_the_newest_stack_debians_archive_delivers_for_a_pascal_gpu():
    target, problems = check(P100, P100, profile="auto", sources=ARCHIVE)
    assert problems == []
    # The archive's current R535 release (its point releases move), its CUDA 11.8, the pinned cuDNN wheel.
    assert target["driver"] == "535" and target["driver_branch"] == "535"
    assert target["kernel_modules"] == "proprietary"  # Pascal has no open kernel modules
    assert target["cuda"] == ["11.8"] and target["cuda_default"] == "11.8"
    assert target["cudnn_by_cuda"] == {"11.8": "9.10"}  # the last cuDNN with Pascal kernels
    assert target["torch"] == "2.7+cu118" and target["torch_index_url"] == "https://download.pytorch.org/whl/cu118"
    assert target["sources"] == {"driver": "distro", "cuda": "distro", "cudnn": "wheel"}
    assert [g["architecture"] for g in target["gpus"]] == ["Pascal", "Pascal"]
    assert summary(target) == (
        "2x Tesla P100-PCIE-16GB; profile auto: driver=535, kernel_modules=proprietary, cuda=11.8, cudnn=9.10, "
        "torch=2.7+cu118, tensorflow=2.21, python=3.11; from driver distro, cuda distro, cudnn wheel"
    )


def test_auto_from_nvidias_repository_plans_the_newest_stack_for_a_pascal_gpu():
    target, problems = check(P100, P100, profile="auto", sources=NVIDIA)
    assert problems == []
    assert target["driver"] == "580.95.05" and target["driver_branch"] == "580"
    assert target["cuda"] == ["12.9"] and target["cudnn_by_cuda"] == {"12.9": "9.10"}
    assert target["torch_index_url"] == "https://download.pytorch.org/whl/cu126"


def test_auto_refuses_an_h200_on_debians_archive_and_names_the_source_that_has_its_driver():
    target, problems = check(H200, profile="auto", sources=ARCHIVE)
    assert problems == [
        "[driver] Debian 12's archive has no driver for NVIDIA H200: it packages R535, R470, and NVIDIA H200 needs "
        "driver >= 550.54.14. Fix: set nvidia_driver_source: cuda_repo (NVIDIA's repository or a mirror of it), "
        "which delivers driver 595.71.05, CUDA 11.8, cuDNN 9.10."
    ]
    assert target["driver"] is None


def test_a_named_profile_on_hopper_gets_open_modules():
    target, problems = check(
        H200, H200, H200, H200, profile="modern", python="3.12", os_release="24.04", sources=NVIDIA
    )
    assert problems == []
    assert (target["driver"], target["cuda"], target["cudnn"]) == ("580.95.05", ["13.0"], "9.17")
    assert target["kernel_modules"] == "open"


def test_a_named_profile_its_sources_cannot_deliver_names_the_switch_per_part():
    _, problems = check(H200, profile="modern", python="3.12", os_release="24.04")
    assert problems == [
        "[cuda] Ubuntu 24.04's archive has no CUDA 13.0; it has 12.0. Fix: set cuda_toolkit_source: cuda_repo "
        "(NVIDIA's repository or a mirror of it)."
    ]


def test_side_by_side_toolkits_get_one_cudnn_each():
    target, problems = check(P100, driver="580.95.05", cuda=["11.8", "12.9"], os_release="22.04", sources=NVIDIA)
    assert problems == []
    assert target["cuda"] == ["11.8", "12.9"] and target["cuda_default"] == "12.9"
    assert target["cudnn_by_cuda"] == {"11.8": "9.10", "12.9": "9.10"}


def test_toolkits_the_source_lacks_name_the_source_that_has_them():
    _, problems = check(P100, driver="580.95.05", cuda=["12.2", "12.9"], sources={"driver": "cuda_repo"})
    assert problems == [
        "[cuda] Debian 12's archive has no CUDA 12.2, 12.9; it has 11.8. Fix: set cuda_toolkit_source: cuda_repo "
        "(NVIDIA's repository or a mirror of it)."
    ]
    # Debian's 11.8 is not in NVIDIA's repository for Debian 12, so no one source has both.
    _, problems = check(P100, driver="535", cuda=["11.8", "12.2"])
    assert problems == [
        "[cuda] Debian 12's archive has no CUDA 12.2; it has 11.8. Fix: no source gpulab installs from on Debian 12 "
        "has it: request what Debian 12's archive has (gpulab_stack.cuda), or set gpulab_profile: auto."
    ]


def test_no_gpu_means_nothing_to_install_and_no_refusal():
    target, problems = check(profile="auto")
    assert problems == [] and target["has_gpu"] is False
    assert target["driver"] is None and target["cuda"] == []
    assert summary(target) == "no NVIDIA GPU; profile auto: python=3.11"


def test_a_gpu_without_a_requested_driver_is_refused():
    _, problems = check(P100, profile="none")
    assert problems == [
        "[driver] this host has 1 NVIDIA GPU(s) but no driver version was requested. Fix: set gpulab_profile to "
        "'auto' (newest stack for the host's GPU), 'none', or a profile from `gpulab matrix show`, or set "
        "gpulab_stack.driver."
    ]


def test_blackwell_refuses_proprietary_modules():
    _, problems = check(B200, profile="auto", kernel_modules="proprietary", sources=NVIDIA)
    assert problems == [
        "[kernel_modules] NVIDIA B200 are driven only by the open kernel modules. Fix: set "
        "gpulab_stack.kernel_modules to 'open' (or 'auto')."
    ]


def test_open_modules_from_a_branch_without_them_name_the_first_branch_with_them():
    _, problems = check(H200, driver="470.256.02", kernel_modules="open")
    expected = "[kernel_modules] driver R470 ships no open kernel modules (the first is R515, for Turing and newer)."
    assert any(p.startswith(expected) for p in problems), problems


def test_secure_boot_without_signing_is_refused():
    req = Request(
        gpus=gpus(P100),
        profile="auto",
        host_python="3.11",
        distribution="Debian",
        distribution_version="12",
        secure_boot="enabled",
        cudnn_wheels=PINS,
    )
    _, problems = resolve(req)
    assert len(problems) == 1 and problems[0].startswith("[secure_boot] Secure Boot is enabled")
    assert "mokutil --import /var/lib/dkms/mok.pub" in problems[0]
    req.secure_boot_signing = True
    assert resolve(req)[1] == []
    # Debian has no distribution-signed modules: the prebuilt-modules setting changes nothing there.
    req.secure_boot_signing, req.precompiled_modules = False, True
    assert [p.split("]")[0] for p in resolve(req)[1]] == ["[secure_boot"]


def test_secure_boot_on_ubuntu_takes_canonicals_signed_modules_from_its_archive():
    req = Request(
        gpus=gpus(H200),
        profile="auto",
        host_python="3.12",
        distribution="Ubuntu",
        distribution_version="24.04",
        secure_boot="enabled",
        sources={"driver": "distro", "cuda": "distro", "cudnn": "wheel"},
        cudnn_wheels=PINS,
    )
    _, problems = resolve(req)
    assert [p.split("]")[0] for p in problems] == ["[secure_boot"], problems
    assert "set nvidia_driver_precompiled_modules: true for Canonical's signed modules" in problems[0]
    req.precompiled_modules = True
    assert resolve(req)[1] == []
    # NVIDIA's repository builds its modules with DKMS: unsigned, whatever the setting says.
    req.sources = {"driver": "cuda_repo", "cuda": "distro", "cudnn": "wheel"}
    assert [p.split("]")[0] for p in resolve(req)[1]] == ["[secure_boot"]


def test_unknown_gpus_os_and_keys_are_each_named():
    _, problems = check("10de:ffff", profile="auto", os_release="18.04", colour="blue")
    assert any(
        p.startswith("[gpu] NVIDIA GPU 10de:ffff at 0000:00:00.0 is not in the compatibility matrix") for p in problems
    )
    assert any(p.startswith("[os] Ubuntu 18.04 is not a release the roles support") for p in problems)
    assert any(p.startswith("[stack] gpulab_stack has unknown keys ['colour']") for p in problems)


def test_an_unknown_profile_names_the_known_ones():
    _, problems = check(P100, profile="legacy-2019")
    assert problems[0].startswith("[profile] unknown profile 'legacy-2019'; known profiles: legacy-2018, modern")


# -- the module on a real sysfs capture -------------------------------------------------------------------------
def fake_host(root: Path) -> None:
    """sysfs of the captured 4x H200 VM, plus a GPU audio function, an NVSwitch and a NIC; two kernels; EFI with
    Secure Boot on."""
    devices = root / "sys/bus/pci/devices"
    (root / "sys/bus/pci/drivers/nvidia").mkdir(parents=True)
    address = None
    for line in CAPTURE.read_text().splitlines():
        if line.startswith("== "):
            address = line.split("/")[-1]
            (devices / address).mkdir(parents=True)
        elif "=" in line and address:
            key, value = line.split("=", 1)
            if key == "driver" and value:
                (devices / address / "driver").symlink_to(root / "sys/bus/pci/drivers" / value)
            elif key in ("vendor", "device", "class"):
                (devices / address / key).write_text(value + "\n")
    for address, vendor, device, klass in (
        ("0000:00:06.1", "0x10de", "0x22e8", "0x040300"),  # the GPU's audio function
        ("0000:05:00.0", "0x10de", "0x22a3", "0x068000"),  # NVSwitch
        ("0000:00:03.0", "0x8086", "0x10d3", "0x020000"),  # a NIC
    ):
        (devices / address).mkdir(parents=True)
        for key, value in (("vendor", vendor), ("device", device), ("class", klass)):
            (devices / address / key).write_text(value + "\n")
    (root / "boot").mkdir()
    for kernel in ("6.1.0-50-amd64", "6.1.0-9-amd64"):
        (root / "boot" / f"vmlinuz-{kernel}").write_text("")
    efivars = root / "sys/firmware/efi/efivars"
    efivars.mkdir(parents=True)
    (efivars / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c").write_bytes(b"\x06\x00\x00\x00\x01")


def run_module(args: str) -> dict:
    return run_adhoc("gpulab.provision.gpu_facts", args)


def test_gpu_facts_reads_the_captured_h200_machine(tmp_path):
    fake_host(tmp_path)
    result = run_module(f"root={tmp_path}")
    facts = result["ansible_facts"]
    assert [(g["address"], g["pci_id"], g["driver"]) for g in facts["gpulab_gpus"]] == [
        (f"0000:00:0{n}.0", "10de:2335", "nvidia") for n in (6, 7, 8, 9)
    ]
    assert facts["gpulab_nvswitches"] == ["0000:05:00.0"]
    assert facts["gpulab_secure_boot"] == "enabled"
    assert facts["gpulab_kernels"] == ["6.1.0-9-amd64", "6.1.0-50-amd64"]
    assert facts["gpulab_kernel"] == os.uname().release


def test_gpu_facts_takes_injected_ids_and_refuses_bad_ones(tmp_path):
    fake_host(tmp_path)
    facts = run_module(f"root={tmp_path} pci_ids=10de:15f8,10DE:15F8")["ansible_facts"]
    assert [(g["pci_id"], g["injected"]) for g in facts["gpulab_gpus"]] == [("10de:15f8", True)] * 2
    failed = run_module(f"root={tmp_path} pci_ids=15f8")
    assert failed["failed"] is True
    assert "pci_ids ['15f8'] are not NVIDIA PCI ids; write them like '10de:15f8'" in failed["msg"]


def run_adhoc(module: str, args: str) -> dict:
    """One module on localhost through `ansible` with the json callback; the host's result."""
    require_ansible("ansible")
    env = ansible_env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json")
    argv = [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-m", module, "-a", args]
    argv += ["-e", f"ansible_python_interpreter={sys.executable}"]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_the_stack_check_action_plans_from_the_sources_it_is_given():
    host = {
        "gpus": gpus(H200),
        "distribution": "Debian",
        "distribution_version": "12",
        "host_python": "3.11",
        "cudnn_wheels": PINS,
        "sources": {"driver": "distro"},
    }
    refused = run_adhoc("gpulab.provision.stack_check", json.dumps(host))
    assert refused["failed"] is True and refused["changed"] is False
    assert refused["msg"].startswith("pre-flight refused this host's stack (1 problem(s)); nothing was changed:\n")
    assert "[driver] Debian 12's archive has no driver for NVIDIA H200" in refused["msg"]
    assert "Fix: set nvidia_driver_source: cuda_repo (NVIDIA's repository or a mirror of it)" in refused["msg"]
    host["sources"] = {"driver": "cuda_repo", "cuda": "cuda_repo"}  # cudnn: the default, wheel
    planned = run_adhoc("gpulab.provision.stack_check", json.dumps(host))
    target = planned["ansible_facts"]["gpulab_target_stack"]
    assert (target["driver"], target["cuda"], target["cudnn_by_cuda"]) == ("595.71.05", ["13.2"], {"13.2": "9.20"})
    assert target["sources"] == {"driver": "cuda_repo", "cuda": "cuda_repo", "cudnn": "wheel"}
    assert planned["msg"].endswith("; from driver cuda_repo, cuda cuda_repo, cudnn wheel")


def test_matrix_lookup_answers_from_the_matrix():
    msg = run_adhoc("ansible.builtin.debug", "msg={{ lookup('gpulab.provision.matrix', 'min_driver', '12.9') }}")
    assert msg["msg"] == "575.51.03"
    legacy = run_adhoc("ansible.builtin.debug", "msg={{ lookup('gpulab.provision.matrix', 'profile', 'legacy-2018') }}")
    assert legacy["msg"]["cuda"] == "9.0,10.0" and legacy["msg"]["driver"] == "410.79"
    branch = run_adhoc("ansible.builtin.debug", "msg={{ lookup('gpulab.provision.matrix', 'driver_branch', '535') }}")
    assert branch["msg"]["open_kernel_modules"] == "Turing"
    bad = run_adhoc("ansible.builtin.debug", "msg={{ lookup('gpulab.provision.matrix', 'gpu', 'P999') }}")
    assert bad["failed"] is True
    assert "gpulab.provision.matrix: GPU 'P999' is not in the compatibility matrix" in bad["msg"]


# -- refusals: real runs, nothing changed -----------------------------------------------------------------------
REFUSALS = {
    "p100-cuda13": (
        {"gpulab_preflight_gpu_pci_ids": [P100], "gpulab_stack": {"driver": "580.95.05", "cuda": "13.0"}},
        "[cuda] CUDA 13.0 supports compute capability 7.5–12.1; Tesla P100-PCIE-16GB (Pascal) is 6.0. "
        "Fix: use CUDA 12.9 or older (the newest for Pascal).",
    ),
    "old-driver": (
        {"gpulab_preflight_gpu_pci_ids": [P100], "gpulab_stack": {"driver": "470.256.02", "cuda": "12.2"}},
        "[driver] driver 470.256.02 is older than CUDA 12.2 requires (>= 535.54.03). "
        "Fix: install driver >= 535.54.03 (R535), e.g. 535.230.02, or use an older CUDA.",
    ),
    "volta-cudnn917": (
        {
            "gpulab_preflight_gpu_pci_ids": [V100],
            "gpulab_stack": {"driver": "580.95.05", "cuda": "12.9", "cudnn": "9.17"},
        },
        "[cudnn] cuDNN 9.17 has no kernels for CUDA 12.9 on compute capability 7.0 (Tesla V100-SXM2-32GB). "
        "Fix: use cuDNN 9.10, the newest built for CUDA 12.9 on compute capability 7.0.",
    ),
    "pascal-open": (
        {
            "gpulab_preflight_gpu_pci_ids": [P100],
            "gpulab_stack": {"driver": "580.95.05", "cuda": "12.9", "kernel_modules": "open"},
        },
        "[kernel_modules] the open kernel modules of driver R580 do not drive Tesla P100-PCIE-16GB (Pascal); they "
        "need Turing or newer. Fix: set gpulab_stack.kernel_modules to 'proprietary' (or 'auto', which picks it for "
        "this GPU).",
    ),
    "tf112-py311": (
        {
            "gpulab_preflight_gpu_pci_ids": [P100],
            "gpulab_stack": {"driver": "410.79", "cuda": "9.0", "tensorflow": "1.12"},
        },
        "[python] TensorFlow 1.12 supports Python 2.7–3.6, not 3.11. Fix: use Python 3.6 (tensorflow), or "
        "TensorFlow 2.21.",
    ),
}


@pytest.mark.slow
def test_incoherent_requests_are_refused_before_any_change(debian_root, tmp_path):
    require_ansible()
    hosts = {
        name: {"root": debian_root, "gpulab_profile": "none", **hostvars} for name, (hostvars, _) in REFUSALS.items()
    }
    # A coherent stack whose role inputs are not: the roles' input checks run before the first change.
    hosts["runfile-no-sha"] = {
        "root": debian_root,
        "gpulab_preflight_gpu_pci_ids": [P100],
        "gpulab_profile": "auto",
        "nvidia_driver_source": "runfile",
        "nvidia_driver_runfile": "https://example.invalid/NVIDIA-Linux-x86_64-580.95.05.run",
    }
    # A host without a GPU (this machine's sysfs shows through the chroot): the GPU roles skip with one line.
    hosts["no-gpu"] = {"root": debian_root}
    inventory = chroot_inventory(tmp_path / "inventory", hosts)
    before = tree_state(debian_root)

    run = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)

    assert run.rc == 2, run.explain()
    recap = run.recap()
    for name, (_, reason) in REFUSALS.items():
        assert recap[name]["failed"] == 1 and recap[name]["changed"] == 0, run.explain()
        block = run.output.split(f"fatal: [{name}]: FAILED!", 1)[1].split("\nfatal: [", 1)[0].split("\nTASK [", 1)[0]
        assert "pre-flight refused this host's stack" in block and "nothing was changed" in block
        assert reason in " ".join(block.split()), block
    assert recap["runfile-no-sha"]["failed"] == 1 and recap["runfile-no-sha"]["changed"] == 0
    block = run.output.split("fatal: [runfile-no-sha]: FAILED!", 1)[1].split("\nTASK [", 1)[0]
    assert "nvidia_driver_source is runfile: set nvidia_driver_runfile" in " ".join(block.split())
    assert "and nvidia_driver_runfile_sha256 (its sha256" in " ".join(block.split())
    assert recap["no-gpu"]["failed"] == 0 and recap["no-gpu"]["changed"] == 0
    assert run.output.count("No NVIDIA GPU on no-gpu") == 1
    # Refused before anything ran: the only role tasks that ran are runfile-no-sha's input checks.
    role_tasks = {line for line in run.output.splitlines() if line.startswith("TASK [nvidia_driver")}
    # Only the role's input checks ran (and the fact that settles source=auto from the pre-flight's plan).
    settled = "TASK [nvidia_driver : Take the driver source the pre-flight chose]"
    assert role_tasks == {line for line in role_tasks if "Check" in line or line.startswith(settled)}, role_tasks
    assert tree_state(debian_root) == before
