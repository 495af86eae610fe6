"""The NVIDIA module (and the headers it builds against) is for the running and the newest installed kernel only; an
older kernel's headers may have left the archive, so asking for them would fail the run. The others are named."""

from __future__ import annotations

import sys

import yaml

from playbook import REPO

if str(REPO / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.gpulab.provision.plugins.filter.target_kernels import target_kernels

INSTALLED = ["6.1.0-9-amd64", "6.1.0-40-amd64", "6.1.0-50-amd64"]


def test_the_running_and_the_newest_kernel():
    assert target_kernels(INSTALLED, "6.1.0-40-amd64") == ["6.1.0-40-amd64", "6.1.0-50-amd64"]
    assert target_kernels(INSTALLED, "6.1.0-50-amd64") == ["6.1.0-50-amd64"]  # numeric order, not text order


def test_an_image_builds_for_its_newest_kernel_only():
    assert target_kernels(INSTALLED, "6.12.9-cloud-amd64", image=True) == ["6.1.0-50-amd64"]


def test_a_running_kernel_no_longer_installed_is_not_asked_for():
    assert target_kernels(INSTALLED[:1], "6.1.0-2-amd64") == ["6.1.0-9-amd64"]
    assert target_kernels([], "6.1.0-2-amd64") == ["6.1.0-2-amd64"]  # nothing under /boot: the running kernel


def test_the_role_builds_for_them_and_names_the_others():
    defaults = yaml.safe_load((REPO / "roles/nvidia_driver/defaults/main.yml").read_text())
    assert "gpulab.provision.target_kernels(" in defaults["nvidia_driver_kernels"]
    tasks = yaml.safe_load((REPO / "roles/nvidia_driver/tasks/driver.yml").read_text())
    names = [t["name"] for t in tasks]
    warn = names.index("Name the installed kernels the module is not built for")
    assert warn < names.index("Install the kernel headers for every target kernel and flavour")
    assert "difference(nvidia_driver_kernels)" in tasks[warn]["vars"]["_nvidia_driver_stale"]
