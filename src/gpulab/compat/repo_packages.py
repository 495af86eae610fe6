"""The package names NVIDIA's apt repositories give a driver branch (matrix.yml, nvidia_repository_packages): the one
place the nvidia_driver role takes them from (filter gpulab.provision.nvidia_repo_packages)."""

from __future__ import annotations

from gpulab.compat.data import RepoNaming, load_matrix
from gpulab.errors import GpulabError
from gpulab.names import DriverBranch

MODULES = ("open", "proprietary")


def naming(branch: int) -> RepoNaming:
    """The naming that applies to a branch: the newest entry whose first branch is not after it."""
    entries = sorted(load_matrix().repo_packages, key=lambda n: n.first_number)
    applies = [n for n in entries if n.first_number <= branch]
    if not applies:
        raise ValueError(
            f"NVIDIA's repository names no driver packages for R{branch}; the oldest branch gpulab installs from it "
            f"is {entries[0].first_branch}: request a newer driver (gpulab_stack.driver)."
        )
    return applies[-1]


def nvidia_repo_packages(branch: int | str, modules: str) -> dict[str, list[str]]:
    """pinning (installed first; empty before R580), driver, persistenced and fabricmanager package names."""
    try:
        number = DriverBranch.parse(branch).number
    except GpulabError:
        raise ValueError(
            f"driver branch {branch!r} is not a number like 580: set gpulab_stack.driver to e.g. 580."
        ) from None
    if modules not in MODULES:
        raise ValueError(f"kernel modules {modules!r} must be open or proprietary (nvidia_driver_kernel_modules).")
    entry = naming(number)

    def name(template: str) -> str:
        return template.replace("{branch}", str(number))

    return {
        "pinning": [name(entry.pinning)] if entry.pinning else [],
        "driver": [name(entry.driver[modules])],
        "persistenced": [name(entry.persistenced)],
        "fabricmanager": [name(entry.fabricmanager)],
    }
