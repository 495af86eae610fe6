"""`compare`, `fingerprint_notes`, threshold parsing, and the `gpulab compare` / `gpulab report` commands."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json

import pytest

from gpulab.cli import report_baselines
from gpulab.errors import GpulabError
from gpulab.names import Precision
from gpulab.records import Result
from gpulab.report import commands
from gpulab.report.compare import compare, parse_threshold
from gpulab.report.compare.fingerprint import fingerprint_notes
from gpulab.report.compare.render import to_text
from gpulab.report.io import write_report
from report_builders import sample_report, scaled


def run_cli(argv: list[str]) -> int:
    """Like gpulab.cli.main, with only this package's commands registered."""
    parser = argparse.ArgumentParser(prog="gpulab")
    sub = parser.add_subparsers(dest="command", required=True)
    commands.add_commands(sub, report_baselines())
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GpulabError as err:
        print(f"gpulab: error: {err}")
        return err.exit_code


@pytest.fixture
def base_path(tmp_path):
    return write_report(sample_report(), tmp_path / "base.json")


def _write(tmp_path, name, report):
    return str(write_report(report, tmp_path / name))


# --- compare() ------------------------------------------------------------------------------------


def test_same_report_no_regression():
    r = sample_report()
    c = compare([("a", r), ("b", copy.deepcopy(r))])
    assert c.regressions == [] and c.notes == []
    assert all(row.status == "ok" and row.ratios[1] == pytest.approx(1.0) for row in c.rows)
    assert len(c.rows) == len(r.results)
    assert c.verdict.startswith("verdict: GPU: no regression")


def test_ten_percent_lower_regresses():
    r = sample_report()
    c = compare([("a", r), ("b", scaled(r, 0.9))], threshold_pct=5)
    gpu = [row for row in c.rows if row.side == "gpu"]
    host = [row for row in c.rows if row.side != "gpu"]
    assert gpu and host and len(c.regressions) == len(gpu)
    assert all(row.status == "regression" and row.ratios[1] == pytest.approx(0.9) for row in gpu)
    # a host (CPU) row 10 % lower on a host whose load was not recorded lies within the shared-host noise band
    assert all(row.status == "ok" and row.band_pct == 30 and "shared-host" in row.band_why for row in host)
    assert c.verdict.startswith("verdict: GPU: REGRESSION") and "(GPU " in c.verdict


def test_three_percent_lower_within_threshold():
    r = sample_report()
    assert compare([("a", r), ("b", scaled(r, 0.97))], threshold_pct=5).regressions == []
    assert compare([("a", r), ("b", scaled(r, 0.97))], threshold_pct=2).regressions


def test_rows_only_in_some_reports_are_listed_not_regressions():
    a = sample_report()
    b = copy.deepcopy(a)
    dropped = b.results.pop(0)
    b.results.append(dataclasses.replace(dropped, workload="matmul", precision=Precision.FP16))
    c = compare([("A", a), ("B", b)])
    status = {row.key: row.status for row in c.rows}
    assert status[dropped.key()] == "only in A"
    assert status[("matmul", "torch", "gpu", 1, "fp16", "cuda:0")] == "only in B"
    assert c.regressions == []
    c3 = compare([("A", a), ("B", b), ("C", copy.deepcopy(a))])
    assert {row.key: row.status for row in c3.rows}[dropped.key()] == "missing in B"


def test_check_that_passed_and_now_fails_regresses():
    a = sample_report()
    b = copy.deepcopy(a)
    b.checks[1] = dataclasses.replace(b.checks[1], status="fail", message="gen4 x16, max gen5 x16")
    c = compare([("A", a), ("B", b)])
    assert len(c.regressions) == 1
    assert "check health.pcie_link[0000:06:00.0]: pass → fail in B" in c.regressions[0]
    assert "1 check(s) passed in the baseline and fail now" in c.verdict


