"""gpulab.checks.dcgm: `dcgmi diag -j` parsed from real outputs, and the runner against a stand-in `dcgmi`.

The parser reads outputs published by NVIDIA and DCGM users (tests/fixtures/dcgm/README.md names each source). DCGM
cannot run on this machine (it needs an NVIDIA GPU and its host engine), so the runner's boundary is faked: a small
`dcgmi` script on PATH prints one of those outputs, exits with the code dcgmi uses, sleeps past the timeout or says
that no host engine answers; everything on gpulab's side of it (the subprocess, the timeout, parsing, the verdict)
is real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.checks import dcgm
from gpulab.errors import GpulabError
from gpulab.names import ValidationTier

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "dcgm"
DCGM3_PASS = FIX / "dcgm3.1.0-pass-8gpu.txt"
NVVS_FAIL = FIX / "nvvs-sm-stress-fail-4gpu.json"
DCGM4_FRAGMENT = FIX / "dcgm4-diagnostic-test-8gpu.fragment.json"
SKIP_ABSENT = (
    "DCGM diagnostic skipped: dcgmi is not on PATH (DCGM is not installed); to turn it on, set gpulab_dcgm: true "
    "in the inventory and provision again (roles/nvidia_dcgm)."
)


def dcgm4_document() -> str:
    """The DCGM 4 test object captured in NVIDIA/DCGM#215, in the document dcgmi wraps its tests in."""
    test = json.loads(DCGM4_FRAGMENT.read_text())
    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]}})


# --- the parser, on real outputs -------------------------------------------------------------------------------------


def test_dcgm3_passing_run_reads_every_test_and_gpu():
    diag = dcgm.parse(DCGM3_PASS.read_text())
    assert (diag.shape, diag.version) == ("dcgm3", "3.1.0")
    # Nine deployment tests, each one result for all eight GPUs; the per-GPU software test; the nulls skipped.
    deployment = [r for r in diag.results if r.category == "Deployment"]
    assert len(deployment) == 9 and {r.gpu for r in deployment} == {"0,1,2,3,4,5,6,7"}
    software = [r for r in diag.results if r.test == "software"]
    assert [r.gpu for r in software] == [str(i) for i in range(8)]
    assert diag.counts() == {"pass": 17, "fail": 0, "warn": 0, "skip": 0}
    check = dcgm.judge(diag, ["dcgmi", "diag", "-r", "1", "-j"], 1, 0)
    assert check.status == "pass", check.message
    assert check.message == "DCGM 3.1.0 level 1: 17 passed, 0 skipped, 0 warned"
    assert len(check.evidence["results"]) == 17 and check.evidence["counts"]["pass"] == 17
    assert check.evidence["results"][0] == {
        "category": "Deployment",
        "test": "Denylist",
        "gpu": "0,1,2,3,4,5,6,7",
        "status": "pass",
        "warnings": [],
        "info": [],
    }


def test_a_deployment_failure_names_the_gpus_it_covers():
    # The passing capture with one deployment test failed the way DCGM 3 reports it.
    text = DCGM3_PASS.read_text()
    doc = json.loads(text[text.index("{") :])
    persistence = doc["DCGM GPU Diagnostic"]["test_categories"][0]["tests"][8]
    assert persistence["name"] == "Persistence Mode"
    persistence["results"][0].update(status="FAIL", warnings=[{"warning": "Persistence mode for GPU 3 is disabled."}])
    check = dcgm.judge(dcgm.parse(json.dumps(doc)), ["dcgmi"], 1, 226)
    assert check.status == "fail"
    assert "Persistence Mode on GPUs 0,1,2,3,4,5,6,7: Persistence mode for GPU 3 is disabled." in check.message


def test_failing_run_names_each_failing_test_and_gpu_with_dcgms_message():
    diag = dcgm.parse(NVVS_FAIL.read_text())
    failed = [(r.test, r.gpu) for r in diag.results if r.failed]
    assert failed == [("sm_stress", "0"), ("sm_stress", "2"), ("sm_stress", "3")]
    memory0 = next(r for r in diag.results if r.test == "memory" and r.gpu == "0")
    assert memory0.status == "skip" and memory0.warnings[0].startswith("ECC memory on GPU 0 is not currently active")
    assert next(r for r in diag.results if r.test == "pcie" and r.gpu == "3").info[0].startswith("GPU 3 GPU to Host")

    check = dcgm.judge(diag, ["dcgmi", "diag", "-r", "3", "-j"], 3, 226)
    assert check.status == "fail"
    assert check.message.startswith("DCGM level 3 diagnostic failed 3 test result(s): ")
    assert (
        "sm_stress on GPU 0: Max stress level of 2128.7 did not exceed desired stress level of 3000.0 for GPU 0"
        in check.message
    )
    assert "sm_stress on GPU 2: Max stress level of 1096.5" in check.message
    assert "sm_stress on GPU 1" not in check.message
    assert check.evidence["counts"] == {"pass": 18, "fail": 3, "warn": 0, "skip": 17}


