"""roles/nvidia_container_toolkit run for real in a Debian 12 root against a signed local mirror of NVIDIA's repository.

NVIDIA's repository cannot be reached from CI, so the mirror (tests/provision/apt_mirror.py) carries stand-ins under
NVIDIA's package names and version: nvidia-ctk reports its release, the runtime, hook and CLI sit at their paths
and the nvidia-cdi-refresh units ship as in 1.18. Docker and containerd are Debian's own packages, installed in the
root with a user's daemon.json and config.toml; the merged configuration is read back with `containerd config dump`.
No daemon starts in the root and no NVIDIA module is loaded, so nothing is restarted and the CDI spec is deferred;
a last pair of runs points the role at a stand-in module version to generate it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from playbook import ansible_playbook
from provision.apt_mirror import (
    build_mirror,
    container_toolkit_stand_ins,
    control_of,
    cudnn_from_wheel,
    downloaded_debs,
    renamed,
    toolkit_stand_in,
)
from provision.files import cached_pypi_file, pinned_wheel, serve, tree_state, without_apt_caches
from provision.inventory import chroot_inventory, require_ansible
from test_apt_mirror import GPU_STACK_ONLY, driver_version, host_vars

VERSION = "1.18.2-1"  # the role's default
PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)

USER_DAEMON_JSON = {
    "log-driver": "json-file",
    "log-opts": {"max-size": "10m"},
    "runtimes": {"crun": {"path": "/usr/bin/crun"}},
}
# A user's CRI settings, written into Debian's own config.toml: containerd must keep them beside the nvidia runtime.
CRI_TABLE = '  [plugins."io.containerd.grpc.v1.cri"]\n'
USER_SANDBOX = '    sandbox_image = "registry.example.org/pause:3.9"\n'
USER_RUNC = '\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n  SystemdCgroup = true\n'


def chroot(root: Path, *cmd: str) -> str:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    proc = subprocess.run(["chroot", str(root), *cmd], capture_output=True, text=True, check=False, env=env)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture
def mirror(debian_root, tmp_path):
    sources = downloaded_debs(debian_root, ["nvidia-smi"])
    debian_version = control_of(sources["nvidia-smi"])["Version"]
    wheel = pinned_wheel("9.10-cu11")
    wheel_file = cached_pypi_file(wheel["path"], wheel["sha256"])
    work, out = tmp_path / "work", tmp_path / "debs"
    work.mkdir()
    out.mkdir()
    debs = [
        renamed(sources["nvidia-smi"], work, out, "cuda-drivers-535", debian_version.split("-")[0] + "-1"),
        toolkit_stand_in(work, out, "12.2", "12.2.140-1"),
        *cudnn_from_wheel(wheel_file, work, out, "12", wheel["version"]),
        *container_toolkit_stand_ins(work, out, VERSION),
    ]
    return build_mirror(tmp_path / "mirror", debs)


def containers_vars(root: Path, url: str, mirror, **extra: object) -> dict:
    return {**host_vars(root, url, mirror), "gpulab_containers": True, **extra}


@pytest.mark.slow
def test_a_daemon_json_that_is_not_json_is_refused_before_any_change(debian_root, mirror, tmp_path):
    require_ansible()
    root = debian_root
    daemon_json = root / "etc/docker/daemon.json"
    daemon_json.parent.mkdir(parents=True)
    daemon_json.write_text('{"log-driver": "json-file",\n')  # cut short
    with serve(mirror.served) as url:
        inventory = chroot_inventory(
            tmp_path / "inventory",
            {"image": containers_vars(root, url, mirror, nvidia_container_toolkit_runtimes=["docker"])},
        )
        run = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
    assert run.rc == 2, run.explain()
    said = " ".join(run.output.split())
    assert "/etc/docker/daemon.json on image is not a JSON object" in said
    assert "python3 -m json.tool /etc/docker/daemon.json" in said
    # Refused in the input checks: the file is as it was and nothing was installed or configured.
    assert daemon_json.read_text() == '{"log-driver": "json-file",\n'
    assert not (root / "usr/share/keyrings/cuda-archive-keyring.gpg").exists()
    assert not (root / "etc/apt/preferences.d/gpulab-nvidia-driver").exists()
    assert not (root / "etc/apt/preferences.d/gpulab-nvidia-container-toolkit").exists()
    assert run.recap()["image"]["changed"] == 0

    # A config.toml without a version, which containerd 1.x reads as version 1, is refused the same way.
    config_toml = root / "etc/containerd/config.toml"
    config_toml.parent.mkdir(parents=True)
    config_toml.write_text('[plugins.cri]\n  sandbox_image = "registry.example.org/pause:3.9"\n')
    with serve(mirror.served) as url:
        inventory = chroot_inventory(
            tmp_path / "inventory-containerd",
            {"image": containers_vars(root, url, mirror, nvidia_container_toolkit_runtimes=["containerd"])},
        )
        run = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
    assert run.rc == 2, run.explain()
    said = " ".join(run.output.split())
    assert "/etc/containerd/config.toml on image: it declares no config version" in said
    assert "add `version = 2` at the top" in said
    assert config_toml.read_text() == '[plugins.cri]\n  sandbox_image = "registry.example.org/pause:3.9"\n'
    assert not (root / "usr/share/keyrings/cuda-archive-keyring.gpg").exists()


@pytest.mark.slow
def test_the_toolkit_installs_from_the_mirror_and_configures_docker_and_containerd(debian_root, mirror, tmp_path):
    require_ansible()
    root = debian_root
    chroot(root, "apt-get", "update", "-q")
    chroot(root, "apt-get", "install", "-y", "-q", "--no-install-recommends", "docker.io", "containerd")
    (root / "etc/docker").mkdir(exist_ok=True)
    (root / "etc/docker/daemon.json").write_text(json.dumps(USER_DAEMON_JSON, indent=2) + "\n")
    config_toml = root / "etc/containerd/config.toml"
    debian_default = config_toml.read_text()
    assert debian_default.count(CRI_TABLE) == 1, debian_default
    user_config = debian_default.replace(CRI_TABLE, CRI_TABLE + USER_SANDBOX) + USER_RUNC
    config_toml.write_text(user_config)

    # The last two runs have a driver loaded, so the spec is generated, and written only when it changes. No module
    # can be loaded in a root (its /sys is the CI machine's): they point the role's private path elsewhere.
    (root / "tmp/nvidia-module-version").write_text(f"{driver_version(mirror)}\n")
    loaded = ("-e", "_nvidia_container_toolkit_module_version=/tmp/nvidia-module-version")
    with serve(mirror.served) as url:
        inventory = chroot_inventory(tmp_path / "inventory", {"image": containers_vars(root, url, mirror)})
        # A dry run first: it passes and changes nothing, though the toolkit's repository is not there yet.
        before = tree_state(root)
        dry = ansible_playbook("playbooks/gpu_nodes.yml", inventory, "--check", "--diff", *GPU_STACK_ONLY)
        assert dry.rc == 0, dry.explain()
        assert without_apt_caches(tree_state(root)) == without_apt_caches(before)
        first = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
        second = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *GPU_STACK_ONLY)
        # The stack is in place and unchanged (second): the toolkit's own tag, as an operator reruns one role.
        toolkit_only = ("--tags", "nvidia_container_toolkit")
        generated = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *toolkit_only, *loaded)
        unchanged = ansible_playbook("playbooks/gpu_nodes.yml", inventory, *toolkit_only, *loaded)
    print(first.recap_text())
    print(second.recap_text())
    assert first.rc == 0, first.explain()
    assert second.rc == 0, second.explain()
    assert second.recap()["image"]["changed"] == 0, second.changed_tasks()

    # Every toolkit package at the pinned version, from the mirror, held; nvidia-ctk answers with the release.
    status = chroot(root, "dpkg-query", "-W", "-f=${Package} ${Version} ${Status}\n", *PACKAGES)
    assert sorted(status.splitlines()) == sorted(f"{p} {VERSION} hold ok installed" for p in PACKAGES)
    policy = chroot(root, "apt-cache", "policy", "libnvidia-container1")
    assert f"{url}/debian12/x86_64  Packages" in policy
    assert f"*** {VERSION} 1001" in policy  # the toolkit's pin, not the driver's libnvidia-* pin
    assert "version 1.18.2" in chroot(root, "nvidia-ctk", "--version")
    # The driver's pin still holds the driver's own packages.
    assert f"*** {driver_version(mirror)}-1 1001" in chroot(root, "apt-cache", "policy", "cuda-drivers-535")

    # Docker: the nvidia runtime beside the user's keys and runtimes, not the default runtime.
    daemon = json.loads((root / "etc/docker/daemon.json").read_text())
    assert daemon == {
        **USER_DAEMON_JSON,
        "runtimes": {
            "crun": {"path": "/usr/bin/crun"},
            "nvidia": {"path": "/usr/bin/nvidia-container-runtime", "args": []},
        },
    }

    # containerd reads the nvidia runtime and keeps the user's and Debian's settings.
    dump = chroot(root, "containerd", "--config", "/etc/containerd/config.toml", "config", "dump")
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in dump
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert 'sandbox_image = "registry.example.org/pause:3.9"' in dump
    assert "SystemdCgroup = true" in dump
    assert 'bin_dir = "/usr/lib/cni"' in dump  # Debian's own CNI path
    assert config_toml.read_text().startswith(user_config)

    # No module is loaded in a root: the CDI spec is deferred with one line, and the refresh units are enabled.
    assert (
        "CDI spec /etc/cdi/nvidia.yaml deferred on image: no NVIDIA driver is loaded yet (a reboot is pending); "
        "nvidia-cdi-refresh generates it once the driver loads." in " ".join(first.output.split())
    )
    assert (
        "CDI spec /etc/cdi/nvidia.yaml deferred on image: no NVIDIA driver is loaded yet (no /sys/module/nvidia/"
        "version); nvidia-cdi-refresh generates it once the driver loads." in " ".join(second.output.split())
    )
    assert ("nvidia_container_toolkit : Write /etc/cdi/nvidia.yaml", "image") not in first.changed_tasks()
    wants = root / "etc/systemd/system/multi-user.target.wants"
    assert (wants / "nvidia-cdi-refresh.path").is_symlink()
    assert (wants / "nvidia-cdi-refresh.service").is_symlink()
    # With the driver loaded, the spec.
    assert generated.rc == 0, generated.explain()
    assert generated.changed_tasks() == [
        ("nvidia_container_toolkit : Create the CDI directory", "image"),
        ("nvidia_container_toolkit : Write /etc/cdi/nvidia.yaml", "image"),
    ]
    assert (root / "etc/cdi/nvidia.yaml").read_text().startswith("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    assert "CDI spec /etc/cdi/nvidia.yaml deferred on" not in " ".join(generated.output.split())
    assert unchanged.rc == 0, unchanged.explain()
    assert unchanged.recap()["image"]["changed"] == 0, unchanged.changed_tasks()

    # The daemons are not running here, so nothing was restarted.
    assert not [task for task, _ in first.changed_tasks() if task.startswith("nvidia_container_toolkit : Restart")]
