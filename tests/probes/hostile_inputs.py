#!/usr/bin/env python3
"""Hostile inputs for every `gpulab` command that reads files, each run as a real child process, then classified.

For each command that reads a file (`info --from/--topo/--nvlink`, `matrix resolve --vars`, `report`, `compare`,
`run --report` and `--param content=`, `sweep --sweep-dir`, `study run/status/report`, `vm plan`, and the
validation suite's `--baseline`/`--from-xml`) it feeds the families: a missing file, a directory, a FIFO, an empty
file, bytes that are not UTF-8, a file beyond every documented size limit (sparse: it costs no disk), deeply nested
JSON and YAML, NaN and a key given twice, a YAML alias bomb, an XML entity bomb; and outputs (`--md`, `--html`,
`--report`) that are symbolic links or the very file read.

Every case runs under a wall-clock limit (a FIFO opened for reading blocks until its writer comes: a hang is a
finding, not a stuck probe) and an address-space limit. The outcome is

- good: a non-zero exit with exactly one `gpulab:` line (pytest's one `ERROR:` line for the suite) and no
  traceback, or a documented success (`run --report` through a link appends to the link's file, by design);
- serious: a traceback, "unexpected" (the command's catch-all for an internal error), a hang past the limit, exit 0
  on bad input, a write through a link or over an input;
- minor: refused, but not as one clear line: another exit code than 2, several lines, a message that does not name
  the file, or slow (more than SLOW_S).

    python tests/probes/hostile_inputs.py                # every case (minutes)
    python tests/probes/hostile_inputs.py --quick        # the fast subset tests/test_hostile_inputs.py runs
    python tests/probes/hostile_inputs.py -k "report"    # cases whose command or family holds the text

It prints the counts per class and a table of the findings that are not good; it exits 1 when any finding is
serious.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
REPORT = FIXTURES / "reports" / "h200x4-standard.json"
CAPTURE = FIXTURES / "h200x4-firecracker" / "nvidia-smi-q-x.xml"
HUGE = (1 << 30) + (1 << 20)  # past the largest documented input limit (a study database's 1 GiB)
MEMORY_LIMIT = 4 << 30
TIMEOUT_S = 90.0
SLOW_S = 30.0
GOOD, MINOR, SERIOUS = "good", "minor", "serious"
TINY = ["--launcher", "cpu", "--size", "tiny", "--steps", "1", "--warmup", "0", "--threads", "1"]
STUDY = "study: s\nworkload: style_transfer\nsize: tiny\nfixed: {width: 32, iterations: 2}\n"


# --- the families: each writes the bad file at `path` ------------------------------------------------------------


def _deep_json(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


def _report_text() -> str:
    return REPORT.read_text()


def _nan_report() -> str:
    data = json.loads(_report_text())
    data["results"][0]["value"] = "@NAN@"
    return json.dumps(data).replace('"@NAN@"', "NaN")


def _dup_report() -> str:
    return _report_text().replace("{", '{"tier": "quick", ', 1)


def _absurd_report() -> str:
    data = json.loads(_report_text())
    data["results"][0]["value"] = 1e300
    return json.dumps(data)


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)
XML_BOMB = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">' for i in range(1, 10))
    + "]>\n<nvidia_smi_log>&lol9;</nvidia_smi_log>\n"
)
DEEP_YAML = "".join(" " * i + f"k{i}:\n" for i in range(2_000)) + " " * 2_000 + "v\n"

CONTENT: dict[str, Callable[[], str | bytes]] = {
    "empty": lambda: b"",
    "not UTF-8": lambda: b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x80" * 64,
    "deep JSON": _deep_json,
    "deep YAML": lambda: DEEP_YAML,
    # inside a <gpu>: a log of no GPUs is a capture of a host without any, not bad input
    "deep XML": lambda: '<nvidia_smi_log><gpu id="0">' + "<a>" * 100_000 + "</a>" * 100_000 + "</gpu></nvidia_smi_log>",
    "NaN": _nan_report,
    "absurd figure": _absurd_report,
    "duplicate key": _dup_report,
    "YAML duplicate key": lambda: STUDY + "study: t\n",
    "YAML NaN": lambda: STUDY.replace("iterations: 2}", "iterations: 2, learning_rate: .nan}"),
    "YAML alias bomb": lambda: ALIAS_BOMB,
    "XML entity bomb": lambda: XML_BOMB,
    "rows with a duplicate key": lambda: '[{"_pset_id": "p1", "_pset_id": "p2"}]',
    "record with a duplicate key": lambda: '{"name": "s", "name": "t"}',
}


def make_bad(path: Path, family: str) -> Path:
    """The bad file of `family` at `path` (its parent exists)."""
    if family == "missing":
        return path
    if family == "directory":
        path.mkdir()
    elif family == "FIFO":
        os.mkfifo(path)
    elif family == "huge":
        with path.open("wb") as fh:
            fh.truncate(HUGE)
    else:
        data = CONTENT[family]()
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


# Where a family is no bad input for a command, by design: the case is good when it succeeds.
DOCUMENTED = {
    ("matrix resolve --vars", "empty"),  # an empty vars file sets no variable: the defaults apply
    ("run --report", "missing"),  # --report creates the report it appends to
}
FILE_FAMILIES = ("missing", "directory", "FIFO", "empty", "not UTF-8", "huge")
REPORT_FAMILIES = (*FILE_FAMILIES, "deep JSON", "NaN", "absurd figure", "duplicate key")
YAML_FAMILIES = (*FILE_FAMILIES, "deep YAML", "deep JSON", "YAML duplicate key", "YAML alias bomb")
XML_FAMILIES = (*FILE_FAMILIES, "deep XML", "XML entity bomb")
STUDY_DIR_FAMILIES = ("FIFO", "directory", "empty", "not UTF-8", "huge", "deep JSON")


# --- the cases --------------------------------------------------------------------------------------------------


@dataclass
class Case:
    command: str  # how the table names the command and the slot the bad file fills
    family: str
    argv: list[str]  # after `gpulab` (or `pytest validate/` for the suite)
    bad: Path  # the file the case is about: the message should name it
    expect: str = "fail"  # fail: bad input, must exit non-zero | any: a documented success is good too
    watch: list[Path] = field(default_factory=list)  # files that must come out unchanged
    tool: str = "gpulab"  # gpulab | suite
    before: dict[str, str] = field(default_factory=dict)


def _study_dir(d: Path) -> Path:
    """A study directory as a finished run leaves it (one run), written by hand: data, not gpulab's own writer."""
    out = d / "study"
    out.mkdir(parents=True)
    (out / "study.yml").write_text(STUDY)
    (out / "study.json").write_text(json.dumps({"name": "s", "variant": None, "path": None}))
    row = {"study": "s", "workload": "style_transfer", "size": "tiny", "width": 32, "iterations": 2, "repeat": 0}
    row.update(seed=0, _pset_id="p1", _run_id="r1", _time_utc="2026-11-25T20:00:00", status_="ok", wall_s_=1.0)
    row.update(timed_s_=0.5, loss_curve_=[[1, 3.0], [2, 2.0]])
    (out / "database.json").write_text(json.dumps([row]))
    (out / "sessions.json").write_text("[]")
    return out