def test_no_shared_rows_raises():
    a = sample_report()
    b = copy.deepcopy(a)
    b.results = [Result("allreduce", "nccl-tests", "sweep", 4, "none", 350.0, "GB/s")]
    with pytest.raises(GpulabError) as info:
        compare([("A.json", a), ("B.json", b)])
    msg = str(info.value)
    assert "A.json and B.json share no results" in msg
    assert "A.json has: " in msg and "B.json has: allreduce/nccl-tests/sweep n=4 none" in msg
    assert "compare runs of the same tier/workloads" in msg


def test_checks_only_reports_compare():
    a = sample_report()
    a.results, a.speedups, a.scaling = [], [], []
    c = compare([("A", a), ("B", copy.deepcopy(a))])
    assert c.rows == [] and c.regressions == []


def test_to_dict_and_text():
    r = sample_report()
    c = compare([("a.json", r), ("b.json", scaled(r, 0.9))])
    d = json.loads(json.dumps(c.to_dict()))
    assert d["baseline"] == "a.json" and d["regression"] is True
    assert d["rows"][0]["ratios"]["b.json"] == pytest.approx(0.9)
    text = to_text(c)
    assert "a.json" in text and "-10.0 %" in text and "REGRESSION" in text
    assert text.splitlines()[0].startswith("verdict: GPU: REGRESSION")  # the verdict comes first


# --- fingerprint notes ----------------------------------------------------------------------------


def test_fingerprint_notes_driver_vm_pcie():
    a = sample_report(hypervisor=None)
    b = sample_report(hypervisor="KVM")
    b.fingerprint["software"]["driver_version"] = "575.51.03"
    b.fingerprint["gpus"][2]["pcie"]["gen_current"] = 4
    b.fingerprint["software"]["env"]["NVIDIA_TF32_OVERRIDE"] = "0"
    notes = fingerprint_notes(a.fingerprint, b.fingerprint)
    assert "platform: bare metal → VM (KVM)" in notes
    assert "NVIDIA driver: 570.124.06 → 575.51.03" in notes
    assert "GPU 2 PCIe link: gen5 x16 → gen4 x16 (max gen5 x16)" in notes
    assert "env NVIDIA_TF32_OVERRIDE: (unset) → 0" in notes
    assert "virtualization mode on GPU 0, 1, 2, 3: None → Pass-Through" in notes
    assert fingerprint_notes(a, a) == []


def test_fingerprint_notes_gpu_count_model_cpu_numa_ecc_torch():
    a = sample_report(n_gpus=4)
    b = sample_report(n_gpus=2)
    fb = b.fingerprint
    for g in fb["gpus"]:
        g["name"] = "NVIDIA H100 80GB HBM3"
    fb["gpus"][1]["ecc_enabled"] = False
    fb["gpus"][0]["persistence_mode"] = False
    fb["host"]["cpu"]["model"] = "AMD EPYC 9654"
    fb["host"]["numa_nodes"].append({"node": 1, "cpus": "64-127", "memory_mib": None})
    fb["software"]["frameworks"][0]["version"] = "2.6.0+cu124"
    fb["software"]["cuda_driver_version"] = "12.4"
    notes = fingerprint_notes(a, b)
    assert "GPU count: 4 → 2" in notes
    assert "GPU model: 4x NVIDIA H200 → 2x NVIDIA H100 80GB HBM3" in notes
    assert "CPU model: Intel(R) Xeon(R) Platinum 8480+ → AMD EPYC 9654" in notes
    assert "NUMA nodes: 1 → 2" in notes
    assert "ECC on GPU 1: on → off" in notes
    assert "persistence mode on GPU 0: on → off" in notes
    assert "torch: 2.7.0+cu128 → 2.6.0+cu124" in notes
    assert "CUDA (driver): 12.8 → 12.4" in notes
    assert "env CUDA_VISIBLE_DEVICES: 0,1,2,3 → 0,1" in notes


