"""nvidia_container_toolkit restarts a running dockerd only where its containers survive it (live-restore on in
daemon.json), where none runs, or where the operator says so; otherwise one line says the restart waits. The role's
decision (tasks/docker_restart.yml) runs on localhost with `docker` replaced by a stand-in listing two containers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from playbook import ansible_playbook
from provision.inventory import require_ansible


def decide(tmp_path: Path, running: int, daemon: dict, **hostvars: object):
    require_ansible()
    tmp_path.mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text("#!/bin/sh\n" + "".join(f"echo {i:012x}\n" for i in range(1, running + 1)))
    docker.chmod(0o755)
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}})
    )
    report = tmp_path / "restart.json"
    play = [
        {
            "name": "dockerd's restart",
            "hosts": "localhost",
            "gather_facts": False,
            "environment": {"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"},
            "vars": {"nvidia_container_toolkit_daemon_json_merged": daemon, **hostvars},
            "tasks": [
                {
                    "ansible.builtin.include_role": {
                        "name": "nvidia_container_toolkit",
                        "tasks_from": "docker_restart.yml",
                    }
                },
                {
                    "ansible.builtin.copy": {
                        "content": "{{ nvidia_container_toolkit_docker_restart | to_json }}",
                        "dest": str(report),
                        "mode": "0644",
                    }
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    extra = json.dumps({"ansible_python_interpreter": sys.executable})
    run = ansible_playbook(tmp_path / "play.yml", tmp_path / "hosts.yml", "-e", extra, timeout=300)
    assert run.rc == 0, run.explain()
    return json.loads(report.read_text()), " ".join(run.output.split())


NVIDIA = {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "args": []}}}


@pytest.mark.parametrize(
    ("running", "daemon", "hostvars", "restart"),
    [
        (2, NVIDIA, {}, False),  # containers run, live-restore off: they would stop
        (2, {**NVIDIA, "live-restore": True}, {}, True),  # they survive the restart
        (0, NVIDIA, {}, True),  # nothing to stop
        (2, NVIDIA, {"nvidia_container_toolkit_restart": "always"}, True),
        (0, {**NVIDIA, "live-restore": True}, {"nvidia_container_toolkit_restart": "never"}, False),
    ],
    ids=["running", "live-restore", "idle", "always", "never"],
)
def test_dockerd_is_restarted_only_where_its_containers_survive(tmp_path, running, daemon, hostvars, restart):
    decided, said = decide(tmp_path / "run", running, daemon, **hostvars)
    assert decided is restart
    waits = "Docker now has the nvidia runtime in its configuration, but dockerd was not restarted:"
    assert (waits in said) is (not restart)
    if running and not restart and not hostvars:
        assert "2 container(s) run and live-restore is off in /etc/docker/daemon.json" in said
