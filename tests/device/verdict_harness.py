"""Do validation verdicts repeat? Runs the standard tier several times on a healthy GPU machine, then with faults
put beside it, and checks that the healthy runs all pass and that each fault is caught where it should be.

Run on the GPU machine from the repository root (torch and nvidia-ml-py installed, no internet needed):

    OUT=/some/dir python tests/device/verdict_harness.py                      # 3 standard runs, then every fault
    OUT=/some/dir python tests/device/verdict_harness.py --quick              # smoke: quick tier, 1 healthy run
    python tests/device/verdict_harness.py --out DIR --healthy 5 --faults cotenant,gpumem --gpus 0,1

In this order:

1. `--healthy N` (default 3) runs of `pytest validate/ --tier standard` on the machine as it is.
2. The fault scenarios (`--faults`, default all three), each over a `-k` subset of the suite (SUBSETS) to stay short,
   with its load (tests/device/fault_load.py) started before the suite and stopped after it:
   - cotenant: a process pinned to the last selected GPU (CUDA_VISIBLE_DEVICES) runs matmuls 60 % of every 50 ms
     (`--duty`, `--period-ms`); the suite runs with --allow-busy, so it times the occupied GPU and the timing
     checks, not the occupancy check, must catch it. Expected: the run FAILS and a failing check names that GPU
     (GPU <index>, gpu<index>, cuda:<position>, [<index>], its bus id or UUID).
   - cpuhog: one pure-Python busy loop per CPU the harness may use. Expected: no GPU-side check fails (CPU rows
     may), and the report names the host's contention (a contention, pressure or calibration field or a host
     verdict in its host_load entries, or a host.* check; read tolerantly, whatever is found is shown).
   - gpumem: a process holding 70 % of the last selected GPU's free memory, idle. Expected: the run FAILS on
     occupancy.gpus_free, whose message names that GPU.
3. The summary: per check, how many healthy runs passed / failed / were marginal / skipped / errored and whether it
   gave the same status every time; per fault, which checks failed and whether the expectation held; each run's
   wall time and exit status.

Writes under $OUT (or --out; default /tmp/verdict-harness): harness.json (every run: command, exit status, wall
seconds, each check's status and message, host load; the table; each expectation and why it held or not),
harness.md (the same as tables, also printed at the end), and per run <run>/: the report (report-*.json, .md,
.html), run.json (the suite's --record), pytest.txt, and the fault load's log. Both summaries are rewritten after
every run, so a stopped harness leaves what it measured.

How long: on 2x H200 (2026-11-27) a standard run took 282-324 s (the first on a fresh machine the longest), the
cotenant run (occupancy and probes) 72 s, gpumem 11 s, cpuhog (probes and the one-GPU rows beside the busy loops)
139 s: the three healthy runs and the faults take about 20 minutes, more than one 10-minute device command: split
them with --healthy and --faults (each run's report is kept, and `gpulab compare` takes them from several calls).
--quick (quick tier, 1 healthy run, quick subsets) takes a few minutes.

Exit status: 0 when every healthy run ended PASS (marginal checks allowed; they are listed with their messages) and
every fault expectation held; 1 otherwise; 2 for bad arguments; 130 when stopped by Ctrl-C or SIGTERM.

Nothing is changed on the GPUs: no clocks, power limits or modes. Every process the harness starts leads its own
process group, and the group is stopped (SIGTERM, then SIGKILL) when its step ends, on errors, on Ctrl-C and on
SIGTERM; the loads also stop by themselves when the harness is gone.

The table and expectation logic (everything above "process control") reads recorded reports only:
tests/test_verdict_harness.py runs it on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LOAD_SCRIPT = Path(__file__).resolve().with_name("fault_load.py")
FAULTS = ("cotenant", "cpuhog", "gpumem")
STATUSES = ("pass", "fail", "marginal", "skip", "error")
BAD = frozenset({"fail", "error"})
# The part of the suite each fault runs. cotenant: the GPU timings (speedup is left out: it times the first GPU
# only, and the co-tenant sits on the last). cpuhog: the training rows that time the CPU beside the GPU (quick has
# none: its probes time both). gpumem: the occupancy look is taken before anything else runs.
SUBSETS = {
    # cotenant: the per-GPU probes name the slowed GPU; cpuhog: the probes and the one-GPU rows against known-good
    # (the CPU rows under busy loops take minutes and judge the host, which the contention figures name)
    "standard": {
        "cotenant": "occupancy or probes",
        "cpuhog": "probes or gpu_against_known_good",
        "gpumem": "occupancy",
    },
    "quick": {"cotenant": "occupancy or probes", "cpuhog": "probes", "gpumem": "occupancy"},
}
EXPECTED = {
    "cotenant": "FAIL: a failing timing check names the co-tenant's GPU (occupancy is not enforced: --allow-busy)",
    "cpuhog": "no GPU-side check fails, and the report names the host contention",
    "gpumem": "FAIL on occupancy.gpus_free, naming the GPU whose memory is held",
}
OCCUPANCY = "occupancy.gpus_free"


# --- reading runs ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuRef:
    """The GPU a fault is put on: its NVML index, its place among the selected GPUs (the suite's cuda:<position>),
    its UUID and PCI bus id."""

    index: int
    position: int
    uuid: str = ""
    bus_id: str = ""
    name: str = ""

    def patterns(self) -> list[str]:
        found = [rf"\bGPU {self.index}\b", rf"\bgpu{self.index}\b", rf"\bcuda:{self.position}\b", rf"\[{self.index}\]"]
        if self.uuid:
            found.append(re.escape(self.uuid))
        bus = short_bus_id(self.bus_id)
        if bus:
            found.append(rf"(?<![0-9a-f]){re.escape(bus)}\b")
        return found

    def named_in(self, text: str) -> bool:
        return any(re.search(p, text, re.IGNORECASE) for p in self.patterns())

    def label(self) -> str:
        return f"GPU {self.index}" + (f" ({self.name})" if self.name else "")


def short_bus_id(bus_id: str) -> str:
    """The bus:device.function part, which NVML ("00000000:07:00.0") and reports ("0000:07:00.0") share."""
    found = re.search(r"([0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])$", bus_id.strip().lower())
    return found.group(1) if found else ""


def run_entry(
    name: str,
    report: dict[str, Any] | None,
    *,
    exit_status: int | None,
    seconds: float | None,
    command: Sequence[str] | None = None,
    report_path: str | None = None,
    problem: str | None = None,
    load: str | None = None,
) -> dict[str, Any]:
    """One run as the harness keeps it: what ran, how it ended, and every check's status and message."""
    report = report or {}
    checks = [
        {"name": str(c.get("name")), "status": str(c.get("status")), "message": str(c.get("message") or "")}
        for c in report.get("checks") or []
    ]
    # Top-level fields a host or GPU verdict may be written under (the report schema is still growing them).
    verdicts = {k: v for k, v in report.items() if k != "host_load" and ("verdict" in k or k.startswith("host"))}
    return {
        "name": name,
        "command": list(command) if command else None,
        "exit_status": exit_status,
        "seconds": None if seconds is None else round(seconds, 1),
        "report": report_path,
        "interrupted": bool(report.get("interrupted")),
        "checks": checks,
        "host_load": list(report.get("host_load") or []),
        "verdicts": verdicts,
        "problem": problem,
        "load": load,
    }


def read_outcome(
    where: Path, record: Path, since: float | None = None
) -> tuple[dict[str, Any] | None, str | None, int | None]:
    """(report, its path, the record's exit status) a run left in `where`: through its --record, else the newest
    report-*.json there written from `since` (a time.time()) on."""
    path: Path | None = None
    exit_status = None
    try:
        rec = json.loads(record.read_text())
        path = Path(rec["report"]["json"])
        exit_status = rec.get("exit_status")
    except (OSError, ValueError, KeyError, TypeError):
        reports = sorted(
            (p for p in where.glob("report-*.json") if since is None or p.stat().st_mtime >= since),
            key=lambda p: p.stat().st_mtime,
        )
        path = reports[-1] if reports else None
    if path is None:
        return None, None, exit_status
    try:
        return json.loads(path.read_text()), str(path), exit_status
    except (OSError, ValueError):
        return None, str(path), exit_status


def unreadable(run: dict[str, Any]) -> str | None:
    """Why a run cannot be judged, or None."""
    if run.get("problem"):
        return str(run["problem"])
    if not run["checks"]:
        return "no report with checks was written (see its pytest.txt)"
    return None


def failing(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in run["checks"] if c["status"] in BAD]


def check(run: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((c for c in run["checks"] if c["name"] == name), None)


def host_side(name: str) -> bool:
    """A check that judges the host, not a GPU: the CPU rows and host checks."""
    return name.startswith(("host.", "speedup.cpu[", "probe.copy_host")) or re.search(r"\[cpu\b", name) is not None


# --- the table over healthy runs ---------------------------------------------------------------------------------


def check_table(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per check name: how many runs gave each status, how many lacked it, and whether all gave the same one."""
    table: dict[str, dict[str, Any]] = {}
    for run in runs:
        for c in run["checks"]:
            row = table.setdefault(c["name"], {s: 0 for s in STATUSES})
            row[c["status"]] = row.get(c["status"], 0) + 1
    for row in table.values():
        seen = sum(v for k, v in row.items() if k not in ("missing", "repeats"))
        row["missing"] = len(runs) - seen
        row["repeats"] = row["missing"] == 0 and sum(1 for k, v in row.items() if k not in ("missing",) and v) == 1
    return dict(sorted(table.items()))


def healthy_verdict(run: dict[str, Any]) -> dict[str, Any]:
    """A healthy run must end PASS: no check failed or errored, not interrupted, exit status 0. A marginal check is
    allowed (listed with its message); where marginal checks alone end a run with exit 1, that is allowed too."""
    marginal = [{"name": c["name"], "message": c["message"]} for c in run["checks"] if c["status"] == "marginal"]
    bad = failing(run)
    why = unreadable(run)
    if why is None and bad:
        why = f"{len(bad)} check{'s' if len(bad) != 1 else ''} failed: " + ", ".join(c["name"] for c in bad)
    if why is None and run["interrupted"]:
        why = "the run was interrupted"
    code = run["exit_status"]
    if why is None and code != 0 and not (marginal and code == 1):
        why = f"exit status {code} with no failing check" + (" (6: inconclusive)" if code == 6 else "")
    if why is None:
        why = "PASS" + (f" with {len(marginal)} marginal" if marginal else "")
        return {"ok": True, "why": why, "marginal": marginal}
    return {"ok": False, "why": why, "marginal": marginal}


# --- host contention, read tolerantly ----------------------------------------------------------------------------

CONTENTION_KEY = re.compile(r"contend|contention|pressure|calibrat", re.IGNORECASE)
CONTENDED_TEXT = re.compile(r"contend|contention", re.IGNORECASE)
NEGATED = re.compile(r"\b(not|un|no|without)[ -]?contend|\bno contention\b|\buncontended\b", re.IGNORECASE)
QUIET_WORDS = frozenset({"", "pass", "quiet", "ok", "clean", "idle", "none", "no", "false", "n/a"})


def _says_contended(key: str, value: Any) -> bool:
    key = key.lower()
    if isinstance(value, bool):
        return value and "contend" in key
    if not isinstance(value, str):
        return False
    if NEGATED.search(value):
        return False
    if CONTENDED_TEXT.search(value):
        return True
    return ("verdict" in key or "contend" in key) and value.strip().lower() not in QUIET_WORDS


def host_contention(run: dict[str, Any]) -> dict[str, Any]:
    """What a run's report says of host contention: the contention-like fields found (path: value), the paths that
    name it, and the busy share and load average every report records."""
    fields: dict[str, Any] = {}
    named: list[str] = []

    def walk(value: Any, path: str, key: str, inside: bool) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}", str(k), inside or bool(CONTENTION_KEY.search(str(k))))
        elif isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
            for i, v in enumerate(value):
                walk(v, f"{path}[{i}]", key, inside)
        elif inside or "verdict" in key.lower() or (isinstance(value, str) and CONTENDED_TEXT.search(value)):
            fields[path] = value
            if _says_contended(key, value) and path not in named:
                named.append(path)

    for i, entry in enumerate(run["host_load"]):
        walk(entry, f"host_load[{i}]", "", False)
    walk(run.get("verdicts") or {}, "report", "", False)
    for c in run["checks"]:
        if c["name"].startswith("host."):
            fields[f"check {c['name']}"] = f"{c['status']}: {c['message']}"
            if c["status"] in ("fail", "marginal") or _says_contended("", c["message"]):
                named.append(f"check {c['name']}")
    loads = run["host_load"]
    try:  # gpulab's own rule (src/ on the path), when this gpulab has it
        from gpulab.report.contention import report_contention

        reason = report_contention([e for e in loads if isinstance(e, dict)])
    except ImportError:
        reason = None
    if reason:
        fields["gpulab contention rule"] = reason
        named.append("gpulab contention rule")
    return {
        "named": bool(named),
        "where": named,
        "fields": fields,
        "busy_pct": [e.get("busy_pct") for e in loads if isinstance(e, dict)],
        "loadavg_start": [e.get("loadavg_start") for e in loads if isinstance(e, dict)],
    }


# --- fault expectations ------------------------------------------------------------------------------------------


def _expectation(scenario: str, held: bool, why: str, run: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "expected": EXPECTED[scenario],
        "held": held,
        "why": why,
        "failing": [{"name": c["name"], "status": c["status"], "message": c["message"]} for c in failing(run)],
        **extra,
    }


def _names(checks: Iterable[dict[str, Any]], limit: int = 6) -> str:
    names = [c["name"] for c in checks]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def expect_cotenant(run: dict[str, Any], gpu: GpuRef | None) -> dict[str, Any]:
    """The run fails, and a failing check other than the occupancy check names the co-tenant's GPU."""
    occupancy = check(run, OCCUPANCY)
    seen = {"occupancy": occupancy and f"{occupancy['status']}: {occupancy['message']}"}
    why = unreadable(run) or (None if gpu is not None else "no GPU to put the co-tenant on")
    if why is not None or gpu is None:
        return _expectation("cotenant", False, why or "", run, naming=[], **seen)
    bad = failing(run)
    naming = [c for c in bad if not c["name"].startswith("occupancy.") and gpu.named_in(f"{c['name']} {c['message']}")]
    names = [c["name"] for c in naming]
    if run["exit_status"] == 0 or not bad:
        why, held = f"the run passed (exit {run['exit_status']}): the co-tenant on {gpu.label()} went unnoticed", False
    elif not naming:
        why, held = f"{len(bad)} failing check(s), none naming {gpu.label()}: {_names(bad)}", False
    else:
        why, held = f"{len(naming)} failing check(s) name {gpu.label()}: {_names(naming)}", True
    return _expectation("cotenant", held, why, run, naming=names, **seen)


def expect_cpuhog(run: dict[str, Any], gpu: GpuRef | None = None) -> dict[str, Any]:
    """No GPU-side check fails (host-side ones may), and the report names the host contention."""
    contention = host_contention(run)
    why = unreadable(run)
    if why is not None:
        return _expectation("cpuhog", False, why, run, contention=contention, host_failing=[])
    bad = failing(run)
    gpu_bad = [c for c in bad if not host_side(c["name"])]
    host_bad = [c["name"] for c in bad if host_side(c["name"])]
    problems = []
    if gpu_bad:
        problems.append(f"GPU-side checks failed: {_names(gpu_bad)}")
    if run["interrupted"]:
        problems.append("the run was interrupted")
    if not contention["named"]:
        found = ", ".join(contention["fields"]) or "no contention field, no host verdict"
        busy = [b for b in contention["busy_pct"] if b is not None]
        problems.append(
            f"host contention not named ({found}" + (f"; busy {max(busy):.0f} % of CPU time" if busy else "") + ")"
        )
    if problems:
        return _expectation("cpuhog", False, "; ".join(problems), run, contention=contention, host_failing=host_bad)
    why = "no GPU-side check failed; contention named at " + ", ".join(contention["where"])
    if host_bad:
        why += f" (host-side checks failed: {', '.join(host_bad)})"
    return _expectation("cpuhog", True, why, run, contention=contention, host_failing=host_bad)


def expect_gpumem(run: dict[str, Any], gpu: GpuRef | None) -> dict[str, Any]:
    """The run fails on the occupancy check, whose message names the GPU whose memory is held."""
    why = unreadable(run) or (None if gpu is not None else "no GPU to hold memory on")
    if why is not None or gpu is None:
        return _expectation("gpumem", False, why or "", run)
    occupancy = check(run, OCCUPANCY)
    if occupancy is None:
        return _expectation("gpumem", False, f"{OCCUPANCY} did not run (is it in the -k subset?)", run)
    if occupancy["status"] != "fail":
        why = f"{OCCUPANCY} {occupancy['status']}: {occupancy['message']}"
        return _expectation("gpumem", False, why, run)
    if not gpu.named_in(occupancy["message"]):
        return _expectation("gpumem", False, f"{OCCUPANCY} failed without naming {gpu.label()}", run)
    if run["exit_status"] == 0:
        return _expectation("gpumem", False, f"{OCCUPANCY} failed but the run exited 0", run)
    return _expectation("gpumem", True, f"{OCCUPANCY} failed naming {gpu.label()}", run)


EXPECTATIONS: dict[str, Callable[[dict[str, Any], GpuRef | None], dict[str, Any]]] = {
    "cotenant": expect_cotenant,
    "cpuhog": expect_cpuhog,
    "gpumem": expect_gpumem,
}


def summarize(
    healthy: Sequence[dict[str, Any]],
    faults: dict[str, dict[str, Any]],
    gpu: GpuRef | None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything harness.json holds: the runs with their verdicts, the table, each fault's expectation, and ok."""
    runs = [{**run, "verdict": healthy_verdict(run), "contention": host_contention(run)} for run in healthy]
    judged = {name: {"run": run, "expectation": EXPECTATIONS[name](run, gpu)} for name, run in faults.items()}
    reasons = [f"{r['name']}: {r['verdict']['why']}" for r in runs if not r["verdict"]["ok"]]
    reasons += [f"{n}: {f['expectation']['why']}" for n, f in judged.items() if not f["expectation"]["held"]]
    if not runs and not judged and not (meta or {}).get("interrupted"):
        reasons.append("nothing ran")
    if (meta or {}).get("interrupted"):
        cut = (meta or {}).get("cut_short")
        reasons.append("the harness was interrupted" + (f" during {cut['name']}" if cut else ""))
    return {
        "meta": meta or {},
        "gpu": None if gpu is None else vars(gpu),
        "ok": not reasons,
        "reasons": reasons,
        "healthy": runs,
        "table": check_table(healthy),
        "faults": judged,
    }


# --- rendering ---------------------------------------------------------------------------------------------------


def _cell(value: Any, limit: int = 160) -> str:
    text = "-" if value is None or value == "" else str(value)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row(*cells: Any) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _run_rows(summary: dict[str, Any]) -> list[str]:
    lines = [_row("run", "exit", "wall s", "verdict", "failing", "marginal"), "|---|---|---|---|---|---|"]
    for run in summary["healthy"]:
        v = run["verdict"]
        lines.append(
            _row(
                run["name"],
                run["exit_status"],
                run["seconds"],
                v["why"] if v["ok"] else f"NOT PASS: {v['why']}",
                _names(failing(run)),
                len(v["marginal"]) or "-",
            )
        )
    for fault in summary["faults"].values():
        run, exp = fault["run"], fault["expectation"]
        held = "expectation held" if exp["held"] else "EXPECTATION NOT HELD"
        lines.append(_row(run["name"], run["exit_status"], run["seconds"], held, _names(failing(run)), "-"))
    return lines


def render_markdown(summary: dict[str, Any]) -> str:
    meta = summary["meta"]
    gpu = summary["gpu"]
    head = f"# Verdict harness: {meta.get('host', '?')}, tier {meta.get('tier', '?')}, {meta.get('started', '')}"
    out = [head, ""]
    out.append(f"**{'OK' if summary['ok'] else 'NOT OK'}**" + ("" if summary["ok"] else ":"))
    out += [f"- {_cell(r, 400)}" for r in summary["reasons"]]
    if gpu:
        out.append(f"\nFaults put on GPU {gpu['index']} (cuda:{gpu['position']}, {gpu['bus_id'] or '?'})")
    out += ["", "## Runs", "", *_run_rows(summary)]
    n = len(summary["healthy"])
    out += ["", f"## Checks over {n} healthy run{'s' if n != 1 else ''}", ""]
    out.append(_row("check", *STATUSES, "missing", "same every run"))
    out.append("|---" * (len(STATUSES) + 3) + "|")
    table = summary["table"]
    for name in sorted(table, key=lambda k: (table[k]["repeats"], k)):  # the ones that moved first
        row = table[name]
        extra = sorted(k for k in row if k not in (*STATUSES, "missing", "repeats"))
        label = name + (f" ({', '.join(f'{k} {row[k]}' for k in extra)})" if extra else "")
        out.append(_row(label, *(row[s] for s in STATUSES), row["missing"], "yes" if row["repeats"] else "NO"))
    runs = [*summary["healthy"], *(f["run"] for f in summary["faults"].values())]
    bad = [(r["name"], c) for r in runs for c in failing(r)]
    if bad:
        out += ["", "## Failing checks", ""]
        out += [f"- {run} · {c['name']} ({c['status']}): {_cell(c['message'], 400)}" for run, c in bad]
    marginal = [(r["name"], m) for r in summary["healthy"] for m in r["verdict"]["marginal"]]
    if marginal:
        out += ["", "## Marginal checks in healthy runs", ""]
        out += [f"- {run} · {m['name']}: {_cell(m['message'], 400)}" for run, m in marginal]
    if summary["faults"]:
        out += ["", "## Fault scenarios", "", _row("scenario", "-k", "expected", "held", "failing checks", "why")]
        out.append("|---|---|---|---|---|---|")
        for name, fault in summary["faults"].items():
            exp = fault["expectation"]
            k = fault["run"].get("command") or []
            subset = k[k.index("-k") + 1] if "-k" in k else "-"
            held = "yes" if exp["held"] else "NO"
            out.append(_row(name, subset, exp["expected"], held, _names(exp["failing"]), _cell(exp["why"], 400)))
    return "\n".join(out) + "\n"


def write_outputs(out: Path, summary: dict[str, Any]) -> str:
    md = render_markdown(summary)
    for name, text in (("harness.json", json.dumps(summary, indent=2, default=str) + "\n"), ("harness.md", md)):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        tmp.replace(out / name)
    return md


# --- process control ---------------------------------------------------------------------------------------------


class LoadFailed(RuntimeError):
    """A fault load did not start."""


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


@dataclass
class Children:
    """Every process the harness starts, each leading its own process group (so Ctrl-C at the terminal reaches
    only the harness, which stops them in order)."""

    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, cmd: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                list(cmd), cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> int | None:
        """SIGTERM to its group, SIGKILL after `grace_s`; then SIGKILL to what is left of the group."""
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        _signal_group(proc, signal.SIGKILL)  # members that outlived their leader
        if proc in self.procs:
            self.procs.remove(proc)
        return proc.returncode

    def stop_all(self, grace_s: float = 10.0) -> None:
        for proc in reversed(list(self.procs)):
            self.stop(proc, grace_s)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"stopped by signal {signum}")


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored while the harness stops what it started (a second one must not cut that short)."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def cpus() -> int:
    """The CPUs this process may run on (its affinity; the host's count where that cannot be read)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}" + (f":{path}" if path else ""), **(extra or {})}


def find_gpus() -> list[dict[str, Any]]:
    """The host's GPUs through NVML (index, name, UUID, bus id); [] where NVML cannot be read."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name, uuid, bus = (
                pynvml.nvmlDeviceGetName(h),
                pynvml.nvmlDeviceGetUUID(h),
                pynvml.nvmlDeviceGetPciInfo(h).busId,
            )
            found.append({"index": i, "name": _text(name), "uuid": _text(uuid), "bus_id": _text(bus)})
        return found
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def target_gpu(found: list[dict[str, Any]], spec: str) -> GpuRef | None:
    """The last GPU `--gpus` selects (the suite's own rule, gpulab.validation.session.gpus_for_option)."""
    if not found:
        return None
    from types import SimpleNamespace

    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))  # run as a script from a checkout where gpulab is not installed
    from gpulab.validation.session import gpus_for_option

    selected = gpus_for_option([SimpleNamespace(**g) for g in found], spec)  # type: ignore[arg-type]
    last = selected[-1]
    return GpuRef(last.index, len(selected) - 1, last.uuid, last.bus_id, last.name)


