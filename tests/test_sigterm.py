"""SIGTERM ends every long command as Ctrl-C does: one line (`gpulab: terminated`), exit 143, every process the
command started gone within seconds, and what Ctrl-C saves saved. Real commands, real signals, sent to the whole
process group (a terminal, `timeout --foreground`, a scheduler that kills the job's group) or to the command's
process alone (`kill PID`, systemd's default for the main process only, a script that started it with `&`).

Each command runs with a mark in its environment, which every process it starts inherits (torchrun's workers and
Dask's too, in sessions of their own): the processes left are those /proc shows with the mark.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gpulab.interrupts import PARENT_ENV

GPULAB = Path(sys.executable).parent / "gpulab"

pytestmark = pytest.mark.slow  # trainings and commands in child processes: the full lane only
MARK_ENV = "GPULAB_TEST_MARK"
SETTLE_S = 5.0  # how long the command's children may take to go once it has exited
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}
QUICK = ["--size", "quick", "--threads", "1"]
# A study of four short runs on one CPU worker: the first saves its row within seconds of the worker's start.
STUDY = {
    "study": "stopped",
    "workload": "style_transfer",
    "size": "tiny",
    "precision": "fp32",
    "fixed": {"width": 32, "iterations": 2},
    "vary": {"mode": "grid", "params": {"learning_rate": [1, 2.5, 10, 20]}},
    "workers": 1,
}


def marked(mark: str) -> list[str]:
    """The command lines of the live processes whose environment carries `mark`."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if f"{MARK_ENV}={mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:  # gone meanwhile, or a zombie
            continue
    return found


@dataclass
class Command:
    proc: subprocess.Popen[str]
    mark: str
    cwd: Path

    def processes(self) -> list[str]:
        return marked(self.mark)

    def wait_for(self, what: str, ready: Callable[[], bool], timeout_s: float = 300) -> None:
        """Until `ready()`; the command must still be running then, or there is nothing to stop."""
        deadline = time.monotonic() + timeout_s
        while not ready() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.proc.poll() is None, f"the command ended before {what}: {self.proc.communicate()}"
        assert ready(), f"no {what} after {timeout_s} s"

    def wait_for_process(self, name: str, count: int = 1) -> None:
        self.wait_for(f"{count} {name}", lambda: sum(name in p for p in self.processes()) >= count)

    def stop(self, signum: int, *, group: bool) -> Stopped:
        (os.killpg if group else os.kill)(self.proc.pid, signum)
        _, stderr = self.proc.communicate(timeout=120)
        deadline = time.monotonic() + SETTLE_S
        left = self.processes()
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = self.processes()
        return Stopped(self.proc.returncode, stderr, left)


@dataclass
class Stopped:
    returncode: int
    stderr: str
    left: list[str]

    def assert_ended(self, code: int, line: str) -> None:
        """Exit `code`, `line` the last on stderr and gpulab's only one, no traceback or warning, nothing left."""
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        assert self.returncode == code, self.stderr[-3000:]
        assert lines and lines[-1].startswith(line), self.stderr[-3000:]
        assert [ln for ln in lines if ln.startswith("gpulab:")] == [lines[-1]], self.stderr[-3000:]
        for noise in ("Traceback", "Error", "Warning", "warn", "leaked", "Exception"):
            assert noise not in self.stderr, self.stderr[-3000:]
        assert self.left == [], f"left running: {self.left}"


def start(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> Command:
    mark = uuid.uuid4().hex
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [str(GPULAB), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, **CPU_ONLY, **(env or {}), MARK_ENV: mark},
        start_new_session=True,  # a group of its own, as a terminal's job has
    )
    return Command(proc, mark, cwd)


WHO = [True, False]
WHO_IDS = ["group", "parent-alone"]


@pytest.mark.parametrize("group", WHO, ids=WHO_IDS)
def test_a_cpu_run_stopped_by_sigterm_says_terminated_and_exits_143(group: bool, tmp_path: Path) -> None:
    command = start(["run", "mnist", "--launcher", "cpu", *QUICK], tmp_path)
    time.sleep(3)  # importing torch, or training
    command.stop(signal.SIGTERM, group=group).assert_ended(143, "gpulab: terminated")


def test_sigterm_while_gpulab_itself_starts_is_the_same_line(tmp_path: Path) -> None:
    command = start(["run", "mnist", "--launcher", "cpu", *QUICK], tmp_path)
    # The moment gpulab catches SIGTERM (the kernel's SigCgt mask says so): its own modules are loading yet.
    command.wait_for("a SIGTERM handler", lambda: _catches(command.proc.pid, signal.SIGTERM), timeout_s=60)
    command.stop(signal.SIGTERM, group=False).assert_ended(143, "gpulab: terminated")


def _catches(pid: int, signum: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signum - 1) & 1)