def test_comparison_carries_notes():
    a = sample_report()
    b = copy.deepcopy(a)
    b.fingerprint["software"]["driver_version"] = "575.51.03"
    assert compare([("a", a), ("b", b)]).notes == ["NVIDIA driver: 570.124.06 → 575.51.03"]


# --- threshold ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "pct"), [("5%", 5.0), ("5", 5.0), (" 7.5 % ", 7.5), ("0", 0.0), ("0.5%", 0.5)])
def test_parse_threshold(text, pct):
    assert parse_threshold(text) == pct


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("-5%", "from 0 to below 100"),
        ("abc", "expected a percentage"),
        ("", "expected a percentage"),
        ("nan", "from 0"),
        ("100", "100 % or more"),
        ("0.05", "ambiguous.*'5%'"),
    ],
)
def test_parse_threshold_rejects(text, match):
    with pytest.raises(GpulabError, match=match):
        parse_threshold(text)


# --- CLI ------------------------------------------------------------------------------------------


def test_cli_compare_same_exit_0(tmp_path, base_path, capsys):
    assert run_cli(["compare", str(base_path), str(base_path)]) == 0
    out = capsys.readouterr().out
    assert "verdict: GPU: no regression" in out


def test_cli_compare_ten_percent_lower_exit_1(tmp_path, base_path, capsys):
    low = _write(tmp_path, "low.json", scaled(sample_report(), 0.9))
    assert run_cli(["compare", str(base_path), low, "--threshold", "5%"]) == 1
    assert "verdict: GPU: REGRESSION" in capsys.readouterr().out


def test_cli_compare_three_percent_lower_exit_0(tmp_path, base_path):
    low = _write(tmp_path, "low.json", scaled(sample_report(), 0.97))
    assert run_cli(["compare", str(base_path), low, "--threshold", "5"]) == 0


def test_cli_compare_json(tmp_path, base_path, capsys):
    low = _write(tmp_path, "low.json", scaled(sample_report(), 0.9))
    assert run_cli(["compare", str(base_path), low, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["regression"] is True and data["threshold_pct"] == 5.0


def test_cli_compare_no_shared_rows_exit_2(tmp_path, base_path, capsys):
    other = sample_report()
    other.results = [Result("allreduce", "nccl-tests", "sweep", 4, "none", 350.0, "GB/s")]
    path = _write(tmp_path, "other.json", other)
    assert run_cli(["compare", str(base_path), path]) == 2
    assert "share no results" in capsys.readouterr().out


def test_cli_compare_bad_input_exit_2(tmp_path, base_path, capsys):
    foreign = tmp_path / "package.json"
    foreign.write_text('{"name": "x"}')
    assert run_cli(["compare", str(base_path), str(foreign)]) == 2
    assert f"{foreign} is not a gpulab report" in capsys.readouterr().out
    assert run_cli(["compare", str(base_path), str(tmp_path / "missing.json")]) == 2
    assert run_cli(["compare", str(base_path)]) == 2
    assert run_cli(["compare", str(base_path), str(base_path), "--threshold", "-3"]) == 2


def test_cli_report_writes_beside(tmp_path, base_path, capsys):
    assert run_cli(["report", str(base_path)]) == 0
    assert (tmp_path / "base.md").exists() and (tmp_path / "base.html").exists()


def test_cli_report_outputs_and_print(tmp_path, base_path, capsys):
    md, page = tmp_path / "out" / "x.md", tmp_path / "out" / "x.html"
    assert run_cli(["report", str(base_path), "--md", str(md), "--html", str(page), "--print", "md"]) == 0
    assert capsys.readouterr().out.startswith("# gpulab report")
    assert md.read_text().startswith("# gpulab report") and '<svg class="plot"' in page.read_text()
    assert not (tmp_path / "base.md").exists()


def test_cli_report_bad_file_exit_2(tmp_path, capsys):
    bad = tmp_path / "r.json"
    bad.write_text('{"schema": "gpulab.report/1"')
    assert run_cli(["report", str(bad)]) == 2
    assert "truncated" in capsys.readouterr().out
