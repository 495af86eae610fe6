"""The roles by package family: what only apt and dpkg can do lives in roles/<role>/tasks/family/Debian.yml (or,
for a role with several family steps, in roles/<role>/tasks/family/Debian/), and every other task file is the same
on every family. A new family adds its own file (or folder) per role; no apt-shaped task creeps back elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest
import yaml

from playbook import REPO

ROLES = REPO / "roles"
APT_MODULES = {"apt", "apt_key", "apt_repository", "dpkg_selections", "deb822_repository"}
# What ansible.builtin.package cannot pass on to every family's package manager.
APT_ONLY_ARGS = {
    "allow_change_held_packages",
    "allow_downgrade",
    "cache_valid_time",
    "deb",
    "install_recommends",
    "policy_rc_d",
    "update_cache",
}
FAMILY_INCLUDE = re.compile(r"family/|'family/'")


def task_files() -> list[Path]:
    return sorted(p for p in ROLES.glob("*/*/**/*.yml") if p.relative_to(ROLES).parts[1] in ("tasks", "handlers"))


def is_family(path: Path, family: str = "Debian") -> bool:
    parts = path.relative_to(ROLES).parts  # role, tasks, family, Debian.yml | Debian/<step>.yml
    return parts[1:3] == ("tasks", "family") and (parts[3] == f"{family}.yml" or parts[3] == family)


def tasks_of(items: list | None):
    """Every task of a task list, blocks (and their rescue and always) opened."""
    for task in items or []:
        if not isinstance(task, dict):
            continue
        if "block" in task:
            for key in ("block", "rescue", "always"):
                yield from tasks_of(task.get(key))
        else:
            yield task


def module_of(task: dict) -> str:
    for key in task:
        name = key.rsplit(".", 1)[-1]
        builtin = key.startswith(("ansible.builtin.", "ansible.legacy.")) or "." not in key
        if builtin and (name in APT_MODULES or name in {"package", "include_tasks", "import_tasks"}):
            return name
    return ""


def test_apt_and_dpkg_modules_are_used_only_in_the_debian_family_files():
    outside = []
    for path in task_files():
        for task in tasks_of(yaml.safe_load(path.read_text())):
            if module_of(task) in APT_MODULES and not is_family(path):
                outside.append(f"{path.relative_to(REPO)}: {task.get('name')}")
    assert outside == [], "apt-family modules outside roles/*/tasks/family/Debian*: " + "; ".join(outside)


def test_the_debian_family_files_are_where_apt_is():
    families = [p for p in task_files() if is_family(p)]
    using_apt = {p for p in families for t in tasks_of(yaml.safe_load(p.read_text())) if module_of(t) in APT_MODULES}
    assert len(using_apt) >= 10, using_apt  # not an empty rule: the installs, pins and holds are there
    roles = {p.relative_to(ROLES).parts[0] for p in using_apt}
    expected = {"cuda_toolkit", "cudnn", "nvidia_container_toolkit", "nvidia_cuda_repo", "nvidia_dcgm", "nvidia_driver"}
    assert roles == expected


def test_family_neutral_installs_pass_nothing_only_apt_understands():
    """ansible.builtin.package hands its arguments to the host's package manager: apt's own options stay in the
    Debian family files (the recommended/weak dependency choice is module_defaults, one line per manager)."""
    installs = []
    for path in task_files():
        for task in tasks_of(yaml.safe_load(path.read_text())):
            if module_of(task) == "package":
                installs.append(path)
                args = next(v for k, v in task.items() if k.endswith("package"))
                assert not APT_ONLY_ARGS & set(args), f"{path.relative_to(REPO)}: {task['name']}"
                defaults = task.get("module_defaults", {})
                assert set(defaults) <= {"ansible.builtin.apt", "ansible.builtin.dnf"}, task["name"]
    assert len(installs) >= 3


@pytest.mark.parametrize("distribution", ["Debian", "Ubuntu"])
def test_every_family_step_a_role_includes_exists_for_the_debian_family(distribution):
    """The generic task files name their family steps as family/<os_family>...: each resolves to a Debian file, so
    the list of files a new family provides is the list of these includes."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    facts = {"ansible_facts": {"os_family": "Debian", "distribution": distribution}}
    sources = {"nvidia_driver_source": "distro", "cuda_toolkit_source": "cuda_repo"}
    seen = set()
    for path in task_files():
        if is_family(path):
            continue
        role = path.relative_to(ROLES).parts[0]
        for task in tasks_of(yaml.safe_load(path.read_text())):
            if module_of(task) != "include_tasks":
                continue
            spec = next(v for k, v in task.items() if k.endswith("include_tasks"))
            file = spec["file"] if isinstance(spec, dict) else spec
            if not FAMILY_INCLUDE.search(file):
                continue
            rendered = env.from_string(file).render(**facts, **sources).strip()
            assert (ROLES / role / "tasks" / rendered).is_file(), f"{path.relative_to(REPO)}: {rendered}"
            seen.add(f"{role}/{rendered}")
    assert len(seen) >= 12, sorted(seen)
