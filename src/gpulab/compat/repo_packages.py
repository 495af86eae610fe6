"""The package names NVIDIA's apt repositories give a driver branch (matrix.yml, nvidia_repository_packages): the one
place the nvidia_driver role takes them from (filter gpulab.provision.nvidia_repo_packages)."""

from __future__ import annotations

from gpulab.compat.data import RepoNaming, load_matrix

MODULES = ("open", "proprietary")


def naming(branch: int) -> RepoNaming:
    """The naming that applies to a branch: the newest entry whose first branch is not after it."""
    entries = sorted(load_matrix().repo_packages, key=lambda n: int(n.first_branch[1:]))
    applies = [n for n in entries if int(n.first_branch[1:]) <= branch]
    if not applies:
        raise ValueError(
            f"NVIDIA's repository names no driver packages for R{branch}; the oldest branch gpulab installs from it "
            f"is {entries[0].first_branch}: request a newer driver (gpulab_stack.driver)."
        )
    return applies[-1]


def nvidia_repo_packages(branch: int | str, modules: str) -> dict[str, list[str]]:
    """pinning (installed first; empty before R580), driver, persistenced and fabricmanager package names."""
    text = str(branch).strip().upper().removeprefix("R").split(".")[0]
    if not text.isdigit():
        raise ValueError(f"driver branch {branch!r} is not a number like 580: set gpulab_stack.driver to e.g. 580.")
    if modules not in MODULES:
        raise ValueError(f"kernel modules {modules!r} must be open or proprietary (nvidia_driver_kernel_modules).")
    number = int(text)
    entry = naming(number)

    def name(template: str) -> str:
        return template.replace("{branch}", str(number))

    return {
        "pinning": [name(entry.pinning)] if entry.pinning else [],
        "driver": [name(entry.driver[modules])],
        "persistenced": [name(entry.persistenced)],
        "fabricmanager": [name(entry.fabricmanager)],
    }
