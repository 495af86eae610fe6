"""Every command's file arguments against families of bad files: one line, exit 2, nothing lost, no traceback.

Each case runs the real `gpulab` command in a child process (so an unbounded read or a crash is seen as such,
under a memory limit) and asserts: exit code 2, stderr is exactly one line starting with "gpulab: error:" and naming
the path, no traceback, and no file the user gave (inputs and existing outputs) changed. Outputs are checked before
the first step: a run with an unwritable --report fails in well under the time a training step takes.

`python tests/test_bad_inputs.py` prints the table of cases, exit codes and messages.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"

pytestmark = pytest.mark.slow  # trainings and commands in child processes: the full lane only
CAPTURE = FIXTURES / "h200x4-firecracker" / "nvidia-smi-q-x.xml"
REPORT = FIXTURES / "reports" / "h200x4-standard.json"
GPULAB = Path(sys.executable).parent / "gpulab"
MEMORY_LIMIT = 4 * 1024**3

# --- the families: each makes a bad path under a scratch directory ---------------------------------------------


def _missing(d: Path) -> Path:
    return d / "no-such-file"


def _directory(d: Path) -> Path:
    (d / "a-directory").mkdir()
    return d / "a-directory"


def _char_device(d: Path) -> Path:
    return Path("/dev/zero")  # read naively, it never ends


def _fifo(d: Path) -> Path:
    os.mkfifo(d / "a-fifo")  # read naively, it blocks forever
    return d / "a-fifo"


def _not_utf8(d: Path) -> Path:
    (d / "binary.dat").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x80" * 64)
    return d / "binary.dat"


def _empty(d: Path) -> Path:
    (d / "empty").write_bytes(b"")
    return d / "empty"


def _wrong_format(d: Path) -> Path:
    (d / "notes.txt").write_text("these are my notes, not the file you want\n")
    return d / "notes.txt"


def _wrong_json(d: Path) -> Path:
    (d / "other.json").write_text('[{"name": "something else"}, 3, null]\n')
    return d / "other.json"


def _parent_is_file(d: Path) -> Path:
    (d / "plain-file").write_text("x")
    return d / "plain-file" / "inside"


def _oversized(d: Path) -> Path:
    path = d / "huge.bin"
    with path.open("wb") as fh:  # sparse: costs no disk
        fh.truncate(300 * 1024**2)
    return path


INPUT_FAMILIES: dict[str, Callable[[Path], Path]] = {
    "missing": _missing,
    "directory": _directory,
    "character device": _char_device,
    "named pipe": _fifo,
    "not UTF-8": _not_utf8,
    "random bytes": _not_utf8,  # the same file, named so for binary inputs (weights, images)
    "empty": _empty,
    "wrong format (text)": _wrong_format,
    "wrong format (JSON)": _wrong_json,
    "parent is a file": _parent_is_file,
    "300 MiB": _oversized,
}


def _out_directory(d: Path) -> Path:
    return _directory(d)


def _out_device(d: Path) -> Path:
    return Path("/dev/full")  # every write fails with ENOSPC


OUTPUT_FAMILIES: dict[str, Callable[[Path], Path]] = {
    "output is a directory": _out_directory,
    "output's parent is a file": _parent_is_file,
    "output is a device": _out_device,
    "output is a file (for a directory)": _wrong_format,
}

# --- the commands: each takes the bad path and a scratch directory with good inputs -----------------------------


@dataclass(frozen=True)
class Command:
    label: str
    argv: Callable[[Path, Path], list[str]]
    families: tuple[str, ...]


TEXT_INPUTS = tuple(f for f in INPUT_FAMILIES if f != "random bytes")  # XML, YAML, JSON
BINARY_INPUTS = tuple(f for f in INPUT_FAMILIES if f != "not UTF-8")  # weights, images
FILE_OUTPUTS = ("output is a directory", "output's parent is a file", "output is a device")
TINY_RUN = ["--launcher", "cpu", "--size", "tiny", "--steps", "1", "--warmup", "0", "--threads", "1"]

COMMANDS = [
    Command("info --from", lambda bad, d: ["info", "--no-frameworks", "--from", str(bad)], TEXT_INPUTS),
    Command(
        "info --topo",
        lambda bad, d: ["info", "--no-frameworks", "--from", str(CAPTURE), "--topo", str(bad)],
        TEXT_INPUTS,
    ),
    Command(
        "info --nvlink",
        lambda bad, d: ["info", "--no-frameworks", "--from", str(CAPTURE), "--nvlink", str(bad)],
        TEXT_INPUTS,
    ),
    Command("report FILE", lambda bad, d: ["report", str(bad), "--md", str(d / "out.md")], TEXT_INPUTS),
    Command("compare BASE", lambda bad, d: ["compare", str(bad), str(REPORT)], TEXT_INPUTS),
    Command("compare OTHER", lambda bad, d: ["compare", str(REPORT), str(bad)], TEXT_INPUTS),
    Command("vm plan SPEC", lambda bad, d: ["vm", "plan", str(bad), "--connect", "test:///default"], TEXT_INPUTS),
    Command("vm define SPEC", lambda bad, d: ["vm", "define", str(bad), "--connect", "test:///default"], TEXT_INPUTS),
    Command(
        "run --param vgg_weights",
        lambda bad, d: ["run", "style_transfer", *TINY_RUN, "--param", f"vgg_weights={bad}"],
        BINARY_INPUTS,
    ),
    Command(
        "run --param content",
        lambda bad, d: ["run", "style_transfer", *TINY_RUN, "--param", f"content={bad}"],
        BINARY_INPUTS,
    ),
    Command("report --md", lambda bad, d: ["report", str(d / "r.json"), "--md", str(bad)], FILE_OUTPUTS),
    Command("report --html", lambda bad, d: ["report", str(d / "r.json"), "--html", str(bad)], FILE_OUTPUTS),
    Command("run --report", lambda bad, d: ["run", "mnist", *TINY_RUN, "--report", str(bad)], FILE_OUTPUTS),
    Command(
        "sweep --sweep-dir",
        lambda bad, d: ["sweep", "mnist", *TINY_RUN[2:], "--gpus", "1", "--sweep-dir", str(bad)],
        ("output's parent is a file", "output is a file (for a directory)"),
    ),
]

CASES = [(c, family) for c in COMMANDS for family in c.families]


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _snapshot(root: Path) -> dict[str, str]:
    """Every regular file under `root` with its content hash (what must not change)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.stat().st_size < 1024**2
    }