def test_dcgm4_results_are_read_per_entity():
    diag = dcgm.parse(dcgm4_document())
    assert diag.shape == "dcgm4"
    assert [(r.test, r.gpu, r.status) for r in diag.results] == [("diagnostic", str(i), "pass") for i in range(8)]
    assert diag.results[0].info[-1] == "GPU 0 calculated at approximately 859.08 gigaflops during this test"
    assert dcgm.judge(diag, ["dcgmi"], 4, 0).status == "pass"


def test_dcgm4_summary_failure_without_an_entity_still_fails():
    # Shape of dcgmi 4's test_summary (dcgmi/Diag.cpp): an error tied to no GPU fails the test as a whole.
    test = json.loads(DCGM4_FRAGMENT.read_text())
    test["test_summary"] = {"status": "Fail", "warnings": [{"warning": "NVVS error: plugin crashed", "error_id": 1}]}
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]}}
    check = dcgm.judge(dcgm.parse(json.dumps(doc)), ["dcgmi"], 2, 226)
    assert check.status == "fail"
    assert "diagnostic on all GPUs: NVVS error: plugin crashed" in check.message


def test_runtime_error_and_metadata_are_read():
    # dcgmi's document when the run cannot start, with the version and driver where DCGM 4 puts them.
    doc = {
        "DCGM Diagnostic": {"runtime_error": "Error: The GPU was reset\n recently", "version": "4.6.0"},
        "metadata": {"version": "4.6.0", "Driver Version Detected": "580.95.05"},
    }
    diag = dcgm.parse(json.dumps(doc))
    assert (diag.version, diag.driver) == ("4.6.0", "580.95.05")
    check = dcgm.judge(diag, ["dcgmi", "diag", "-r", "2", "-j"], 2, 226)
    assert check.status == "error"
    assert "could not run the diagnostic: Error: The GPU was reset recently." in check.message


@pytest.mark.parametrize(
    "text, reason",
    [
        ("Segmentation fault (core dumped)\n", "no JSON object"),
        ('{"DCGM Diagnostic": {"test_categories": [', "does not parse"),
        ('{"something": 1}', "none of the keys"),
    ],
)
def test_not_a_diagnostic_document_is_refused(text, reason):
    with pytest.raises(dcgm.DcgmOutputError, match=reason):
        dcgm.parse(text)


def test_an_unknown_status_word_is_not_a_pass():
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "X", "tests": [{"name": "t", "results": [
        {"entity_group": "GPU", "entity_id": 0, "status": "Inconclusive"}]}]}]}}  # fmt: skip
    check = dcgm.judge(dcgm.parse(json.dumps(doc)), ["dcgmi"], 1, 0)
    assert check.status == "fail" and "t on GPU 0: status 'inconclusive', no message" in check.message


# --- the level --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tier, level", [(ValidationTier.QUICK, 1), (ValidationTier.STANDARD, 2), (ValidationTier.FULL, 3)]
)
def test_the_level_follows_the_tier(tier, level):
    assert dcgm.level_for(tier) == level
    assert dcgm.level_for(tier, 4) == 4
    assert dcgm.level_for(tier, 0) == 0


def test_a_bad_level_is_refused_with_the_valid_ones():
    with pytest.raises(GpulabError, match=r"--dcgm-diag-level 5: use 1 \(seconds\), 2 .* or 0 to skip"):
        dcgm.level_for(ValidationTier.QUICK, 5)


def test_level_zero_disables_the_check():
    check = dcgm.run_diag(0)
    assert (check.status, check.message) == ("skip", "DCGM diagnostic disabled (--dcgm-diag-level 0).")


# --- the runner, against a stand-in dcgmi --------------------------------------------------------------------------


