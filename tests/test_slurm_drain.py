"""nvidia_driver's Slurm drain hooks (roles/nvidia_driver/tasks/hooks/slurm-drain.yml, slurm-resume.yml) against a
real Slurm: Debian 12's slurmctld, slurmd and munge as a one-node cluster on this machine (tests/provision/
slurm_cluster.py), its node named after this host, real jobs submitted with sbatch. The hook files run through
ansible-playbook (include_role, tasks_from) on this machine, with the role's defaults; what they did is read back
from scontrol, sinfo and squeue."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from guest import prereq
from playbook import Run, ansible_env
from provision.inventory import require_ansible
from provision.slurm_cluster import COMMANDS, DAEMONS, Cluster, NodeState, one_node_cluster

pytestmark = pytest.mark.slow  # daemons started and ansible-playbook runs: the full lane only

VERSION = "580.95.05"
REASON = f"gpulab NVIDIA driver {VERSION}"  # the role's default nvidia_driver_drain_reason for this version
HOST = socket.gethostname()  # the inventory's name for this machine: nvidia_driver_drain_node is its short form


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0:
        prereq.missing("needs root (slurmd and slurmctld run as root here)")
    for tool in (*DAEMONS, *COMMANDS):
        prereq.require_tool(tool)
    require_ansible()
    with one_node_cluster() as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_cluster: Cluster) -> Iterator[Cluster]:
    """The cluster with its node idle, in service and without jobs, before and after the test."""
    slurm_cluster.reset()
    yield slurm_cluster
    slurm_cluster.reset()


class Hook:
    """One of the role's hook files run by ansible-playbook in the background, on this machine."""

    def __init__(self, directory: Path, cluster: Cluster, hook: str, **variables: object) -> None:
        directory.mkdir(parents=True)
        play = {
            "name": f"nvidia_driver hooks/{hook}",
            "hosts": HOST,
            "gather_facts": False,
            # The delegate's Slurm configuration, where an operator's is /etc/slurm/slurm.conf.
            "environment": {"SLURM_CONF": str(cluster.conf)},
            "vars": {"nvidia_driver_version": VERSION, **variables},
            "tasks": [
                {
                    "name": "Run the hook",
                    "ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": f"hooks/{hook}"},
                }
            ],
        }
        (directory / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False))
        host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        (directory / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {HOST: host}}}))
        self.argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "hosts.yml", "play.yml"]
        self.log = directory / "output.txt"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=directory,
                env=ansible_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started_at = time.time()
        self.returned_at = 0.0

    def watch(self, cluster: Cluster) -> list[NodeState]:
        """The node's states while the hook runs and once it returned, each change once, in order."""
        seen: list[NodeState] = []
        while True:
            running = self.proc.poll() is None
            if not running and not self.returned_at:
                self.returned_at = time.time()
            state = cluster.node_state()
            if not seen or seen[-1] != state:
                seen.append(state)
            if not running:
                return seen
            time.sleep(0.2)

    def finish(self, timeout: float = 120) -> Run:
        self.proc.wait(timeout=timeout)
        self.returned_at = self.returned_at or time.time()
        output = self.log.read_text()
        print(output[-20000:])
        return Run(argv=self.argv, rc=self.proc.returncode, output=output)

    def kill(self) -> None:
        """ansible-playbook and its workers, where a test ended while they ran (a drain would poll on for its
        timeout)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the workers and their module runs
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def hook(slurm: Cluster, tmp_path: Path) -> Iterator[Callable[..., Hook]]:
    """hook("slurm-drain.yml", **variables): the hook started; any still running at the test's end is killed."""
    started: list[Hook] = []

    def start(name: str, **variables: object) -> Hook:
        started.append(Hook(tmp_path / f"{len(started)}-{name}", slurm, name, **variables))
        return started[-1]

    yield start
    for each in started:
        each.kill()


def _said(run: Run) -> str:
    return " ".join(run.output.split())


