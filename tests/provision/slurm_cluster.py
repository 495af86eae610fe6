"""A one-node Slurm cluster on this machine for the drain hooks' tests: Debian's munged, slurmctld and slurmd run in
the foreground as children of the test, from a slurm.conf in their own directory (SLURM_CONF), on ports free at
start, as root and without cgroups (no systemd here). Nothing under /etc/slurm or /etc/munge is read or written, so
two runs on one machine do not meet."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("scontrol", "squeue", "sinfo", "sbatch", "scancel")
START_S = 60.0  # the node registers in a few seconds; a loaded machine gets more

CONF = """\
ClusterName=gpulab
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={controller_port}
SlurmdPort={node_port}
AuthType=auth/munge
AuthInfo=socket={dir}/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
# No systemd and no cgroup delegation here: processes are tracked through /proc and tasks are not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
# A batch job starts when it is submitted, not up to three seconds later.
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# A controller that does not answer is reported after seconds, not the default ten.
MessageTimeout=5
MailProg=/bin/true
# One CPU: a single job fills the node, whatever this machine has.
NodeName={node} NodeAddr=127.0.0.1 CPUs=1 State=UNKNOWN
PartitionName=gpu Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass(frozen=True)
class NodeState:
    """What Slurm says of the node: sinfo's state (idle, allocated, draining, drained, ...) and the drain reason."""

    state: str
    reason: str


