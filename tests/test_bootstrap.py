"""./bootstrap.sh, the README's first command: with no action it runs `ansible-playbook site.yml` on this machine.

The real run provisions this (GPU-less) machine through inventory/local.yml, the default: the pre-flight's one line
skips the GPU roles, the frameworks' venv is built from a wheelhouse (this machine reaches no wheel index of
PyTorch's), the CPU validation runs and its report lands under reports/<host>/. Every path it writes is moved
under the test's directory by variables, so the host keeps no trace; the second run changes nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gpulab.report.io import load_report
from guest.prereq import missing
from playbook import REPO, Run, ansible_env, run_logged, torch_cpu_requirements, wheelhouse

BOOTSTRAP = REPO / "bootstrap.sh"
# Every ./bootstrap.sh of the suite installs the checkout into the same venv: one worker runs them, one at a time.
pytestmark = pytest.mark.xdist_group("bootstrap")


def bootstrap(*args: str, timeout: float = 1800) -> Run:
    """./bootstrap.sh with this test run's venv (its extras are installed: nothing is downloaded)."""
    env = ansible_env(GPULAB_VENV=sys.prefix)
    env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})  # the local target is this machine
    return run_logged([str(BOOTSTRAP), *args], env=env, timeout=timeout)


def test_an_unknown_action_is_refused_with_the_actions() -> None:
    run = bootstrap("frobnicate")
    assert run.rc == 2
    assert "unknown action 'frobnicate'" in run.output and "./bootstrap.sh validate" in run.output


def test_options_alone_go_to_site_yml_on_the_local_inventory() -> None:
    run = bootstrap("--list-hosts")
    assert run.rc == 0, run.explain()
    plays = [line.strip() for line in run.output.splitlines() if line.strip().startswith("play #")]
    assert [p.split(":")[0] for p in plays] == [
        "play #1 (kvm_hosts)",
        "play #2 (kvm_hosts)",
        "play #3 (gpu_nodes)",  # the pre-flight of every node
        "play #4 (gpu_nodes)",  # the provisioning, in batches
        "play #5 (gpu_nodes)",  # the validation
        "play #6 (localhost)",
    ]
    gpu_nodes = run.output.split("play #3 (gpu_nodes)", 1)[1].split("play #4", 1)[0]
    assert "hosts (1):" in gpu_nodes and "localhost" in gpu_nodes  # inventory/local.yml: this machine


def test_a_mistyped_inventory_stops_the_run() -> None:
    run = bootstrap("-i", "inventory/no-such-inventory.yml", "--list-hosts")
    assert run.rc != 0
    assert "Unable to parse" in run.output and "No inventory was parsed" in run.output


@pytest.mark.slow
def test_bootstrap_provisions_and_validates_this_machine_then_changes_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        missing("provisioning this machine needs root (the roles install packages; as a user bootstrap asks for sudo)")
    extra = [
        "-e", f"dl_frameworks_wheelhouse={wheelhouse(torch_cpu_requirements())}",
        "-e", f"gpulab_venv={tmp_path / 'venvs' / 'auto'}",
        "-e", f"dl_frameworks_stage={tmp_path / 'stage'}",
        "-e", f"dl_frameworks_controller_cache={tmp_path / 'cache'}",
        "-e", f"gpulab_validate_controller_cache={tmp_path / 'cache'}",
        "-e", f"gpulab_validate_home={tmp_path / 'home'}",
        "-e", f"gpulab_validate_reports_dir={tmp_path / 'reports'}",
    ]  # fmt: skip
    first = bootstrap(*extra)
    assert first.rc == 0, first.explain()
    flat = " ".join(first.output.split())
    assert "No NVIDIA GPU on localhost" in flat  # the pre-flight's one line; the GPU roles skip
    assert "no NVIDIA GPU: CPU builds" in flat and "torch==" in flat
    assert (tmp_path / "venvs" / "auto" / "bin" / "gpulab").is_file()

    [path] = sorted((tmp_path / "reports" / "localhost").glob("report-*.json"))
    report = load_report(path)
    assert report.fingerprint["gpus"] == [] and report.tier == "quick"
    statuses = [c.status for c in report.checks]
    assert "pass" in statuses and "fail" not in statuses and "error" not in statuses
    assert path.with_suffix(".html").is_file()

    second = bootstrap("--skip-tags", "gpulab_validation", *extra)
    assert second.rc == 0, second.explain()
    assert second.recap()["localhost"]["changed"] == 0, second.changed_tasks()