@dataclass
class Harness:
    out: Path
    tier: str
    gpus: str
    timeout_s: float
    children: Children = field(default_factory=Children)
    cut_short: dict[str, Any] | None = None  # the run a Ctrl-C or SIGTERM stopped

    def suite(
        self, name: str, k: str | None = None, args: Sequence[str] = (), load: str | None = None
    ) -> dict[str, Any]:
        """One validation run into out/<name>/; the run as run_entry keeps it."""
        where = self.out / name
        where.mkdir(parents=True, exist_ok=True)
        record = where / "run.json"
        record.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "pytest", "validate/", "-p", "no:cacheprovider", "--tier", self.tier]
        cmd += ["--gpus", self.gpus, "--report-dir", str(where), "--record", str(record), *args]
        cmd += ["-k", k] if k else []
        print(f"[harness] {name}: {' '.join(cmd[2:])}", flush=True)
        started, since = time.monotonic(), time.time()
        proc = self.children.start(cmd, _env(), where / "pytest.txt")
        problem = None
        try:
            proc.wait(self.timeout_s)
        except subprocess.TimeoutExpired:
            problem = f"stopped after {self.timeout_s:.0f} s (--run-timeout)"
        except KeyboardInterrupt:  # keep what the stopped run wrote, then stop the harness
            with signals_held():
                self.children.stop(proc, grace_s=60)
                report, path, recorded = read_outcome(where, record, since)
                self.cut_short = run_entry(
                    name,
                    report,
                    exit_status=proc.returncode if recorded is None else recorded,
                    seconds=time.monotonic() - started,
                    command=cmd[2:],
                    report_path=path,
                    problem="the harness was stopped during this run",
                    load=load,
                )
            raise
        finally:
            self.children.stop(proc, grace_s=60)  # SIGTERM: the suite still writes its report
        seconds = time.monotonic() - started
        # The record's exit status is the run's verdict; the process's own differs only when it was stopped after
        # writing it (a SIGTERM in pytest's clean-up).
        report, path, recorded = read_outcome(where, record, since)
        run = run_entry(
            name,
            report,
            exit_status=proc.returncode if recorded is None else recorded,
            seconds=seconds,
            command=cmd[2:],
            report_path=path,
            problem=problem,
            load=load,
        )
        print(f"[harness] {name}: exit {run['exit_status']} after {seconds:.0f} s", flush=True)
        return run

    def load(self, where: Path, name: str, args: Sequence[str], env: dict[str, str] | None = None) -> Any:
        """Start a fault load (fault_load.py) and wait until it says it is ready."""
        ready = where / f"{name}.ready"
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, str(LOAD_SCRIPT), "--ready-file", str(ready), "--parent", str(os.getpid()), *args]
        log = where / f"{name}.log"
        proc = self.children.start(cmd, _env(env), log)
        deadline = time.monotonic() + 180
        while not ready.exists():
            if proc.poll() is not None:
                self.children.stop(proc)
                tail = log.read_text(errors="replace")[-1500:]
                raise LoadFailed(f"{name} load exited {proc.returncode} before it was ready: {tail}")
            if time.monotonic() > deadline:
                self.children.stop(proc)
                raise LoadFailed(f"{name} load not ready after 180 s")
            time.sleep(0.2)
        print(f"[harness] {name}: {ready.read_text().strip()}", flush=True)
        return proc


