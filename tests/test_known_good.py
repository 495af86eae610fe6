"""Known-good workload rows per GPU model: derived from real reports, judged against, compared with."""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.errors import GpulabError
from gpulab.names import Precision
from gpulab.report import spread
from gpulab.report.io import load_report
from gpulab.validation import known_good

REPORTS = sorted((Path(__file__).parent / "fixtures" / "reports").glob("*.json"))
SHIPPED = Path(known_good.__file__).with_name("known_good.json")
H200 = Path(__file__).parent / "fixtures" / "reports" / "h200x4-standard.json"


def test_rows_keep_each_runs_median_their_hosts_and_gpu_busy_share():
    rows = {(r["workload"], r["launcher"], r["n"], r["gpu_model"]): r for r in known_good.build(REPORTS)["rows"]}
    resnet = rows[("resnet50", "gpu", 1, "NVIDIA H100 80GB HBM3")]
    assert len(resnet["runs"]) == 2 and resnet["value"] == min(resnet["runs"])
    assert resnet["hosts"] and all("threads" in h for h in resnet["hosts"])
    assert resnet["gpu_busy_pct"] is not None and resnet["gpu_busy_pct"] > 80


def test_the_shipped_table_is_what_the_real_reports_give():
    assert json.loads(SHIPPED.read_text()) == known_good.build(REPORTS)


def test_rows_carry_their_provenance_and_repeated_runs_their_median():
    rows = {(r.workload, r.launcher, r.n): r for r in known_good.rows_from_report(load_report(H200), H200.name)}
    resnet = rows[("resnet50", "gpu", 1)]
    assert resnet.measurements == 2 and resnet.value == pytest.approx((4331.1 + 3956.2) / 2, abs=0.1)
    assert resnet.source.startswith("h200x4-standard.json: 4x NVIDIA H200, 2026-11-22, tier standard, driver 580")
    assert ("matmul", "gpu", 1) not in rows  # probes are judged against datasheets, not here


def test_one_key_measured_on_two_machines_of_a_model_is_one_row_at_the_slower_machines_median():
    h100 = [p for p in REPORTS if p.name.startswith("h100x")]
    assert len(h100) == 2, h100
    each = [
        [
            r.value
            for r in load_report(p).results
            if (r.workload, r.launcher, r.unit) == ("resnet50", "gpu", "samples/s")
        ]
        for p in h100
    ]
    assert all(each), each  # both machines measured ResNet50 on one GPU
    rows = [r for r in known_good.build(h100)["rows"] if (r["workload"], r["launcher"]) == ("resnet50", "gpu")]
    assert len(rows) == 1
    assert rows[0]["measurements"] == len(each[0]) + len(each[1])
    # The slower machine's median is the bar: both machines were healthy.
    assert rows[0]["value"] == pytest.approx(min(statistics.median(each[0]), statistics.median(each[1])), abs=0.1)
    assert rows[0]["source"].count("; ") == 1 and "h100x1-standard.json" in rows[0]["source"]
    assert "h100x2-standard.json: 2x NVIDIA H100" in rows[0]["source"]
    # The two-GPU machine's scaling rows are known-good rows of their own.
    ddp = {
        r["n"]: r["value"]
        for r in known_good.build(h100)["rows"]
        if (r["workload"], r["launcher"]) == ("resnet50", "ddp")
    }
    assert set(ddp) == {1, 2} and ddp[2] > 1.9 * ddp[1]


def _row(report, workload):
    return next(r for r in report.results if r.workload == workload and r.launcher == "gpu")


def test_a_row_is_judged_against_its_models_known_good():
    report = load_report(H200)
    host = report.fingerprint["host"]
    good = _row(report, "resnet50")  # GPU-bound: judged on any host
    kg = known_good.lookup("NVIDIA H200", good)
    check = known_good.judge("NVIDIA H200", good, host=host)
    pct = round(100 * good.value / kg.value)
    assert check.status == "pass" and f"{pct} % [{pct}–{pct}] of known-good {kg.value:,.0f}" in check.message
    assert good.params["known_good"]["value"] == kg.value
    slow = dataclasses.replace(good, value=kg.value * 0.8, params=dict(good.params))
    check = known_good.judge("NVIDIA H200", slow, host=host)
    assert check.status == "fail" and "80 % [80–80] of known-good" in check.message and "below 85 %" in check.message
    assert check.threshold == known_good.BOUND.name


def _windows(row, *factors):
    values = [row.value * f for f in factors]
    return dataclasses.replace(
        row, value=statistics.median(values), spread=spread.of_windows(values), params=dict(row.params)
    )


