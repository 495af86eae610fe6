"""The validate/ suite itself, run as users run it: on this (GPU-less) machine and on the captured 4x H200."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from capture_edits import P100_XML, all_na, with_versions, write
from gpulab.errors import GpulabError
from gpulab.hw import nvml
from gpulab.hw.cuda_visible import visible_to_cuda
from gpulab.hw.discover import fingerprint
from gpulab.report import contention, views
from gpulab.report.io import load_report
from gpulab.validation.plugin import EXIT_INCONCLUSIVE
from gpulab.validation.session import gpus_for_option
from report_builders import quiet_proc

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "h200x4-firecracker"
CAPTURES = ROOT / "tests" / "fixtures" / "captures"


def run_validate(tmp_path, *args, timeout=300, env=None):
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "validate"),
        "-p",
        "no:cacheprovider",
        "--report-dir",
        str(tmp_path),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)
    reports = sorted(tmp_path.glob("report-*.json"))
    return proc, reports


@pytest.mark.skipif(
    bool(nvml.query().gpus), reason="this machine has an NVIDIA GPU: the GPU-less path needs one without"
)
def test_no_gpu_machine_passes_with_cpu_results_and_a_verdict(tmp_path):
    record = tmp_path / "records" / "run.json"  # its directory is created
    proc, reports = run_validate(tmp_path, "--record", str(record))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "no NVIDIA GPU/driver found" in out
    assert len(reports) == 1 and f"report: {reports[0]}" in out
    # away from a terminal the suite's progress is a few plain lines, the last when every test has run
    suite = [line for line in out.splitlines() if line.startswith("suite (quick): ")]
    assert 1 <= len(suite) <= 12 and suite[-1].split(" · ")[0].endswith(" tests")
    done, total = suite[-1].removeprefix("suite (quick): ").split(" ")[0].split("/")
    assert done == total and int(total) > 10
    report = load_report(reports[0])
    assert report.fingerprint["gpus"] == []
    cpu = [r for r in report.results if r.launcher == "cpu"]
    assert {r.workload for r in cpu} == {"matmul", "copy_host"} and all(r.value > 0 for r in cpu)
    assert {c.status for c in report.checks} <= {"pass", "skip"}
    assert any(c.status == "skip" and "no NVIDIA GPU/driver found" in c.message for c in report.checks)
    assert reports[0].with_suffix(".html").is_file() and reports[0].with_suffix(".md").is_file()
    # The host measured over the run (a calibration at each end) and its verdict beside the checks' in the summary
    (load,) = report.host_load
    assert load["calibration_start"]["all_threads"] > 0 and load["calibration_end"]["all_threads"] > 0
    assert re.search(r"^verdict: PASS: .* · host: (quiet|contended) — ", out, re.M), out
    # The run's record: what a tool that started the run reads instead of the output above.
    counts = {s: sum(c.status == s for c in report.checks) for s in ("pass", "fail", "skip", "error", "marginal")}
    assert json.loads(record.read_text()) == {
        "schema": "gpulab.run-record/1",
        "host": socket.gethostname(),
        "tier": "quick",
        "exit_status": 0,
        "interrupted": False,
        "report": {
            "json": str(reports[0]),
            "md": str(reports[0].with_suffix(".md")),
            "html": str(reports[0].with_suffix(".html")),
        },
        "counts": counts,
    }
    assert [p.name for p in record.parent.iterdir()] == ["run.json"]  # written atomically: no temporary left


def test_the_record_holds_a_failed_runs_exit_status_and_replaces_an_older_one(tmp_path):
    record = tmp_path / "run.json"
    record.write_text("an older run's record")
    args = ("--from-xml", str(FIX / "nvidia-smi-q-x.xml"), "--expect-gpus", "8", "-k", "gpu_count")
    proc, reports = run_validate(tmp_path, *args, "--record", str(record))
    assert proc.returncode == 1, proc.stdout
    data = json.loads(record.read_text())
    assert data["exit_status"] == 1 and data["interrupted"] is False and data["host"] == "captured: nvidia-smi-q-x.xml"
    assert data["counts"] == {"pass": 0, "fail": 1, "skip": 0, "error": 0, "marginal": 0}
    assert data["report"]["json"] == str(reports[0])


def test_captured_h200_is_judged_healthy(tmp_path):
    proc, reports = run_validate(
        tmp_path,
        "--from-xml",
        str(FIX / "nvidia-smi-q-x.xml"),
        "--topo",
        str(FIX / "nvidia-smi-topo-m.txt"),
        "--expect-gpus",
        "4",
        "-k",
        "health",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = load_report(reports[0])
    assert len(report.fingerprint["gpus"]) == 4
    assert report.fingerprint["host"] is None and report.fingerprint["software"]["driver_version"] == "580.159.04"
    names = {c.name for c in report.checks if c.status == "pass"}
    assert {f"health.pcie_link[{i}]" for i in range(4)} <= names
    assert {f"health.ecc[{i}]" for i in range(4)} <= names


def test_faulty_capture_fails_naming_cause_and_fix(tmp_path):
    xml = (FIX / "nvidia-smi-q-x.xml").read_text()
    # GPU 0 trained at x8 and lost persistence mode.
    first, rest = xml.split("<current_link_width>16x</current_link_width>", 1)
    xml = first + "<current_link_width>8x</current_link_width>" + rest
    xml = xml.replace(
        "<persistence_mode>Enabled</persistence_mode>", "<persistence_mode>Disabled</persistence_mode>", 1
    )
    bad = tmp_path / "bad.xml"
    bad.write_text(xml)
    proc, reports = run_validate(tmp_path, "--from-xml", str(bad), "--expect-gpus", "4", "-k", "health")
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "x8 of x16" in out and "nvidia-persistenced" in out
    report = load_report(reports[0])
    failed = {c.name for c in report.checks if c.status == "fail"}
    assert failed == {"health.pcie_link[0]", "health.persistence[0]"}


def test_wrong_gpu_count_fails(tmp_path):
    proc, _ = run_validate(
        tmp_path, "--from-xml", str(FIX / "nvidia-smi-q-x.xml"), "--expect-gpus", "8", "-k", "gpu_count"
    )
    assert proc.returncode == 1 and "expected 8 GPUs, the capture lists 4" in proc.stdout


def test_2017_capture_is_judged_on_what_it_holds(tmp_path):
    """Driver 375.66 with CUDA 8.0: judged on the capture, never on this machine's toolkit, CPU or name."""
    xml = write(tmp_path / "p100-375.xml", with_versions(P100_XML.read_text(), "375.66", "8.0"))
    proc, reports = run_validate(tmp_path, "--from-xml", str(xml), "--expect-gpus", "2")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"judged a capture: {xml}" in out
    report = load_report(reports[0])
    status = {c.name: c.status for c in report.checks}
    # Persistence mode was off on that machine, memory no listed process explains was in use, and no CUDA or
    # framework in use today runs on driver R375; nothing else fails.
    assert {n for n, st in status.items() if st in ("fail", "error")} == {
        "occupancy.gpus_free",
        "health.persistence[0]",
        "health.persistence[1]",
        "health.stack_supports_arch",
    }
    messages = {c.name: c.message for c in report.checks}
    assert status["health.driver_for_cuda"] == "skip"
    assert "the captured driver's CUDA 8.0: CUDA 8.0 is unknown" in messages["health.driver_for_cuda"]
    assert "the newest stack for this GPU is driver R580" in messages["health.stack_supports_arch"]
    assert status["health.gpu_count"] == "pass" and status["health.pcie_link[1]"] == "pass"
    # This machine's CPU is not the captured host's: no CPU rows, the CPU probes skipped as measuring here.
    assert report.results == []
    assert status["probes.cpu_memory_copy"] == "skip"
    assert "which is not the captured host" in messages["probes.cpu_memory_copy"]
    fp = report.fingerprint
    assert fp["host"] is None and fp["captured_from"] == [str(xml)]
    assert fp["software"]["toolkits"] is None and fp["software"]["frameworks"] is None
    assert fp["software"]["python"] is None and fp["software"]["env"] is None
    assert "captured_p100-375.xml" in reports[0].name
    assert socket.gethostname() not in reports[0].name
    raw = reports[0].read_text()
    assert "/usr/local/cuda" not in raw and f'"{socket.gethostname()}"' not in raw