def run_fault(h: Harness, name: str, gpu: GpuRef | None, opts: argparse.Namespace) -> dict[str, Any]:
    """One fault scenario: its load started, the suite's subset run beside it, the load stopped (also on errors)."""
    where = h.out / f"fault-{name}"
    where.mkdir(parents=True, exist_ok=True)
    k = SUBSETS[h.tier][name]
    pinned = {"CUDA_VISIBLE_DEVICES": gpu.uuid or str(gpu.index)} if gpu else {}
    if name == "cpuhog":
        procs = cpus()
        load_args, env, suite_args, what = ["cpu", "--procs", str(procs)], {}, [], f"{procs} busy loops"
    elif gpu is None:
        return run_entry(f"fault-{name}", None, exit_status=None, seconds=None, problem="no GPU found through NVML")
    elif name == "cotenant":
        load_args = ["gpu", "--duty", str(opts.duty), "--period-ms", str(opts.period_ms)]
        env, suite_args = pinned, ["--allow-busy"]
        what = f"matmuls {opts.duty:.0%} of every {opts.period_ms:g} ms on {gpu.label()}"
    else:
        load_args = ["gpu", "--duty", "0", "--hold-fraction", str(opts.hold_fraction)]
        env, suite_args, what = pinned, [], f"{opts.hold_fraction:.0%} of {gpu.label()}'s free memory held"
    try:
        proc = h.load(where, name, load_args, env)
    except LoadFailed as err:
        return run_entry(f"fault-{name}", None, exit_status=None, seconds=None, problem=str(err), load=what)
    try:
        time.sleep(2)  # settled: a few duty periods, the memory taken
        return h.suite(f"fault-{name}", k, suite_args, load=what)
    finally:
        code = h.children.stop(proc)
        print(f"[harness] {name}: load stopped (exit {code})", flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/verdict-harness")))
    p.add_argument("--healthy", type=int, default=None, help="healthy runs first (default 3; 1 with --quick)")
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, any of {','.join(FAULTS)}; '' none")
    p.add_argument("--quick", action="store_true", help="the quick tier, 1 healthy run, the quick subsets")
    p.add_argument("--gpus", default="all", help="the suite's --gpus; faults go on the last selected GPU")
    p.add_argument("--duty", type=float, default=0.6, help="cotenant: busy share of each period (default 0.6)")
    p.add_argument("--period-ms", type=float, default=50.0, help="cotenant: the period (default 50 ms)")
    p.add_argument("--hold-fraction", type=float, default=0.7, help="gpumem: share of free memory held (0.7)")
    p.add_argument("--run-timeout", type=float, default=1800.0, help="stop a suite run after this long (s)")
    args = p.parse_args(argv)
    args.tier = "quick" if args.quick else "standard"
    args.healthy = (1 if args.quick else 3) if args.healthy is None else args.healthy
    args.fault_list = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in args.fault_list if f not in FAULTS]
    if unknown:
        p.error(f"--faults: unknown {', '.join(unknown)}; choose from {', '.join(FAULTS)}")
    if args.healthy < 0:
        p.error("--healthy: give 0 or more runs")
    if not 0 < args.duty <= 1 or not 0 < args.hold_fraction < 1 or args.period_ms <= 0:
        p.error("--duty takes (0, 1], --hold-fraction (0, 1), --period-ms above 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    found = find_gpus()
    try:
        gpu = target_gpu(found, args.gpus)
    except Exception as err:  # gpulab's GpulabError: a --gpus this host cannot satisfy
        print(f"verdict_harness.py: error: {err}", file=sys.stderr)
        return 2
    meta: dict[str, Any] = {
        "host": socket.gethostname(),
        "tier": args.tier,
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": [sys.executable, *sys.argv],
        "gpus_found": found,
        "gpus": args.gpus,
        "subsets": {f: SUBSETS[args.tier][f] for f in args.fault_list},
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "interrupted": False,
    }
    h = Harness(args.out, args.tier, args.gpus, args.run_timeout)
    healthy: list[dict[str, Any]] = []
    faults: dict[str, dict[str, Any]] = {}
    # SIGINT too: a harness started in the background inherits it ignored, and must still stop cleanly on it.
    previous = {s: signal.signal(s, _interrupt) for s in STOP_SIGNALS}
    started = time.monotonic()
    try:
        for i in range(1, args.healthy + 1):
            healthy.append(h.suite(f"healthy-{i}"))
            write_outputs(args.out, summarize(healthy, faults, gpu, meta))
        for name in args.fault_list:
            try:
                faults[name] = run_fault(h, name, gpu, args)
            except (OSError, subprocess.SubprocessError, RuntimeError) as err:  # recorded; the next fault still runs
                (args.out / f"fault-{name}").mkdir(parents=True, exist_ok=True)
                (args.out / f"fault-{name}" / "harness-error.txt").write_text(traceback.format_exc())
                faults[name] = run_entry(f"fault-{name}", None, exit_status=None, seconds=None, problem=repr(err))
            write_outputs(args.out, summarize(healthy, faults, gpu, meta))
    except KeyboardInterrupt:
        meta["interrupted"] = True
        meta["cut_short"] = h.cut_short
        print("[harness] interrupted: stopping what it started", flush=True)
    finally:
        with signals_held():
            h.children.stop_all()
        for s, handler in previous.items():
            signal.signal(s, handler)
    meta["seconds"] = round(time.monotonic() - started, 1)
    summary = summarize(healthy, faults, gpu, meta)
    print(write_outputs(args.out, summary))
    print(f"[harness] wrote {args.out / 'harness.json'} and {args.out / 'harness.md'}")
    if meta["interrupted"]:
        return 130
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