@pytest.mark.parametrize("group", WHO, ids=WHO_IDS)
def test_a_ddp_run_stopped_by_sigterm_stops_its_workers(group: bool, tmp_path: Path) -> None:
    # torchrun starts its workers in sessions of their own: a signal to the group never reaches them, only gpulab's
    # word to torchrun (or, last, gpulab's SIGKILL) does.
    command = start(["run", "mnist", "--launcher", "ddp", "--gpus", "2", *QUICK], tmp_path)
    command.wait_for_process("gpulab.launch.ddp_worker", 2)
    command.stop(signal.SIGTERM, group=group).assert_ended(143, "gpulab: terminated")


SWEEP_STOPS = [(signal.SIGTERM, True), (signal.SIGTERM, False), (signal.SIGINT, False)]


@pytest.mark.parametrize(
    ("signum", "group"), SWEEP_STOPS, ids=["sigterm-group", "sigterm-parent-alone", "sigint-parent-alone"]
)
def test_a_sweep_stopped_leaves_no_run(signum: int, group: bool, tmp_path: Path) -> None:
    command = start(["sweep", "mnist", "--gpus", "2", *QUICK, "--sweep-dir", "sweep"], tmp_path)
    command.wait_for_process("gpulab.launch.sweep_worker", 2)
    # The runs are the sweep's only processes: no copy of the sweep is forked (a process pool's replacement worker,
    # forked while a stop ended the others, once lost the pool's SIGTERM and held the command for good).
    others = [p for p in command.processes() if "gpulab.launch.sweep_worker" not in p]
    assert len(others) == 1 and others[0].endswith("--sweep-dir sweep"), others
    stopped = command.stop(signum, group=group)
    stopped.assert_ended(*((143, "gpulab: terminated") if signum == signal.SIGTERM else (130, "gpulab: interrupted")))


def _study(tmp_path: Path) -> tuple[Path, Path]:
    path = tmp_path / "stopped.yml"
    path.write_text(yaml.safe_dump(STUDY))
    return path, tmp_path / "out"


@pytest.mark.parametrize("group", WHO, ids=WHO_IDS)
def test_a_study_stopped_by_sigterm_saves_its_record_as_ctrl_c_does(group: bool, tmp_path: Path) -> None:
    path, out = _study(tmp_path)
    command = start(["study", "run", str(path), "--study-dir", str(out)], tmp_path)
    # A run under way on the worker (its folder made), the study's session record and database not yet written
    command.wait_for("a run", lambda: out.is_dir() and any(p.is_dir() for p in out.iterdir()))
    stopped = command.stop(signal.SIGTERM, group=group)
    stopped.assert_ended(143, f"gpulab: terminated; finished runs are kept in {out}")
    sessions = json.loads((out / "sessions.json").read_text())
    assert [s["interrupted"] for s in sessions] == [True]
    rows = json.loads((out / "database.json").read_text())  # the runs that finished, if any did
    assert all(row["status_"] == "ok" for row in rows) and len(rows) < len(STUDY["vary"]["params"]["learning_rate"])


def test_ctrl_c_to_a_study_alone_while_its_workers_start_is_one_line(tmp_path: Path) -> None:
    # A script's `gpulab study run ... &`, then `kill -INT`: the workers (their own processes, ignoring SIGINT
    # once they are up) are being started; the cluster is started whole, then closed, with nothing said by Dask.
    path, out = _study(tmp_path)
    command = start(["study", "run", str(path), "--study-dir", str(out)], tmp_path)
    command.wait_for_process("spawn_main")
    stopped = command.stop(signal.SIGINT, group=False)
    stopped.assert_ended(130, f"gpulab: interrupted; finished runs are kept in {out}")
    assert json.loads((out / "sessions.json").read_text())[0]["interrupted"] is True


# ---------- a child that ends with its parent ----------

CHILD = (
    "import sys, time; from gpulab.interrupts import stop_with_parent; time.sleep(float(sys.argv[1])); "
    "stop_with_parent(); print('armed', flush=True); time.sleep(60)"
)
PARENT = (
    "import subprocess, sys; from gpulab.interrupts import child_env; "
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], env=child_env()); "
    "print(child.pid, flush=True); sys.stdin.read()"
)


@pytest.mark.parametrize("arms_after_s", [0.0, 1.5], ids=["parent-killed-later", "parent-gone-first"])
def test_a_child_started_with_child_env_ends_with_its_parent(arms_after_s: float, tmp_path: Path) -> None:
    # The parent killed outright (no handler of its own runs): its child goes, whether it was told to before the
    # parent died (the kernel's parent-death signal) or only after (it finds its parent changed).
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, str(arms_after_s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != PARENT_ENV},
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    if not arms_after_s:
        assert parent.stdout.readline().strip() == "armed"
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + arms_after_s + 5
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child), f"the child {child} outlived its parent"


def _running(pid: int) -> bool:
    """Whether `pid` runs: neither gone nor ended and waiting to be reaped (a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
