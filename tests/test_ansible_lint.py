"""Every piece of Ansible in the repository passes ansible-lint's production profile, and every playbook parses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from playbook import REPO, ansible_env
from provision.inventory import require_ansible

BIN = Path(sys.executable).parent
PLAYBOOKS = sorted([REPO / "site.yml", *(REPO / "playbooks").glob("*.yml")])


def _tool(name: str) -> str:
    require_ansible(name)
    return str(BIN / name)


def test_ansible_lint_production_profile_is_clean():
    exe = _tool("ansible-lint")
    proc = subprocess.run(
        [exe, "--offline", "--profile", "production", "--nocolor"],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-4000:]
    assert "Passed" in proc.stderr + proc.stdout


@pytest.mark.parametrize("inventory", ["local.yml", "lab.example.yml"])
@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda p: str(p.relative_to(REPO)))
def test_playbook_syntax(playbook, inventory):
    exe = _tool("ansible-playbook")
    proc = subprocess.run(
        [exe, "--syntax-check", "-i", str(REPO / "inventory" / inventory), str(playbook)],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_site_imports_the_plays_in_flow_order():
    """kvm hosts, then the VMs they carry, then the GPU stack on every node, then the validation."""
    import yaml

    imports = [step["ansible.builtin.import_playbook"] for step in yaml.safe_load((REPO / "site.yml").read_text())]
    flow = ["playbooks/kvm_hosts.yml", "playbooks/vms.yml", "playbooks/gpu_nodes.yml", "playbooks/validate.yml"]
    assert imports == [p for p in flow if (REPO / p).exists()]
    assert "playbooks/gpu_nodes.yml" in imports
