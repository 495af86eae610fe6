"""Every piece of Ansible in the repository passes ansible-lint's production profile, and every playbook parses."""

from __future__ import annotations

import json
import re
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
    # Warnings fail too (.ansible-lint: strict): a rule ansible-lint only warns about is still a finding.
    assert re.search(r"\b0 failure\(s\), 0 warning\(s\)", proc.stderr + proc.stdout), proc.stdout[-8000:]


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


PLUGINS = REPO / "collections/ansible_collections/gpulab/provision/plugins"
_DOC_NAME = re.compile(r'^DOCUMENTATION = r?"""\n(?:module|name): (\w+)$', re.MULTILINE)


def documented_plugins() -> dict[str, list[str]]:
    """{ansible-doc type: [plugin names]} of every module, filter and lookup file in the collection."""
    found: dict[str, list[str]] = {}
    for folder, kind in (("modules", "module"), ("filter", "filter"), ("lookup", "lookup")):
        for path in sorted((PLUGINS / folder).glob("*.py")):
            match = _DOC_NAME.search(path.read_text())
            assert match, f"{path.relative_to(REPO)} has no DOCUMENTATION naming its plugin on its first line"
            found.setdefault(kind, []).append(f"gpulab.provision.{match.group(1)}")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["module", "filter", "lookup"])
def test_ansible_doc_parses_every_plugins_documentation(kind):
    """ansible-doc reads every plugin's DOCUMENTATION, EXAMPLES and RETURN (a YAML mistake there is silent until
    someone asks for the documentation)."""
    names = documented_plugins()[kind]
    proc = subprocess.run(
        [_tool("ansible-doc"), "-t", kind, "--json", *names],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "ERROR" not in proc.stderr, proc.stderr[-4000:]
    docs = json.loads(proc.stdout)
    assert sorted(docs) == sorted(names), proc.stderr[-4000:]
    for name, doc in docs.items():
        assert doc.get("doc", {}).get("description"), name