@pytest.fixture
def fake_dcgmi(tmp_path, monkeypatch):
    """Put a `dcgmi` on PATH that logs its arguments, then prints FILE (or TEXT) and exits RC, or sleeps."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "argv"

    def install(*, output: Path | None = None, text: str = "", rc: int = 0, stderr: str = "", sleep: float = 0):
        body = [f'echo "$@" > {log}']
        if sleep:
            body.append(f"sleep {sleep}")
        if output is not None:
            body.append(f"cat {output}")
        if text:
            (tmp_path / "stdout.txt").write_text(text)
            body.append(f"cat {tmp_path / 'stdout.txt'}")
        if stderr:
            body.append(f"echo '{stderr}' >&2")
        body.append(f"exit {rc}")
        script = bindir / "dcgmi"
        script.write_text("#!/bin/sh\n" + "\n".join(body) + "\n")
        script.chmod(0o755)
        return log

    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return install


def test_runner_passes_a_passing_run(fake_dcgmi):
    log = fake_dcgmi(output=DCGM3_PASS)
    check = dcgm.run_diag(2)
    assert log.read_text().split() == ["diag", "-r", "2", "-j"]
    assert check.name == "dcgm.diag[r2]" and check.status == "pass", check.message
    assert check.evidence["returncode"] == 0 and check.evidence["command"][1:] == ["diag", "-r", "2", "-j"]


def test_runner_fails_naming_test_and_gpu_when_dcgmi_exits_226(fake_dcgmi):
    fake_dcgmi(output=NVVS_FAIL, rc=226)  # DCGM_ST_NVVS_ERROR, as dcgmi exits when a test fails
    check = dcgm.run_diag(3)
    assert check.status == "fail"
    assert "sm_stress on GPU 3: Max stress level of 1099.7 did not exceed desired stress level" in check.message
    assert check.evidence["returncode"] == 226


def test_runner_reports_garbage_with_the_command_and_the_fix(fake_dcgmi):
    fake_dcgmi(text="Segmentation fault (core dumped)\n", rc=139)
    check = dcgm.run_diag(1)
    assert check.status == "error"
    assert check.message == (
        "`dcgmi diag -r 1 -j` exited 139 without a DCGM result (no JSON object in the output): Segmentation fault "
        "(core dumped). Run it by hand; check the host engine (`systemctl status nvidia-dcgm`) and "
        "/var/log/nvidia-dcgm/."
    )


def test_runner_gives_up_at_the_timeout(fake_dcgmi):
    fake_dcgmi(output=DCGM3_PASS, sleep=5)
    check = dcgm.run_diag(1, timeout=0.5)
    assert check.status == "error"
    assert check.message.startswith("`dcgmi diag -r 1 -j` did not finish within 0.5 s (level 1 normally takes seconds)")
    assert dcgm.TIMEOUT_S == {1: 300, 2: 1200, 3: 5400, 4: 4 * 3600}


def test_runner_skips_in_one_line_without_dcgmi(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    check = dcgm.run_diag(1)
    assert (check.status, check.message) == ("skip", SKIP_ABSENT)
    assert "\n" not in check.message


def test_runner_skips_in_one_line_without_a_host_engine(fake_dcgmi):
    fake_dcgmi(stderr="Error: unable to establish a connection to the specified host: localhost", rc=255)
    check = dcgm.run_diag(1)
    assert check.status == "skip"
    assert check.message == (
        "DCGM diagnostic skipped: the DCGM host engine is not reachable (Error: unable to establish a connection to "
        "the specified host: localhost); start it with `systemctl start nvidia-dcgm` (gpulab_dcgm: true installs "
        "and enables it)."
    )


# --- the suite's option -----------------------------------------------------------------------------------------------


def _validate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "validate"), "-p", "no:cacheprovider", "--report-dir",
           str(tmp_path), *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_the_suite_refuses_a_bad_level(tmp_path):
    proc = _validate(tmp_path, "--dcgm-diag-level", "7", "-k", "dcgm")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "--dcgm-diag-level: invalid choice: 7 (choose from 0, 1, 2, 3, 4)" in proc.stderr


def test_the_suite_runs_the_check_only_with_a_gpu(tmp_path):
    proc = _validate(tmp_path, "--dcgm-diag-level", "1", "-k", "dcgm", "-rs")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "test_dcgm.py" in out and "1 skipped" in out


def test_the_check_goes_into_a_valid_report(tmp_path):
    from gpulab.records import Report
    from gpulab.report.io import load_report, write_report
    from report_builders import full_fingerprint

    check = dcgm.judge(dcgm.parse(NVVS_FAIL.read_text()), ["dcgmi", "diag", "-r", "3", "-j"], 3, 226)
    path = write_report(Report(fingerprint=full_fingerprint().to_dict(), checks=[check]), tmp_path / "r.json")
    loaded = load_report(path).checks[0]
    assert (loaded.name, loaded.status) == ("dcgm.diag[r3]", "fail")
    assert loaded.evidence["results"][0]["category"] == "Deployment"
