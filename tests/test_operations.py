"""Operating the playbooks on a fleet: a dry run on a fresh host, tags that select one role, rolling driver changes.

Real runs of playbooks/gpu_nodes.yml (and site.yml) against Debian 12 roots through community.general.chroot, a
Tesla P100 assumed (there is no GPU here).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from guest import image
from playbook import ansible_playbook, gpulab_requirements, snapshot_source, wheelhouse
from provision import drain_stand_ins, driver_stand_ins
from provision.apt_mirror import build_mirror, control_of, downloaded_debs, renamed
from provision.files import cache_root, cached_pypi_file, pinned_wheel, serve, tree_state, without_apt_caches
from provision.inventory import chroot_inventory, require_ansible
from test_apt_mirror import host_vars

P100 = "10de:15f8"
_ROLE_TASK = re.compile(r"^TASK \[(\w+) : ", re.MULTILINE)


def default_host(root: Path, tmp_path: Path, pypi: str) -> dict:
    """The default inventory's stack settings with a P100 assumed; gpulab alone in the venv, offline."""
    source = snapshot_source(tmp_path / "source")
    return {
        "root": root,
        "gpulab_preflight_gpu_pci_ids": [P100],
        "cudnn_wheel_base_url": pypi,
        "dl_frameworks_frameworks": [],
        "dl_frameworks_wheelhouse": str(wheelhouse(gpulab_requirements())),
        "dl_frameworks_gpulab_source": str(source),
        "dl_frameworks_constraints": str(source / "constraints.txt"),
        "dl_frameworks_controller_cache": str(tmp_path / "cache"),
        "gpulab_validate_reports_dir": str(tmp_path / "reports"),
        "gpulab_validate_controller_cache": str(tmp_path / "bundles"),
    }


@pytest.mark.slow
def test_a_dry_run_on_a_fresh_host_passes_and_changes_nothing(debian_root, tmp_path):
    require_ansible()
    wheel = pinned_wheel("9.10-cu11")
    cached_pypi_file(wheel["path"], wheel["sha256"])
    with serve(cache_root() / "pypi") as pypi:
        inventory = chroot_inventory(tmp_path / "inventory", {"image": default_host(debian_root, tmp_path, pypi)})
        before = tree_state(debian_root)
        dry = ansible_playbook("site.yml", inventory, "--check", "--diff")
        # A role's tag runs that role alone (after the pre-flight, which every role needs).
        tagged = {
            tag: ansible_playbook("playbooks/gpu_nodes.yml", inventory, "--check", "--tags", tag)
            for tag in ("cuda_toolkit", "dl_frameworks")
        }
    assert dry.rc == 0, dry.explain()
    ran = set(_ROLE_TASK.findall(dry.output))
    assert {"nvidia_driver", "cuda_toolkit", "cudnn", "dl_frameworks", "gpulab_validate"} <= ran, ran
    assert "--check: the validation (tier quick) would run on image now" in " ".join(dry.output.split())
    assert "+Pin: version 535.*" in dry.output  # --diff shows what the run would write
    for tag, run in tagged.items():
        assert run.rc == 0, run.explain()
        assert set(_ROLE_TASK.findall(run.output)) == {"gpulab_preflight", tag}, run.output
    assert without_apt_caches(tree_state(debian_root)) == without_apt_caches(before)


# The operator's own drain and resume (nvidia_driver_drain_tasks, nvidia_driver_resume_tasks), noted in the node's
# event log beside the stand-ins' own lines.
HOOK = """\
- name: The operator's {what} of {{{{ inventory_hostname }}}}
  ansible.builtin.shell: echo "$(date +%s.%N) hook {what}" >> /var/log/gpulab-events.log
  changed_when: true
"""


def _node_events(roots: dict[str, Path]) -> list[tuple[float, str, str]]:
    """(time, node, what) of every node's stand-ins, in the order they ran."""
    return sorted((t, name, what) for name, root in roots.items() for t, what in drain_stand_ins.events(root))