def test_the_drain_waits_for_the_running_job_and_resume_returns_the_node(
    slurm: Cluster, hook: Callable[..., Hook]
) -> None:
    """A job runs on the node: the drain hook drains it (draining while the job runs, drained once it ended, with
    gpulab's reason) and returns only after the job completed on its own; the resume hook puts the node back in
    service (idle, reason cleared)."""
    # The job outlasts the drain by seconds however long Ansible takes to start, and prints when it ended.
    until_drained = f"until scontrol --oneliner show node {slurm.node} | grep -q +DRAIN; do sleep 0.2; done"
    job = slurm.submit(f"{until_drained}; sleep 4; date +%s.%N", name="train")
    slurm.wait_running(job)
    drain = hook("slurm-drain.yml", nvidia_driver_drain_timeout=60, nvidia_driver_drain_poll=1)
    seen = drain.watch(slurm)
    run = drain.finish()
    assert run.rc == 0, run.explain()
    assert f"FAILED - RETRYING: [{HOST}]: List the node's Slurm jobs until none is left" in run.output
    # Allocated until the hook's scontrol ran, then draining while the job ran, then drained: never idle between.
    assert {s.state for s in seen[:-2]} <= {"allocated"}, seen
    assert seen[-2:] == [NodeState("draining", REASON), NodeState("drained", REASON)], seen
    assert slurm.node_state() == NodeState("drained", REASON)
    finished = slurm.job(job)
    assert (finished["JobState"], finished["ExitCode"]) == ("COMPLETED", "0:0"), finished
    ended_at = float(slurm.output(job))
    assert drain.started_at < ended_at < drain.returned_at

    resume = hook("slurm-resume.yml").finish()
    assert resume.rc == 0, resume.explain()
    # The reason is gone at once; Slurm pings a resumed node before it counts as answering (idle*, then idle).
    assert slurm.node_state() in (NodeState("idle*", ""), NodeState("idle", ""))
    slurm.wait_until("the resumed node idle", lambda: slurm.node_state() == NodeState("idle", ""), seconds=30)


def test_a_job_outliving_the_timeout_stops_the_drain_naming_it(slurm: Cluster, hook: Callable[..., Hook]) -> None:
    """The hook's promise when jobs do not end in time: it stops, naming the jobs squeue lists and what to do; the
    node stays drained (draining: the job still runs, not cancelled)."""
    job = slurm.submit("sleep 120", name="long-train")
    slurm.wait_running(job)
    variables = {"nvidia_driver_drain_timeout": 2, "nvidia_driver_drain_poll": 1}
    run = hook("slurm-drain.yml", **variables).finish()
    assert run.rc == 2, run.explain()
    node = slurm.node
    assert (
        f"{HOST} is drained in Slurm ({node}) but its jobs did not end within nvidia_driver_drain_timeout=2 s: "
        f"{job} root long-train RUNNING. Let them finish and run again, cancel them (scancel), or raise "
        "nvidia_driver_drain_timeout." in _said(run)
    )
    assert slurm.node_state() == NodeState("draining", REASON)
    assert slurm.job(job)["JobState"] == "RUNNING"


def test_a_controller_that_stops_answering_stops_the_drain_with_squeues_error(
    slurm: Cluster, hook: Callable[..., Hook]
) -> None:
    """slurmctld stops while the hook waits for a job (after its drain, before its last look): squeue fails, and the
    hook stops saying so and where to look, instead of taking the failure for an empty node."""
    job = slurm.submit("sleep 120", name="train")
    slurm.wait_running(job)
    variables = {"nvidia_driver_drain_timeout": 3, "nvidia_driver_drain_poll": 3}
    drain = hook("slurm-drain.yml", **variables)
    slurm.wait_until("the node draining", lambda: slurm.node_state().state == "draining", seconds=60)
    with slurm.controller_stopped():
        run = drain.finish()
    assert run.rc == 2, run.explain()
    assert (
        f"{HOST} is drained in Slurm ({slurm.node}) but squeue fails: slurm_load_node error: Unable to contact slurm "
        "controller (connect failure). Check that Slurm answers there (nvidia_driver_drain_delegate)." in _said(run)
    )
    assert slurm.node_state() == NodeState("draining", REASON)


def test_resume_leaves_a_node_already_in_service_as_it_is(slurm: Cluster, hook: Callable[..., Hook]) -> None:
    """The marker can outlive the drain (the node resumed by hand, a run stopped before removing it): Slurm refuses
    to resume a node in service, and the hook takes that for done instead of failing every later run."""
    job = slurm.submit("sleep 120", name="train")
    slurm.wait_running(job)
    run = hook("slurm-resume.yml").finish()
    assert run.rc == 0, run.explain()
    assert run.recap()[HOST]["changed"] == 0, run.recap_text()
    assert slurm.node_state() == NodeState("allocated", "")
    assert slurm.job(job)["JobState"] == "RUNNING"
