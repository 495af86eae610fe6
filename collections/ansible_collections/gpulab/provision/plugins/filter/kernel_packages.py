"""`kernel_companions` and `kernel_packages`: which kernel headers meta packages (and, on Ubuntu, which prebuilt
NVIDIA module packages) a host needs so that every kernel apt brings later gets the NVIDIA module."""

from __future__ import annotations

import re
from typing import Any

DOCUMENTATION = r"""
name: kernel_packages
short_description: Headers meta packages and prebuilt NVIDIA module packages for a host's kernel flavours
description:
  - The input is C(dpkg-query -W -f='${Package} ${Version} ${Status}\n' 'linux-image-*'). Installed meta packages
    (C(linux-image-amd64), C(linux-image-cloud-amd64), C(linux-image-generic), C(linux-image-generic-hwe-22.04))
    name the kernel flavours apt follows; release packages (C(linux-image-6.1.0-50-amd64),
    C(linux-image-unsigned-6.8.0-45-generic)) and debug symbols are not flavours.
  - C(kernel_companions) lists the packages to ask apt about (C(apt-cache policy)) - C(linux-headers-<flavour>) for
    each flavour and, with I(module_prefix), C(<prefix><flavour>) and C(<prefix><kernel>) for each target kernel.
  - C(kernel_packages) reads that C(apt-cache policy) output and returns what to install.
version_added: "0.1.0"
author: gpulab
options:
  _input:
    description: The output of the C(dpkg-query) command above.
    type: str
    required: true
  policy:
    description: (kernel_packages) The output of C(apt-cache policy) over the names C(kernel_companions) listed.
    type: str
    required: true
  kernels:
    description: The target kernel releases (the ones installed under C(/boot)).
    type: list
    elements: str
    required: true
  module_prefix:
    description:
      - Name prefix of prebuilt module packages, C(linux-modules-nvidia-535-server-) on Ubuntu; empty for none.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: What to ask apt about
  ansible.builtin.set_fact:
    names: "{{ images.stdout | gpulab.provision.kernel_companions(gpulab_kernels, prefix) }}"
  vars:
    prefix: linux-modules-nvidia-535-server-

- name: What to install
  ansible.builtin.set_fact:
    plan: "{{ images.stdout | gpulab.provision.kernel_packages(policy.stdout, gpulab_kernels, prefix) }}"
  vars:
    prefix: linux-modules-nvidia-535-server-
"""

RETURN = r"""
_value:
  description:
    - kernel_companions - package names, in order.
    - >-
      kernel_packages - a dict - C(flavours) (C(amd64), C(generic-hwe-22.04)), C(images) (the installed
      C(linux-image-<flavour>) meta packages), C(headers) (the C(linux-headers-<flavour>) apt offers, as apt
      install arguments - C(=<version>) of the kernel meta package while not installed, when apt still has it),
      C(modules) (every prebuilt module package, or empty unless apt offers all of them), C(modules_missing)
      (those it lacks), C(headers_missing) (the target kernels' own C(linux-headers-<release>) apt cannot
      install), C(metas) (the meta packages a kernel hold covers - images, headers and the per-flavour
      module packages).
  type: raw
"""

# Release packages start with the version (6.1.0-50-amd64), Ubuntu's unsigned ones with "unsigned-<version>".
_RELEASE = re.compile(r"^(?:unsigned-)?[0-9]")
_INSTALLED = ("installed", "triggers-awaited", "triggers-pending")
# apt-cache policy: "name:", "  Installed: v|(none)", "  Candidate: v|(none)", "  Version table:", then per version
# " *** 6.1.176-1 500" (*** marks the installed one) followed by its sources "        500 http://... Packages".
_BLOCK = re.compile(r"^(\S+):$")
_FIELD = re.compile(r"^\s+(Installed|Candidate): (\S+)$")
_VERSION = re.compile(r"^\s+(?:\*\*\*\s+)?(\S+)\s+-?\d+$")
_SOURCE = re.compile(r"^\s+-?\d+\s+(\S+)")


