"""`ansible-playbook site.yml` against a real Debian 12 guest booted under TCG on qemu:///system, over SSH, with
the repository's group_vars (as inventory/local.yml gets them): pre-flight, the no-GPU skip line, gpulab installed
into the profile's venv from a wheelhouse (the guest has no internet), the CPU validation run and its report fetched
to the controller. Then the configuration again (`--skip-tags gpulab_validation`: the validation is an action that
measures anew each time): nothing may change.

Both PLAY RECAPs are printed. Under TCG every module call costs seconds, so the guest installs gpulab alone
(dl_frameworks_frameworks: []); the frameworks' install path runs in test_role_dl_frameworks.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from gpulab.report.io import load_report
from playbook import REPO, ansible_env, ansible_playbook, gpulab_requirements, snapshot_source, wheelhouse

pytestmark = pytest.mark.slow


def guest_inventory(directory: Path, guest, **hostvars) -> Path:
    """The guest in gpu_nodes, beside the repository's group_vars (what inventory/local.yml's host gets)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "group_vars").symlink_to(REPO / "inventory" / "group_vars")
    host = {**guest.ansible_vars(), **hostvars}
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {guest.name: host}}}}}))
    return path


def test_site_yml_provisions_and_validates_a_guest_then_changes_nothing(booted_guest, tmp_path):
    guest = booted_guest
    source = snapshot_source(tmp_path / "source")
    reports = tmp_path / "reports"
    inventory = guest_inventory(
        tmp_path / "inventory",
        guest,
        dl_frameworks_frameworks=[],
        dl_frameworks_pip_args=["--no-compile"],  # byte-compiling every module under TCG costs more than it saves
        dl_frameworks_wheelhouse=str(wheelhouse(gpulab_requirements())),
        dl_frameworks_gpulab_source=str(source),
        dl_frameworks_constraints=str(source / "constraints.txt"),
        dl_frameworks_controller_cache=str(tmp_path / "cache"),
        gpulab_validate_controller_cache=str(tmp_path / "cache"),
        gpulab_validate_reports_dir=str(reports),
    )

    env = ansible_env(ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks")  # per-task times: TCG is slow
    started = time.monotonic()
    first = ansible_playbook("site.yml", inventory, timeout=1500, env=env)
    first_s = time.monotonic() - started
    started = time.monotonic()
    second = ansible_playbook("site.yml", inventory, "--skip-tags", "gpulab_validation", timeout=900, env=env)
    second_s = time.monotonic() - started
    print(f"\nsite.yml against {guest.name} (TCG): first run {first_s:.0f} s, second run {second_s:.0f} s")
    print("first run:\n" + first.recap_text())
    print("second run (--skip-tags gpulab_validation):\n" + second.recap_text())

    assert first.rc == 0, first.explain()
    flat = " ".join(first.output.split())
    assert f"No NVIDIA GPU on {guest.name}" in flat  # the pre-flight's one line; the GPU roles skip
    assert "no NVIDIA GPU: CPU builds, Python 3.11: no framework (gpulab and its base dependencies)" in flat
    venv = "/opt/gpulab/venvs/auto"  # group_vars: gpulab_venv of the auto profile
    assert guest.ssh(f"{venv}/bin/gpulab", "--version").stdout.startswith("gpulab ")
    assert "--no-index" in guest.ssh("cat", "/opt/gpulab/stage/auto/requirements.txt").stdout

    [path] = sorted((reports / guest.name).glob("report-*.json"))
    report = load_report(path)
    assert report.fingerprint["gpus"] == [] and report.tier == "quick"
    statuses = [c.status for c in report.checks]
    assert "pass" in statuses and "fail" not in statuses and "error" not in statuses
    assert path.with_suffix(".md").is_file() and path.with_suffix(".html").is_file()
    assert f"- {path}" in flat  # the one-line verdict names the report

    assert second.rc == 0, second.explain()
    assert second.recap()[guest.name]["changed"] == 0, second.changed_tasks()
    assert second.recap()[guest.name]["failed"] == 0
    assert len(list((reports / guest.name).glob("report-*.json"))) == 1
