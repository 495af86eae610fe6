"""The roles' defaults do not depend on where the inventory lives: an inventory outside inventory/ (no group_vars
next to it) still gets the pinned cuDNN wheels, because they come from the compatibility matrix; an inventory's own
cudnn_wheels replaces them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from gpulab.compat.data import cudnn_wheel_pins, load_matrix
from playbook import REPO, ansible_playbook
from provision.inventory import require_ansible


def test_the_matrix_pins_a_wheel_for_every_cudnn_the_pre_flight_can_pick():
    pins = cudnn_wheel_pins()
    assert {"9.10-cu11", "9.10-cu12", "9.20-cu13"} <= set(pins)
    for key, pin in pins.items():
        assert pin["version"].startswith(key.split("-")[0] + "."), key
        assert pin["path"].startswith("packages/") and f"cu{key.split('-cu')[1]}-{pin['version']}" in pin["path"]
    assert all(w.source.startswith("https://pypi.org/project/nvidia-cudnn-cu") for w in load_matrix().cudnn_wheels)


def test_an_inventory_elsewhere_gets_the_pins_and_its_own_replace_them(tmp_path: Path) -> None:
    require_ansible()
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}})
    )
    copy = {"content": "{{ value | to_json }}", "mode": "0644"}
    play = [
        {
            "name": "the roles' defaults, read as Ansible reads them",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {"ansible.builtin.include_vars": {"file": str(REPO / "roles/gpulab_preflight/defaults/main.yml")}},
                {
                    "ansible.builtin.copy": {**copy, "dest": str(tmp_path / "preflight.json")},
                    "vars": {"value": "{{ gpulab_preflight_cudnn_wheels }}"},
                },
                {"ansible.builtin.include_vars": {"file": str(REPO / "roles/cudnn/defaults/main.yml")}},
                {
                    "ansible.builtin.copy": {**copy, "dest": str(tmp_path / "cudnn.json")},
                    "vars": {"value": "{{ cudnn_wheels }}"},
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    extra = json.dumps({"ansible_python_interpreter": sys.executable})
    run = ansible_playbook(tmp_path / "play.yml", tmp_path / "hosts.yml", "-e", extra, timeout=300)
    assert run.rc == 0, run.explain()
    pins = cudnn_wheel_pins()
    assert json.loads((tmp_path / "preflight.json").read_text()) == pins
    assert json.loads((tmp_path / "cudnn.json").read_text()) == pins
    own = {"9.10-cu12": pins["9.10-cu12"]}
    extra = json.dumps({"ansible_python_interpreter": sys.executable, "cudnn_wheels": own})
    run = ansible_playbook(tmp_path / "play.yml", tmp_path / "hosts.yml", "-e", extra, timeout=300)
    assert run.rc == 0, run.explain()
    assert json.loads((tmp_path / "preflight.json").read_text()) == own


def test_gpulab_matrix_resolve_without_an_inventory_uses_the_pins():
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "matrix", "resolve", "--os", "debian12", "--gpu", "P100", "--json"],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["target"]["cudnn_by_cuda"] == {"11.8": "9.10"}