def test_the_interval_decides_pass_fail_and_marginal():
    report = load_report(H200)
    host = report.fingerprint["host"]
    row = _row(report, "resnet50")  # GPU-bound: its GPU was busy
    kg = known_good.lookup("NVIDIA H200", row)
    assert kg is not None and not kg.host_bound
    ratio = kg.value / row.value
    tight = _windows(row, *(ratio * f for f in (0.97, 0.98, 0.99, 1.0, 1.0, 1.01, 1.02, 1.03)))
    assert known_good.judge("NVIDIA H200", tight, host=host).status == "pass"
    # Centred on the bound, spread either side: neither shown below nor above it.
    wide = _windows(row, *(ratio * f for f in (0.7, 0.75, 0.8, 0.85, 0.85, 0.9, 0.95, 1.0)))
    check = known_good.judge("NVIDIA H200", wide, host=host)
    assert check.status == "marginal" and check.evidence["pct_interval"][0] < 85 < check.evidence["pct_interval"][1]
    low = _windows(row, *(ratio * f for f in (0.6, 0.62, 0.63, 0.64, 0.65, 0.66, 0.67, 0.7)))
    assert known_good.judge("NVIDIA H200", low, host=host).status == "fail"


def test_a_host_bound_row_is_judged_only_on_a_comparable_quiet_bare_metal_host(monkeypatch):
    report = load_report(H200)
    row = _row(report, "cifar10")
    kg = known_good.lookup("NVIDIA H200", row)
    assert kg is not None and kg.host_bound and kg.gpu_busy_pct is not None and kg.gpu_busy_pct < 80
    slow = dataclasses.replace(row, value=row.value * 0.5, params=dict(row.params))
    guest = report.fingerprint["host"]  # the known-good's own host, a KVM guest
    check = known_good.judge("NVIDIA H200", slow, host=guest)
    assert check.status == "skip" and check.evidence["host_bound"] and "KVM guest" in check.message
    other = {**guest, "cpu": {"model": "AMD EPYC 9654", "threads": 32}}
    check = known_good.judge("NVIDIA H200", slow, host=other)
    assert check.status == "skip" and "not the known-good's" in check.message
    assert "AMD EPYC 9654, 32 threads" in check.message
    # A known-good row from a bare-metal host, judged on that host: a verdict, unless the host is contended now.
    metal = {**guest, "hypervisor": None}
    bare = dataclasses.replace(kg, hosts=(known_good.host_text({"host": metal}),))
    monkeypatch.setattr(known_good, "lookup", lambda model, result: bare)
    assert known_good.judge("NVIDIA H200", slow, host=metal).status == "fail"
    contended = known_good.judge("NVIDIA H200", slow, host=metal, contention="CPU pressure 61 % of the run")
    assert contended.status == "skip" and "contended (CPU pressure 61 %" in contended.message


def test_no_known_good_row_says_so():
    report = load_report(H200)
    check = known_good.judge("Tesla P100-PCIE-16GB", _row(report, "mnist"))
    assert check.status == "skip" and "Tesla P100-PCIE-16GB has no known-good rows" in check.message
    other = dataclasses.replace(_row(report, "mnist"), precision=Precision.FP16)
    assert "no known-good row for this configuration" in known_good.judge("NVIDIA H200", other).message


def test_compare_takes_a_models_known_good_rows(tmp_path):
    def gpulab(*args):
        return subprocess.run([sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, timeout=120)

    done = gpulab("compare", "--known-good", "NVIDIA H200", str(H200), "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert "known-good NVIDIA H200" in json.dumps(rows)
    bad = gpulab("compare", "--known-good", "Tesla K80", str(H200))
    assert (
        bad.returncode == 2
        and "no known-good rows for 'Tesla K80'; known GPU models: NVIDIA H100 80GB HBM3, NVIDIA H200" in bad.stderr
    )
    with pytest.raises(GpulabError):
        known_good.as_report("Tesla K80")


def test_a_row_from_fewer_than_three_runs_is_shown_not_judged():
    h100 = load_report(Path(__file__).parent / "fixtures" / "reports" / "h100x1-standard.json")
    good = _row(h100, "resnet50")  # GPU-bound, its known-good row from two H100 runs
    row = known_good.lookup("NVIDIA H100 80GB HBM3", good)
    assert len(row.runs) < known_good.MIN_RUNS
    slow = dataclasses.replace(good, value=row.value * 0.5, params=dict(good.params))
    check = known_good.judge("NVIDIA H100 80GB HBM3", slow, host=h100.fingerprint["host"])
    assert check.status == "skip" and check.evidence["pct"] == pytest.approx(50, abs=1)
    assert f"has {len(row.runs)} source run(s) and needs {known_good.MIN_RUNS}" in check.message
    many = dataclasses.replace(row, runs=(*row.runs, row.value))  # a third run: judged, and half of it fails
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(known_good, "lookup", lambda model, result: many)
        assert known_good.judge("NVIDIA H100 80GB HBM3", slow, host=h100.fingerprint["host"]).status == "fail"