def short_hostname() -> str:
    """The name slurmd finds itself by: the host name up to its first dot."""
    return socket.gethostname().split(".", 1)[0]


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (the kernel's choice), for the controller and the node daemon."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _fields(line: str) -> dict[str, str]:
    """`scontrol -o show ...`'s Key=Value fields (values may hold spaces: Reason, OS)."""
    return {m[1]: m[2] for m in re.finditer(r"(?:^| )([\w/:]+)=(.*?)(?= [\w/:]+=|$)", line.strip())}


@dataclass
class Cluster:
    """The running cluster: its directory (slurm.conf, state, spool, logs, job output), its one node's name and the
    daemons started for it."""

    directory: Path
    node: str
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.directory / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster."""
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}\n{self.logs()}")
        return proc

    def node_state(self) -> NodeState:
        state = self.run("sinfo", "--noheader", f"--nodes={self.node}", "--format=%T").stdout.strip()
        reason = _fields(self.run("scontrol", "--oneliner", "show", "node", self.node).stdout).get("Reason", "")
        # Slurm appends who set the reason and when: "gpulab NVIDIA driver 580 [root@2026-11-28T14:29:13]".
        return NodeState(state, re.sub(r" \[[^]]*\]$", "", reason))

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job`'s fields (kept by the controller for minutes after the job ended)."""
        return _fields(self.run("scontrol", "--oneliner", "show", "job", job_id).stdout)

    def submit(self, script: str, name: str) -> str:
        """sbatch --wrap `script` as job `name`; its output in the cluster's directory. Returns the job id."""
        out = self.directory / "job-%j.out"
        argv = ["sbatch", "--parsable", f"--job-name={name}", f"--chdir={self.directory}", f"--output={out}"]
        return self.run(*argv, f"--wrap={script}").stdout.strip().split(";")[0]

    def output(self, job_id: str) -> str:
        return (self.directory / f"job-{job_id}.out").read_text()

    def wait_until(self, what: str, done: Callable[[], bool], seconds: float = START_S) -> None:
        deadline = time.monotonic() + seconds
        while not done():
            # A daemon that exited (a port taken, a refused configuration) is named at once, with its logs.
            if dead := [name for name, proc in self.daemons.items() if proc.poll() is not None]:
                raise RuntimeError(f"Slurm: {what}, but {', '.join(dead)} exited\n{self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm: {what} not within {seconds:.0f} s\n{self.logs()}")
            time.sleep(0.2)

    def wait_running(self, job_id: str) -> None:
        self.wait_until(f"job {job_id} running", lambda: self.job(job_id).get("JobState") == "RUNNING")

    def jobs(self) -> list[str]:
        return self.run("squeue", "--noheader", "--format=%A").stdout.split()

    def reset(self) -> None:
        """Back to an idle node in service with no job: what each test starts from."""
        if ids := self.jobs():
            self.run("scancel", *ids)
            self.wait_until("the jobs cancelled", lambda: not self.jobs())
        if "drain" in self.node_state().state:
            self.run("scontrol", "update", f"nodename={self.node}", "state=resume")
        self.wait_until("the node idle", lambda: self.node_state() == NodeState("idle", ""))

    def _spawn(self, name: str, *argv: str) -> None:
        with (self.directory / f"{name}.out").open("ab") as out:
            exe = shutil.which(name) or name
            self.daemons[name] = subprocess.Popen([exe, *argv], env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def _stop(self, name: str) -> None:
        proc = self.daemons.pop(name, None)
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)

    def node_responds(self) -> bool:
        """slurmd has registered with the controller (after a start, the node's state is unknown until then)."""
        state = _fields(self.run("scontrol", "--oneliner", "show", "node", self.node).stdout).get("State", "")
        return not state.startswith("UNKNOWN") and "NOT_RESPONDING" not in state

    def start_controller(self) -> None:
        self._spawn("slurmctld", "-D")
        self.wait_until("slurmctld answering", lambda: self.run("scontrol", "ping", check=False).returncode == 0)
        if "slurmd" in self.daemons:
            self.wait_until("slurmd registered", self.node_responds)

    @contextmanager
    def controller_stopped(self) -> Iterator[None]:
        """slurmctld stopped (its state saved) for the block, started again after it."""
        self._stop("slurmctld")
        try:
            yield
        finally:
            self.start_controller()

    def stop(self) -> None:
        """Every job cancelled (so that no job step outlives slurmd), then each daemon stopped and waited for."""
        if "slurmctld" in self.daemons and "slurmd" in self.daemons:
            try:
                if ids := self.jobs():
                    self.run("scancel", *ids)
                    self.wait_until("the jobs cancelled", lambda: not self.jobs(), seconds=15)
            except RuntimeError as err:
                print(err)
        for name in reversed(DAEMONS):
            self._stop(name)
        _kill_left_in(self.directory)

    def logs(self, lines: int = 15) -> str:
        """The last lines of each daemon's log, for a failure's message."""
        out = []
        for name in ("munged.out", "slurmctld.out", "slurmd.out"):
            path = self.directory / name
            if path.is_file():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(out)


def _kill_left_in(directory: Path) -> None:
    """Kill what still runs in `directory` (job steps and their jobs, which outlive slurmd where a cancel failed)."""
    for proc in Path("/proc").iterdir():
        try:
            cwd = (proc / "cwd").resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        if proc.name.isdigit() and cwd.is_relative_to(directory):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def _munge_key(path: Path) -> None:
    # munged takes any random key it alone can read.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as key:
        key.write(os.urandom(128))


def _munge_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def _start(cluster: Cluster) -> None:
    d = cluster.directory
    controller_port, node_port = free_ports(2)
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    _munge_key(d / "munge.key")
    conf = CONF.format(
        host=cluster.node, node=cluster.node, dir=d, controller_port=controller_port, node_port=node_port
    )
    cluster.conf.write_text(conf)
    munge_files = [f"--socket={d}/munge.socket", f"--key-file={d}/munge.key", f"--pid-file={d}/munged.pid"]
    cluster._spawn("munged", "--foreground", *munge_files, f"--seed-file={d}/munged.seed")
    cluster.wait_until("munged answering", lambda: _munge_answers(d / "munge.socket"))
    cluster.start_controller()
    cluster._spawn("slurmd", "-D")
    cluster.wait_until("the node idle", lambda: cluster.node_state().state == "idle")


@contextmanager
def one_node_cluster() -> Iterator[Cluster]:
    """The cluster, started, and on leaving (a failure included) its jobs cancelled and its daemons stopped."""
    # Not under pytest's base directory: munged wants every directory above its socket open to all (execute).
    directory = Path(tempfile.mkdtemp(prefix="gpulab-slurm-"))
    directory.chmod(0o755)
    cluster = Cluster(directory, short_hostname())
    try:
        _start(cluster)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)