def _input_cases(d: Callable[[], Path]) -> list[Case]:
    """Every input slot × its families: `d()` gives each case a scratch folder of its own."""
    slots: list[tuple[str, tuple[str, ...], str, Callable[[Path, Path], list[str]]]] = [
        ("info --from", XML_FAMILIES, "smi.xml", lambda b, w: ["info", "--no-frameworks", "--from", str(b)]),
        ("info --topo", FILE_FAMILIES, "topo.txt", lambda b, w: ["info", "--no-frameworks", "--from", str(CAPTURE),
                                                                 "--topo", str(b)]),
        ("info --nvlink", FILE_FAMILIES, "nv.txt", lambda b, w: ["info", "--no-frameworks", "--from", str(CAPTURE),
                                                                 "--nvlink", str(b)]),
        ("matrix resolve --vars", YAML_FAMILIES, "vars.yml", lambda b, w: ["matrix", "resolve", "--gpu", "H200", "--os",
                                                                           "debian12", "--vars", str(b)]),
        ("report FILE", REPORT_FAMILIES, "r.json", lambda b, w: ["report", str(b), "--md", str(w / "out.md")]),
        ("compare BASE OTHER", REPORT_FAMILIES, "r.json", lambda b, w: ["compare", str(REPORT), str(b)]),
        ("run --report", REPORT_FAMILIES, "r.json", lambda b, w: ["run", "mnist", *TINY, "--report", str(b)]),
        ("study run STUDY", (*YAML_FAMILIES, "YAML NaN"), "s.yml", lambda b, w: ["study", "run", str(b), "--study-dir",
                                                                                 str(w / "out")]),
        ("vm plan SPEC", YAML_FAMILIES, "vm.yml", lambda b, w: ["vm", "plan", str(b), "--connect", "test:///default"]),
        ("run --param content", FILE_FAMILIES[:5], "content.png", lambda b, w: ["run", "style_transfer", *TINY,
                                                                                "--param", f"content={b}"]),
    ]  # fmt: skip
    cases = []
    for command, families, name, argv in slots:
        for family in families:
            work = d()
            bad = make_bad(work / name, family)
            expect = "any" if (command, family) in DOCUMENTED else "fail"
            cases.append(Case(command, family, argv(bad, work), bad, expect=expect, watch=[REPORT]))
    for command, name, families, verb in (
        ("study status: study.json", "study.json", (*STUDY_DIR_FAMILIES, "record with a duplicate key"), "status"),
        ("study status: database.json", "database.json", (*STUDY_DIR_FAMILIES, "rows with a duplicate key"), "status"),
        ("study report: sessions.json", "sessions.json", STUDY_DIR_FAMILIES, "report"),
    ):
        for family in families:
            out = _study_dir(d())
            (out / name).unlink()
            cases.append(Case(command, family, ["study", verb, str(out)], make_bad(out / name, family)))
    for family in (*STUDY_DIR_FAMILIES, "rows with a duplicate key"):
        sweep = d() / "sweep"
        sweep.mkdir()
        bad = make_bad(sweep / "database.json", family)
        argv = ["sweep", "mnist", "--size", "tiny", "--steps", "1", "--gpus", "1", "--sweep-dir", str(sweep)]
        cases.append(Case("sweep --sweep-dir: database.json", family, argv, bad))
    return cases


