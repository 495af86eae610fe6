"""The driver's default source, auto: Debian's or Ubuntu's archive where its plan is a long-term branch still
supported (matrix.yml driver_lifecycle), NVIDIA's repository where the archive's branch is past its end of life or not
long-term (Debian 11, 12 and 13 package R535 and R550 only) or where the archive has no driver for the plan; the
pre-flight says which in one line, and an explicit nvidia_driver_source is taken as given."""

from __future__ import annotations

import subprocess
import sys

import yaml

from gpulab.compat.data import cudnn_wheel_pins
from gpulab.compat.resolve import Request, resolve
from playbook import REPO

PINS = cudnn_wheel_pins()
P100, H100, H200 = "10de:15f8", "10de:2330", "10de:2335"
AFTER_R535 = "2026-11-26"  # R535's support ended in 2026-06
BEFORE_R535_END = "2026-05-01"


def plan(pci_id: str, os: str, today: str, **sources: str):
    family, release = ("Ubuntu", os[6:]) if os.startswith("ubuntu") else ("Debian", os[6:])
    return resolve(
        Request(
            gpus=[{"address": "0000:01:00.0", "pci_id": pci_id}],
            profile="auto",
            host_python="3.11",
            distribution=family,
            distribution_version=release,
            sources=sources,
            cudnn_wheels=PINS,
            today=today,
        )
    )


def test_a_hopper_on_debian_13_gets_the_long_term_branch_too():
    target, problems = plan(H100, "debian13", AFTER_R535)
    assert problems == [] and target["driver"] == "580.95.05" and target["kernel_modules"] == "open"


def test_debian_13_takes_r580_from_nvidia_s_repository_saying_why():
    target, problems = plan(P100, "debian13", AFTER_R535)
    assert problems == []
    assert target["sources"]["driver"] == "cuda_repo" and target["driver"] == "580.95.05"
    assert target["cuda"] == ["12.4"] and target["sources"]["cuda"] == "distro"  # Debian 13's own toolkit
    assert target["driver_source_note"] == (
        "the driver comes from NVIDIA's repository (R580, long-term, supported until 2028-06): Debian 13's archive "
        "would give R550, and R550 is not a long-term branch; set nvidia_driver_source: distro for it."
    )


def test_debian_12_keeps_its_archive_until_r535_ends_then_takes_nvidia_s_repository():
    before, problems = plan(P100, "debian12", BEFORE_R535_END)
    assert problems == [] and before["sources"]["driver"] == "distro" and before["driver"] == "535"
    assert before["driver_source_note"] is None
    after, problems = plan(P100, "debian12", AFTER_R535)
    assert problems == [] and after["sources"]["driver"] == "cuda_repo" and after["driver"] == "580.95.05"
    assert "R535's support ended in 2026-06" in after["driver_source_note"]


def test_an_archive_with_a_supported_long_term_branch_is_kept():
    target, problems = plan(P100, "ubuntu24.04", AFTER_R535)
    assert problems == [] and target["sources"]["driver"] == "distro" and target["driver"] == "580"
    assert target["driver_source_note"] is None


def test_a_gpu_the_archive_cannot_drive_gets_nvidia_s_repository_instead_of_a_refusal():
    target, problems = plan(H200, "debian12", AFTER_R535)
    # The long-term branch, not the repository's newest (R595, a production branch).
    assert problems == [] and target["sources"]["driver"] == "cuda_repo" and target["driver"] == "580.95.05"
    assert "Debian 12's archive has no driver for this plan" in target["driver_source_note"]


def test_an_explicit_source_is_taken_as_given():
    target, problems = plan(P100, "debian13", AFTER_R535, driver="distro")
    assert problems == [] and target["sources"]["driver"] == "distro" and target["driver"] == "550"
    assert target["driver_source_note"] is None
    _, problems = plan(H200, "debian12", AFTER_R535, driver="distro")
    assert len(problems) == 1 and "Fix: set nvidia_driver_source: cuda_repo" in problems[0]


def test_the_role_installs_from_the_source_the_pre_flight_chose():
    defaults = yaml.safe_load((REPO / "roles/nvidia_driver/defaults/main.yml").read_text())
    assert defaults["nvidia_driver_source"] == "auto"
    # Resolved first thing in the input checks, which gpu_nodes.yml's pre-flight play also runs on their own.
    first = yaml.safe_load((REPO / "roles/nvidia_driver/tasks/validate.yml").read_text())[0]
    assert first["when"] == "nvidia_driver_source == 'auto'"
    assert "gpulab_target_stack" in first["ansible.builtin.set_fact"]["nvidia_driver_source"]
    preflight = yaml.safe_load((REPO / "roles/gpulab_preflight/defaults/main.yml").read_text())
    assert preflight["gpulab_preflight_sources"]["driver"] == "{{ nvidia_driver_source | default('auto') }}"


def test_gpulab_matrix_resolve_shows_the_choice():
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "matrix", "resolve", "--os", "debian13", "--gpu", "P100", "--vars",
         str(REPO / "inventory/group_vars/all.yml")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "from driver cuda_repo, cuda distro, cudnn wheel" in proc.stdout
    assert "  note        the driver comes from NVIDIA's repository (R580" in proc.stdout