def installed_images(dpkg_status: str) -> dict[str, str]:
    """Installed linux-image-* packages and their versions, from the dpkg-query output described above."""
    images = {}
    for line in (dpkg_status or "").splitlines():
        fields = line.split()
        # Not installed packages have no version: "linux-image-generic  unknown ok not-installed".
        if len(fields) == 5 and fields[0].startswith("linux-image-") and fields[-1] in _INSTALLED:
            images[fields[0]] = fields[1]
    return images


def kernel_flavours(dpkg_status: str) -> list[str]:
    """Flavours of the installed linux-image meta packages, in dpkg's order."""
    flavours = []
    for package in installed_images(dpkg_status):
        flavour = package.removeprefix("linux-image-")
        if not (_RELEASE.match(flavour) or flavour.endswith(("-dbg", "-dbgsym"))):
            flavours.append(flavour)
    return flavours


def apt_policy(policy: str) -> dict[str, dict[str, Any]]:
    """Per package of `apt-cache policy` output: installed and candidate version (None for "(none)") and the
    versions a repository offers (not only dpkg's status file). Names apt does not know print nothing."""
    packages: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    version = None
    for line in (policy or "").splitlines():
        if m := _BLOCK.match(line):
            current = packages.setdefault(m.group(1), {"installed": None, "candidate": None, "versions": []})
            version = None
        elif current is None:
            continue
        elif m := _FIELD.match(line):
            current[m.group(1).lower()] = None if m.group(2) == "(none)" else m.group(2)
        elif m := _VERSION.match(line):
            version = m.group(1)
        elif (
            (m := _SOURCE.match(line))
            and version
            and m.group(1) != "/var/lib/dpkg/status"
            and version not in current["versions"]
        ):
            current["versions"].append(version)
    return packages


def _module_names(flavours: list[str], kernels: list[str], module_prefix: str) -> list[str]:
    return [module_prefix + name for name in [*flavours, *kernels]] if module_prefix else []


def kernel_companions(dpkg_status: str, kernels: list[str], module_prefix: str = "") -> list[str]:
    flavours = kernel_flavours(dpkg_status)
    return (
        [f"linux-headers-{f}" for f in flavours]
        + [f"linux-headers-{k}" for k in kernels]
        + _module_names(flavours, list(kernels), module_prefix)
    )


def apt_offered(policy: str) -> list[str]:
    """Packages `apt-cache policy` shows with an installable candidate."""
    return [name for name, info in apt_policy(policy).items() if info["candidate"]]


def _headers_spec(flavour: str, image_version: str, known: dict[str, Any]) -> str:
    """The headers meta package as apt should install it. Its kernel meta package's version when it is not installed
    yet and the archive still has that version: apt upgrades the binaries of one source together, so the newest
    headers meta package would also bring the newest kernel now, which is the upgrades' job, not the driver's."""
    name = f"linux-headers-{flavour}"
    if known["installed"] is None and image_version in known["versions"]:
        return f"{name}={image_version}"
    return name


def kernel_packages(dpkg_status: str, policy: str, kernels: list[str], module_prefix: str = "") -> dict[str, Any]:
    images = installed_images(dpkg_status)
    flavours = kernel_flavours(dpkg_status)
    known = apt_policy(policy)
    offered = {name for name, info in known.items() if info["candidate"]}
    with_headers = [f for f in flavours if f"linux-headers-{f}" in offered]
    wanted = _module_names(flavours, list(kernels), module_prefix)
    missing = [name for name in wanted if name not in offered]
    # Prebuilt modules only when every kernel and flavour has them: a kernel without one would boot without a GPU.
    modules = [] if missing else wanted
    return {
        "flavours": flavours,
        "images": [f"linux-image-{f}" for f in flavours],
        "headers": [_headers_spec(f, images[f"linux-image-{f}"], known[f"linux-headers-{f}"]) for f in with_headers],
        "modules": modules,
        "modules_missing": missing,
        # Each target kernel's own headers apt cannot install (the archive drops an old ABI's once a newer is out).
        "headers_missing": [f"linux-headers-{k}" for k in kernels if f"linux-headers-{k}" not in offered],
        # What a kernel hold covers: the flavours' meta packages, never one kernel's packages.
        "metas": [f"linux-image-{f}" for f in flavours]
        + [f"linux-headers-{f}" for f in with_headers]
        + modules[: len(flavours)],
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"kernel_companions": kernel_companions, "kernel_packages": kernel_packages}