def _suite_cases(d: Callable[[], Path]) -> list[Case]:
    """The validation suite's file options (pytest validate/): refused before the first test."""
    cases = []
    for option, families, name in (
        ("--baseline", ("missing", "FIFO", "empty", "deep JSON", "NaN", "duplicate key"), "base.json"),
        ("--from-xml", ("missing", "directory", "FIFO", "XML entity bomb"), "smi.xml"),
    ):
        for family in families:
            bad = make_bad(d() / name, family)
            cases.append(Case(f"validate {option}", family, [option, str(bad)], bad, tool="suite"))
    return cases


def _output_cases(d: Callable[[], Path]) -> list[Case]:
    """Outputs that are symbolic links (to a file that must not change) or the very file the command reads."""
    cases = []
    for command, argv in (
        ("report --md", lambda r, o: ["report", str(r), "--md", str(o)]),
        ("report --html", lambda r, o: ["report", str(r), "--html", str(o)]),
        ("compare --md", lambda r, o: ["compare", str(REPORT), str(r), "--md", str(o)]),
        ("study report --html", lambda r, o: ["study", "report", str(_study_dir(o.parent)), "--html", str(o)]),
    ):
        work = d()
        report, victim, link = work / "r.json", work / "victim.txt", work / "out"
        shutil.copy(REPORT, report)
        victim.write_text("a file the link points at: it must not change\n")
        link.symlink_to(victim)
        cases.append(Case(command, "output is a symbolic link", argv(report, link), link, watch=[victim, report]))
        if command.startswith("study"):
            continue  # its input is the study directory: below
        work = d()
        shutil.copy(REPORT, work / "r.json")
        same = argv(work / "r.json", work / "r.json")
        cases.append(Case(command, "output is the input", same, work / "r.json", watch=[work / "r.json"]))
    work = d()
    shutil.copy(REPORT, work / "victim.json")
    (work / "link.json").symlink_to(work / "victim.json")
    argv = ["run", "mnist", *TINY, "--report", str(work / "link.json")]
    cases.append(Case("run --report", "output is a symbolic link", argv, work / "link.json", expect="any"))
    out = _study_dir(d())
    argv = ["study", "report", str(out), "--md", str(out / "study.yml")]
    cases.append(Case("study report --md", "output is the input", argv, out / "study.yml", watch=[out / "study.yml"]))
    return cases


def all_cases(scratch: Path) -> list[Case]:
    counter = iter(range(10**6))

    def d() -> Path:
        path = scratch / f"{next(counter):04d}"
        path.mkdir()
        return path

    return _input_cases(d) + _output_cases(d) + _suite_cases(d)


# The fast subset: one of each kind of hazard, commands that import no framework.
QUICK = {
    ("report FILE", "FIFO"),
    ("report FILE", "deep JSON"),
    ("compare BASE OTHER", "absurd figure"),
    ("study run STUDY", "YAML alias bomb"),
    ("study status: study.json", "deep JSON"),
    ("report --md", "output is a symbolic link"),
    ("report --md", "output is the input"),
}