@dataclass
class Outcome:
    rc: int
    stderr: str
    stdout: str
    seconds: float


def run_case(command: Command, family: str, scratch: Path) -> tuple[Outcome, Path, dict[str, str], dict[str, str]]:
    shutil.copy(REPORT, scratch / "r.json")
    bad = (INPUT_FAMILIES.get(family) or OUTPUT_FAMILIES[family])(scratch)
    before = _snapshot(scratch)
    argv = command.argv(bad, scratch)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"}
    env.pop("GPULAB_TRACEBACK", None)
    start = time.monotonic()
    proc = subprocess.run(
        [str(GPULAB), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=scratch,
        env=env,
        preexec_fn=_limit_memory,
        check=False,
    )
    outcome = Outcome(proc.returncode, proc.stderr, proc.stdout, time.monotonic() - start)
    return outcome, bad, before, _snapshot(scratch)


@pytest.mark.parametrize(("command", "family"), CASES, ids=[f"{c.label}|{f}" for c, f in CASES])
def test_a_bad_file_gets_one_line_and_exit_2(command: Command, family: str, tmp_path: Path) -> None:
    outcome, bad, before, after = run_case(command, family, tmp_path)
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.rc == 2, (outcome.rc, outcome.stderr)
    assert len(lines) == 1 and lines[0].startswith("gpulab: error: "), outcome.stderr
    shown = str(bad) if family != "parent is a file" else str(bad.parent)
    assert shown in lines[0] or bad.name in lines[0], f"{lines[0]!r} does not name {bad}"
    assert after == before, "a file the user gave changed"
    assert "samples/s" not in outcome.stdout  # refused before any work


def test_an_unwritable_report_is_refused_before_the_training(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("x")
    slow = ["run", "resnet50", "--launcher", "cpu", "--size", "standard", "--steps", "50", "--threads", "1"]
    start = time.monotonic()
    proc = subprocess.run(
        [str(GPULAB), *slow, "--report", str(tmp_path / "plain-file" / "r.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert time.monotonic() - start < 30  # 50 ResNet50 steps on one thread take minutes
    assert "plain-file is a file, not a directory" in proc.stderr


def test_a_file_that_is_not_a_report_is_refused_before_the_training(tmp_path: Path) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('{"my": "notes"}\n')
    proc = subprocess.run(
        [str(GPULAB), "run", "mnist", *TINY_RUN, "--report", str(notes)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "not a gpulab report" in proc.stderr
    assert "samples/s" not in proc.stdout
    assert notes.read_text() == '{"my": "notes"}\n'


INTERRUPTED = [
    (delay, argv)
    for argv in (
        ["run", "resnet50", "--launcher", "cpu", "--size", "quick", "--threads", "1"],
        ["run", "mnist", "--launcher", "ddp", "--gpus", "2", "--size", "quick", "--threads", "1"],
        ["sweep", "mnist", "--gpus", "2", "--size", "quick", "--threads", "1", "--sweep-dir", "sweep"],
        ["info"],
    )
    for delay in (0.05, 0.6, 1.0, 1.5, 4.0)  # while gpulab starts, while torch imports, while the work runs
    if not (argv == ["info"] and delay > 2)  # info's last moments: by its own duration, below
]


@pytest.fixture(scope="module")
def interpreter_start() -> float:
    """Seconds this machine's Python takes to start (the slowest of three). Before that none of gpulab's code has
    run and a Ctrl-C is the interpreter's own, so the delays count from there."""
    times = []
    for _ in range(3):
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.monotonic() - started)
    return max(times)


@pytest.mark.parametrize(("delay", "argv"), INTERRUPTED, ids=[f"{' '.join(a[:3])}@{d}s" for d, a in INTERRUPTED])
def test_ctrl_c_at_any_moment_is_one_line_and_130(
    delay: float, argv: list[str], tmp_path: Path, interpreter_start: float
) -> None:
    # The whole process group gets SIGINT, as from a terminal: the workers started by ddp and sweep too.
    proc = subprocess.Popen(
        [str(GPULAB), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        start_new_session=True,
    )  # fmt: skip
    time.sleep(interpreter_start + delay)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert stderr.strip() == "gpulab: interrupted", stderr


@pytest.mark.parametrize("share", [0.85, 0.95, 0.99])
def test_ctrl_c_as_the_command_ends_is_one_line_and_130(share: float, tmp_path: Path) -> None:
    # The interpreter turns signal handling off while it tears torch and TensorFlow down: a Ctrl-C there once
    # killed gpulab with no line (returncode -2). Aimed at the last moments of `gpulab info`, by its own duration.
    started = time.monotonic()
    subprocess.run([str(GPULAB), "info"], capture_output=True, check=True, cwd=tmp_path, timeout=120)
    duration = time.monotonic() - started
    proc = subprocess.Popen(
        [str(GPULAB), "info"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        start_new_session=True,
    )  # fmt: skip
    time.sleep(duration * share)
    os.killpg(proc.pid, signal.SIGINT)
    out, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:  # it finished first (this run was quicker than the one timed): the whole output then
        assert "Host" in out and not stderr.strip(), stderr
        return
    assert proc.returncode == 130, stderr
    assert stderr.strip() == "gpulab: interrupted", stderr


VALIDATE_CASES = [
    ("--report-dir", family)
    for family in ("output is a file (for a directory)", "output's parent is a file", "output is a device")
] + [
    (option, family)
    for option in ("--baseline", "--from-xml", "--topo")
    for family in ("missing", "directory", "character device", "named pipe", "not UTF-8", "empty")
    if not (option != "--baseline" and family in ("not UTF-8", "empty"))  # captures are parsed, not pre-read
]


@pytest.mark.parametrize(("option", "family"), VALIDATE_CASES, ids=[f"{o}|{f}" for o, f in VALIDATE_CASES])
def test_the_suite_refuses_a_bad_file_before_the_first_test(option: str, family: str, tmp_path: Path) -> None:
    bad = (INPUT_FAMILIES.get(family) or OUTPUT_FAMILIES[family])(tmp_path)
    extra = ["--from-xml", str(CAPTURE)] if option == "--topo" else []
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "validate"), "-p", "no:cacheprovider", *extra, option, str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        preexec_fn=_limit_memory,
        check=False,
    )
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error: nothing ran
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR: ")]
    assert len(errors) == 1 and bad.name in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and "passed" not in proc.stdout


def main() -> None:
    """Print the table of cases: command, family, exit code, first line of the message; then the counts."""
    import tempfile

    rows, clear, tracebacks, lost = [], 0, 0, 0
    for command, family in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            outcome, _, before, after = run_case(command, family, Path(tmp))
        lines = [line for line in outcome.stderr.splitlines() if line.strip()]
        first = lines[0] if lines else "(nothing)"
        tracebacks += "Traceback" in outcome.stderr
        lost += after != before
        clear += outcome.rc == 2 and len(lines) == 1 and first.startswith("gpulab: error:")
        rows.append(f"| `{command.label}` | {family} | {outcome.rc} | {first.replace('|', '/')[:150]} |")
    print("| command | bad input | exit | message (first line) |\n|---|---|---|---|")
    print("\n".join(rows))
    print(f"\ntried {len(CASES)}, clear error {clear}, traceback {tracebacks}, data lost {lost}")


if __name__ == "__main__":
    main()