def test_all_na_capture_is_inconclusive_not_pass(tmp_path):
    xml = write(tmp_path / "all-na.xml", all_na((FIX / "nvidia-smi-q-x.xml").read_text()))
    proc, reports = run_validate(tmp_path, "--from-xml", str(xml), "-k", "health")
    assert proc.returncode == EXIT_INCONCLUSIVE, proc.stdout + proc.stderr
    assert "INCONCLUSIVE (exit 6): the checks that define a healthy GPU could not judge anything" in proc.stdout
    report = load_report(reports[0])
    assert views.verdict_text(report).startswith("INCONCLUSIVE: the checks that define a healthy GPU")
    checks = {c.name: c for c in report.checks}
    assert len(checks) == 4 + 8 * 4  # gpu_count, driver, stack, torch_sees_gpus; eight per GPU
    assert [name for name, c in checks.items() if c.status != "skip"] == []
    assert "which is not the captured host" in checks.pop("health.torch_sees_gpus").message
    assert "with nothing to compare" in checks.pop("health.gpu_count").message
    src = f"the capture {xml}"
    assert [c.message for c in checks.values() if f"not reported by {src}" not in c.message] == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpus", "7,"], "no GPU with index [7]"),
        (["--gpus", "9"], "asked for the first 9 GPUs"),
        (["--gpus", "x"], "use 'all', a count"),
        (["--baseline", "/nonexistent.json"], "/nonexistent.json does not exist"),
        (["--record", "{tmp}"], "--record {tmp} is a directory; name a file inside it, e.g. {tmp}/run.json"),
        (["--record", "{tmp}/report.xml/run.json"], "{tmp}/report.xml is a file, not a directory"),
        (["--record", str(FIX / "nvidia-smi-q-x.xml")], "is the input file"),
        (["--precision-plan", "kepler"], "--precision-plan: unknown architecture 'kepler'; choose one of: pascal"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(tmp_path, args, message):
    (tmp_path / "report.xml").write_text("")
    args = [a.format(tmp=tmp_path) for a in args]
    proc, reports = run_validate(tmp_path, "--from-xml", str(FIX / "nvidia-smi-q-x.xml"), *args)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage-error exit code
    assert message.format(tmp=tmp_path) in proc.stderr
    assert reports == []


def _steady(report: dict) -> bool:
    """Whether gpulab judges a report's host steady: its CPU calibration moved less than contention.SLOWDOWN from the
    run's start to its end (the rule compare applies; a stricter one here left runs between the two unexplained)."""
    return not any(contention.unsteady(entry) for entry in report["host_load"])


def test_baseline_regression_fails_the_run(tmp_path):
    # A quiet host as its load figures tell (this one may be shared now): host rows that fell are then regressions.
    quiet = {**os.environ, "GPULAB_PROC": str(quiet_proc(tmp_path / "proc"))}
    base_dir = tmp_path / "a"
    base_dir.mkdir()
    _, reports = run_validate(base_dir, "-k", "cpu_memory_copy", env=quiet)
    data = json.loads(reports[0].read_text())
    for row in data["results"]:
        row["value"] *= 100  # a baseline far faster than this machine: the new run must regress against it
    for entry in data["host_load"]:  # ... from a steady host (this one's calibration may have moved under others)
        entry["calibration_end"] = entry["calibration_start"]
    fast = tmp_path / "fast.json"
    fast.write_text(json.dumps(data))
    # The new run's own calibration is this machine's, shared now perhaps: a run whose CPUs slowed under it excuses
    # its host rows (a verdict that repeats). Up to three tries for a steady one; if none was, the excuse is checked.
    for attempt in range(3):
        new_dir = tmp_path / f"b{attempt}"
        new_dir.mkdir()
        proc, reports = run_validate(new_dir, "-k", "cpu_memory_copy", "--baseline", str(fast), env=quiet)
        if _steady(json.loads(reports[0].read_text())):
            assert proc.returncode == 1, proc.stdout
            assert "regression" in proc.stdout.lower()
            return
    assert proc.returncode == 0, proc.stdout
    assert "host unsteady, not a regression" in proc.stdout


# Ctrl-C is sent to a suite started as a non-interactive shell's background job (`pytest validate/ &`: SIGINT
# ignored), which `kill -INT` must still stop; a foreground suite takes the same path from its first moment.
@pytest.mark.parametrize(
    ("stop", "sigint"),
    [(signal.SIGINT, signal.SIG_IGN), (signal.SIGTERM, signal.SIG_DFL)],
    ids=["ctrl-c-to-a-background-job", "sigterm"],
)
def test_interrupted_run_still_writes_its_report(tmp_path, stop, sigint):
    started = tmp_path / "started"
    sleeper = tmp_path / "test_sleeper.py"
    sleeper.write_text(
        f"import pathlib, time\ndef test_sleeper():\n    pathlib.Path({str(started)!r}).touch()\n    time.sleep(120)\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "validate"),
        str(sleeper),
        "-p",
        "no:cacheprovider",
        "--report-dir",
        str(tmp_path),
        "--record",
        str(tmp_path / "run.json"),
        "-k",
        "cpu_memory_copy or sleeper",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert started.exists(), proc.communicate()[0]
    proc.send_signal(stop)  # Ctrl-C sends SIGINT; schedulers and `timeout` send SIGTERM
    out, _ = proc.communicate(timeout=60)
    code = 143 if stop == signal.SIGTERM else 130  # as gpulab's commands exit, not pytest's 2
    assert proc.returncode == code, out
    reports = sorted(tmp_path.glob("report-*.json"))
    assert len(reports) == 1, out
    report = load_report(reports[0])
    assert report.interrupted is True
    assert [r.workload for r in report.results] == ["copy_host"]
    record = json.loads((tmp_path / "run.json").read_text())
    assert (
        record["interrupted"] is True and record["exit_status"] == code and record["report"]["json"] == str(reports[0])
    )


def test_gpu_selection():
    fp = fingerprint(smi_xml=FIX / "nvidia-smi-q-x.xml", probe_frameworks=False)
    assert [g.index for g in gpus_for_option(fp.gpus, "all")] == [0, 1, 2, 3]
    assert [g.index for g in gpus_for_option(fp.gpus, "2")] == [0, 1]
    assert [g.index for g in gpus_for_option(fp.gpus, "3,1")] == [3, 1]
    with pytest.raises(GpulabError, match="indices: 0, 1, 2, 3"):
        gpus_for_option(fp.gpus, "4,")
    uuid2 = fp.gpus[2].uuid
    assert [g.index for g in visible_to_cuda(fp.gpus, f"{uuid2},0")] == [2, 0]
    assert [g.index for g in visible_to_cuda(fp.gpus, "1,9,2")] == [1]
    assert visible_to_cuda(fp.gpus, "") == []


def test_standard_tier_records_cpu_speedups(tmp_path):
    proc, reports = run_validate(tmp_path, "--tier", "standard", "-k", "test_speedup and mnist")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = load_report(reports[0])
    cpu = {r.n: r for r in report.results if r.workload == "mnist" and r.launcher == "cpu"}
    assert 1 in cpu and len(cpu) == 2 and all(r.value > 0 for r in cpu.values())
    assert [(s.from_, s.to) for s in report.speedups] == [("cpu:1", f"cpu:{max(cpu)}")]


def test_summary_counts_a_module_skipped_whole_as_pytest_does(tmp_path, monkeypatch):
    """`pytest.importorskip` at a module's top is one skip in pytest's summary, and one check in gpulab's."""
    fake = tmp_path / "no-tf"
    fake.mkdir()
    (fake / "tensorflow.py").write_text('raise ModuleNotFoundError("No module named tensorflow")\n')
    monkeypatch.setenv("PYTHONPATH", f"{fake}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    xml = CAPTURES / "rtx-2070-x2.xml"
    proc, reports = run_validate(tmp_path, "--from-xml", str(xml), "-k", "health or tensorflow")
    out = proc.stdout + proc.stderr
    pytest_skips = int(re.findall(r"(\d+) skipped", out)[-1])  # pytest's closing summary line
    assert re.search(rf"\b{pytest_skips} skip\b", out), out
    checks = {c.name: c for c in load_report(reports[0]).checks}
    assert checks["tensorflow.module"].status == "skip"
    assert "TensorFlow is not installed" in checks["tensorflow.module"].message