def _run_window(log: list[tuple[float, str, str]], since: float) -> dict[str, list[str]]:
    """What each node did since `since`, in order."""
    out: dict[str, list[str]] = {}
    for t, name, what in log:
        if t > since:
            out.setdefault(name, []).append(what)
    return out


@pytest.mark.slow
def test_a_fleet_rolls_in_batches_drained_by_slurm_and_kubernetes_and_a_busy_node_is_refused(debian_root, tmp_path):
    """Three working nodes, the default batches (one node, then two), the driver role alone (--tags nvidia_driver):
    node1 drained in Slurm, node2 in Kubernetes (its GPU pod evicted, which empties its census), node3 by the
    operator's own drain and resume tasks, with NVIDIA's runfile. node3 first alone: a process outside any drain holds
    its GPUs, so it is refused with one line naming it and nothing is installed. Then the roll: every node drained,
    its census taken, then its driver installed, one batch after the other - no node changes while a node of another
    batch is mid-change; in a root no reboot can happen, so every node stays drained. A second run (driver in place,
    nothing pending) returns each to service in the same order and drains nothing."""
    require_ansible()
    sources = downloaded_debs(debian_root, ["nvidia-smi"])
    version = control_of(sources["nvidia-smi"])["Version"].split("-")[0]
    for sub in ("work", "debs", "stand-ins"):
        (tmp_path / sub).mkdir()
    driver_deb = renamed(
        sources["nvidia-smi"], tmp_path / "work", tmp_path / "debs", "cuda-drivers-535", version + "-1"
    )
    mirror = build_mirror(tmp_path / "mirror", [driver_deb])
    runfile, runfile_sha = drain_stand_ins.runfile_installer(tmp_path, version)
    for what in ("drain", "resume"):
        (tmp_path / f"{what}.yml").write_text(HOOK.format(what=what))
    with image.fresh_root(tmp_path / "root2") as root2, image.fresh_root(tmp_path / "root3") as root3:
        roots = {"node1": debian_root, "node2": root2, "node3": root3}
        drain_stand_ins.working_node(debian_root, slurm_jobs="4711 alice train RUNNING\n")
        drain_stand_ins.working_node(root2, census=drain_stand_ins.BUSY, gpu_pod=True)
        drain_stand_ins.working_node(root3, census=drain_stand_ins.BUSY)
        # What NVIDIA's installer builds with, already there (empty stand-ins: no compiler runs here).
        build = {p: "99.0" for p in ("dkms", "build-essential", "pkg-config", "libglvnd-dev")}
        driver_stand_ins.driver_packages(root3, tmp_path / "stand-ins", build)
        with serve(mirror.served) as url:
            common = {"nvidia_driver_drain_poll": 1}
            hosts = {
                "node1": {**host_vars(debian_root, url, mirror), **common, "nvidia_driver_drain": "slurm"},
                "node2": {**host_vars(root2, url, mirror), **common, "nvidia_driver_drain": "kubernetes"},
                "node3": {
                    **host_vars(root3, url, mirror),
                    **common,
                    "nvidia_driver_drain_tasks": str(tmp_path / "drain.yml"),
                    "nvidia_driver_resume_tasks": str(tmp_path / "resume.yml"),
                    "nvidia_driver_source": "runfile",
                    "nvidia_driver_runfile": str(runfile),
                    "nvidia_driver_runfile_sha256": runfile_sha,
                },
            }
            inventory = chroot_inventory(tmp_path / "inventory", hosts)
            refused = ansible_playbook(
                "playbooks/gpu_nodes.yml", inventory, "--tags", "nvidia_driver", "--limit", "node3"
            )
            assert refused.rc == 2, refused.explain()
            fatal = " ".join(refused.output.split("fatal: [node3]: FAILED!", 1)[1].split("\n\n", 1)[0].split())
            assert fatal.count("pid 37305") == 1, fatal  # one line (the callback folds it), the process named once
            assert (
                "node3 is busy, so its NVIDIA driver was not changed (pid 37305 python (compute) on GPUs 0, 1, 2, 3, "
                "4, 5, 6, 7: 240.4 GiB, read from /usr/local/bin/nvidia-smi -q -x); it stays drained: stop that work "
                "(the drain did not end it), or set nvidia_driver_allow_busy: true to change it anyway."
            ) in fatal
            assert [w for _, w in drain_stand_ins.events(root3)] == ["hook drain", "nvidia-smi -q -x"]
            # The stray process ended.
            (root3 / drain_stand_ins.STATE / "census.xml").write_text(drain_stand_ins.IDLE.read_text())

            start = _node_events(roots)[-1][0]
            roll = ansible_playbook("playbooks/gpu_nodes.yml", inventory, "--tags", "nvidia_driver")
            assert roll.rc == 0, roll.explain()
            log = _node_events(roots)
            did = _run_window(log, start)
            drained = {
                "node1": ["scontrol update nodename=node1 state=drain reason=gpulab NVIDIA driver " + version]
                + ["squeue --noheader --nodelist=node1 --format=%A %u %j %T"] * 2,
                "node2": [
                    "kubectl cordon node2",
                    "kubectl get pods --all-namespaces --field-selector=spec.nodeName=node2 --output=json",
                    "kubectl create --raw /api/v1/namespaces/ml/pods/train/eviction -f -",
                    "kubectl get pods --all-namespaces --field-selector=spec.nodeName=node2 --output=json",
                ],
                "node3": ["hook drain"],
            }
            for name, steps in drained.items():
                # Drain first, then the census, then the driver: before the drain only the repository's own set-up
                # is installed (its key, gpg to check it), which touches nothing running.
                drained_at = did[name].index(steps[0])
                early = [e for e in did[name][:drained_at] if re.search(r"nvidia|cuda-drivers|runfile", e)]
                assert not early, (name, did[name])
                done = did[name][drained_at:]
                n = len(steps)
                assert done[:n] == steps, (name, did[name])
                assert done[n] == "nvidia-smi -q -x", (name, did[name])
                installs = done[n + 1 :]
                expected = "runfile" if name == "node3" else "install cuda-drivers-535"
                assert installs and all(e.startswith(("install ", "runfile")) for e in installs), (name, did[name])
                assert any(e.startswith(expected) for e in installs), (name, installs)
            evicted = json.loads((root2 / drain_stand_ins.STATE / "evictions.json").read_text())
            assert evicted == {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "train", "namespace": "ml"},
            }
            # Batches: node1 alone, then node2 and node3; no node of the second batch is touched before node1 is done.
            first = [t for t, name, _ in log if t > start and name == "node1"]
            second = [t for t, name, _ in log if t > start and name != "node1"]
            assert max(first) < min(second)
            assert set(_ROLE_TASK.findall(roll.output)) <= {"gpulab_preflight", "nvidia_driver", "nvidia_cuda_repo"}
            said = " ".join(roll.output.split())
            for name, root in roots.items():
                assert f"{name} stays drained until it reboots into NVIDIA driver" in said
                assert (root / "var/lib/gpulab/drained-for-driver").is_file()
                assert not (root / "usr/local/cuda").exists()  # --tags nvidia_driver: the toolkit role did not run

            start = log[-1][0]
            resumed = ansible_playbook("playbooks/gpu_nodes.yml", inventory, "--tags", "nvidia_driver")
            assert resumed.rc == 0, resumed.explain()
            after = [(name, what) for t, name, what in _node_events(roots) if t > start]
            assert after[0] == ("node1", "scontrol update nodename=node1 state=resume"), after
            assert sorted(after[1:]) == [("node2", "kubectl uncordon node2"), ("node3", "hook resume")], after
            for root in roots.values():
                assert not (root / "var/lib/gpulab/drained-for-driver").exists()