# --- running and judging -----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    case: Case
    rc: int | None  # None: killed at the time limit
    stderr: str
    seconds: float
    verdict: str = GOOD
    why: str = ""


def _digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"
    except OSError:
        return "unreadable"


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_case(case: Case, timeout: float = TIMEOUT_S) -> Outcome:
    """`case` in a child process of its own session (killed whole at the time limit), its outcome classified."""
    case.before = {str(p): _digest(p) for p in case.watch}
    if case.tool == "suite":
        cmd = [sys.executable, "-m", "pytest", str(REPO / "validate"), "-p", "no:cacheprovider", "-q", *case.argv]
    else:
        cmd = [sys.executable, "-m", "gpulab", *case.argv]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "200", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("GPULAB_TRACEBACK", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        cwd=case.bad.parent if case.bad.parent.is_dir() else REPO,
        env=env,
        start_new_session=True,
        preexec_fn=_limits,
    )
    try:
        _, stderr = proc.communicate(timeout=timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        rc = None
    return classify(Outcome(case, rc, stderr, time.monotonic() - started), timeout)


def classify(out: Outcome, timeout: float = TIMEOUT_S) -> Outcome:
    case = out.case
    prefix = "ERROR: " if case.tool == "suite" else "gpulab:"
    lines = [line for line in out.stderr.splitlines() if line.startswith(prefix)]
    changed = [Path(p).name for p, digest in case.before.items() if _digest(Path(p)) != digest]
    serious = [
        (out.rc is None, f"hang: still running after {timeout:g} s"),
        ("Traceback" in out.stderr, "a traceback"),
        (any("unexpected" in line for line in lines), "an internal error ('unexpected')"),
        (bool(changed), f"wrote over {', '.join(changed)} (through a link, or an input)"),
        (out.rc == 0 and case.expect == "fail", "exit 0 on bad input"),
    ]
    found = [why for hit, why in serious if hit]
    if found:
        out.verdict, out.why = SERIOUS, "; ".join(found)
        return out
    if out.rc == 0:
        return out  # a documented success
    wanted = 4 if case.tool == "suite" else 2  # pytest's usage error: the suite refused before the first test
    minor = [
        (out.rc != wanted, f"exit {out.rc}, not {wanted}"),
        (len(lines) != 1, f"{len(lines)} '{prefix.strip()}' lines, not one"),
        (bool(lines) and case.bad.name not in lines[0], "the message does not name the file"),
        (out.seconds > SLOW_S, f"slow: {out.seconds:.0f} s"),
    ]
    found = [why for hit, why in minor if hit]
    if found:
        out.verdict, out.why = MINOR, "; ".join(found)
    return out


def report(outcomes: list[Outcome]) -> str:
    counts = {v: sum(o.verdict == v for o in outcomes) for v in (GOOD, MINOR, SERIOUS)}
    text = [f"{len(outcomes)} cases: " + ", ".join(f"{n} {v}" for v, n in counts.items())]
    findings = sorted((o for o in outcomes if o.verdict != GOOD), key=lambda o: (o.verdict != SERIOUS, o.case.command))
    if findings:
        text += ["", "| class | command | bad input | exit | s | why | message |", "|---|---|---|---|---|---|---|"]
        for o in findings:
            first = next((line for line in o.stderr.splitlines() if line.strip()), "(nothing)")
            message = " ".join(first.split())[:140].replace("|", "/")
            text.append(
                f"| {o.verdict} | {o.case.command} | {o.case.family} | {o.rc} | {o.seconds:.1f} | {o.why} | {message} |"
            )
    return "\n".join(text)


def probe(*, quick: bool = False, only: str | None = None, jobs: int = 2, timeout: float = TIMEOUT_S) -> list[Outcome]:
    """Make the cases in a scratch folder, run them `jobs` at a time, and return their outcomes."""
    with tempfile.TemporaryDirectory(prefix="gpulab-hostile-") as tmp:
        cases = all_cases(Path(tmp))
        if quick:
            cases = [c for c in cases if (c.command, c.family) in QUICK]
        if only:
            cases = [c for c in cases if only.lower() in f"{c.command} {c.family}".lower()]
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            return list(pool.map(lambda c: run_case(c, timeout), cases))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="the fast subset (no framework import)")
    parser.add_argument("-k", dest="only", help="only cases whose command or family holds this text")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="cases at once (default 2)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"seconds per case (default {TIMEOUT_S:g})")
    args = parser.parse_args(argv)
    outcomes = probe(quick=args.quick, only=args.only, jobs=args.jobs, timeout=args.timeout)
    print(report(outcomes))
    return 1 if any(o.verdict == SERIOUS for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
