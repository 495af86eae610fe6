"""How compare judges rows: the verdict first, GPU rows apart from host rows, each against its noise band, and the
same GPUs (a regression check) told apart from other units of one model (a consistency check).

The pair is built from the real standard-tier report of one H100 (tests/fixtures/reports/h100x1-standard.json) as
the issue measured it on that machine two days apart: every CPU row of the shared host about 25 % slower, the GPU
probes within -3.1 … +0.8 %, the small-model GPU rows (their GPU mostly idle) slower with the host."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpulab.cli import main
from gpulab.records import READABLE_SCHEMAS, SCHEMA_ID, Report
from gpulab.report.compare import compare
from gpulab.report.io import load_report, write_report

H100 = Path(__file__).parent / "fixtures" / "reports" / "h100x1-standard.json"
PROBE_CHANGES = {  # the seven GPU probes' changes, as measured
    ("matmul", "fp32"): 0.969,
    ("matmul", "tf32"): 0.992,
    ("matmul", "bf16"): 1.008,
    ("matmul", "fp16"): 0.985,
    ("copy_d2d", "none"): 0.998,
    ("h2d_pinned", "none"): 0.995,
    ("d2h_pinned", "none"): 1.003,
}
QUIET = {"what": "validation, tier standard", "cpus": 16, "loadavg_start": [0.1, 0.2, 0.2], "steal_pct": 0.0}


def _two_days_later(base: Report) -> Report:
    later = copy.deepcopy(base)
    for r in later.results:
        if r.launcher == "cpu":
            r.value *= 0.75  # the shared host's CPUs: -25 %
        elif (r.workload, r.precision) in PROBE_CHANGES:
            r.value *= PROBE_CHANGES[(r.workload, r.precision)]
        elif r.workload == "resnet50":
            r.value *= 0.99  # the one GPU-bound workload (95 % busy)
        else:
            r.value *= 0.91  # mnist, cifar10, chexnet, style transfer: their GPU 5-49 % busy, paced by the host
    later.created = "2026-11-26T01:54:17+00:00"
    return later


def test_a_healthy_gpu_measured_twice_is_not_a_regression(tmp_path, capsys):
    base = load_report(H100)
    later = _two_days_later(base)
    c = compare([("monday", base), ("wednesday", later)])
    sides = {row.key: row.side for row in c.rows}
    assert sum(s == "host" for s in sides.values()) == 13
    assert {k[0] for k, s in sides.items() if s == "host-bound"} == {"mnist", "cifar10", "chexnet", "style_transfer"}
    assert sum(s == "gpu" for s in sides.values()) == 8  # seven probes and resnet50
    assert c.relation == "same machine" and c.regressions == []
    host = [row for row in c.rows if row.side == "host"]
    assert all(row.band_pct == 30 and "host load not recorded" in row.band_why for row in host)
    gpu = [row for row in c.rows if row.side == "gpu"]
    assert all(row.band_pct == 5 for row in gpu)  # one measurement each: the threshold
    a, b = write_report(base, tmp_path / "a.json"), write_report(later, tmp_path / "b.json")
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("verdict: GPU: no regression")
    assert "GPU rows: 8, -3.1 %…+0.8 %, band 5 %" in first and "host rows: 13, -25.0 %, band 30 %" in first
    assert out.splitlines()[2].startswith("machines: the same GPUs (same UUIDs): a regression check")


def test_a_real_gpu_drop_still_regresses_and_names_its_side():
    base = load_report(H100)
    later = _two_days_later(base)
    for r in later.results:
        if r.workload == "matmul" and r.precision == "bf16" and r.launcher == "gpu":
            r.value *= 0.9  # about -9 %
    c = compare([("monday", base), ("wednesday", later)])
    (line,) = c.regressions
    assert line.startswith("matmul/torch/gpu n=1 bf16 cuda:0: wednesday") and "GPU row, band 5 %" in line
    assert c.verdict.startswith("verdict: GPU: REGRESSION: 1 result(s) below their noise band (GPU 1)")


def test_host_rows_on_quiet_hosts_are_judged_by_the_threshold():
    base, later = load_report(H100), _two_days_later(load_report(H100))
    base.host_load, later.host_load = [QUIET], [QUIET]
    c = compare([("monday", base), ("wednesday", later)])  # the H100's machine is a KVM guest
    host = [row for row in c.rows if row.side != "gpu"]
    assert all(row.band_pct == 30 and "a KVM guest" in row.band_why and not row.regression for row in host)
    for rep in (base, later):
        rep.fingerprint["host"]["hypervisor"] = None  # the same figures from bare metal
    c = compare([("monday", base), ("wednesday", later)])
    host = [row for row in c.rows if row.side != "gpu"]
    assert all(row.band_pct == 5 and row.regression for row in host)  # a quiet host 25 % slower is a finding
    assert c.verdict.startswith("verdict: GPU: REGRESSION: 4 result(s) below their noise band (host-bound GPU 4)")
    assert "· host: REGRESSION: 13 host result(s) below their noise band on an uncontended host" in c.verdict
    stolen = dict(QUIET, steal_pct=12.5)
    later.host_load = [stolen]
    c = compare([("monday", base), ("wednesday", later)])
    assert c.regressions == [] and "CPU steal 12 %" in c.rows[0].band_why


def test_the_baselines_repeats_widen_the_band():
    base, later = load_report(H100), _two_days_later(load_report(H100))
    for r in base.results:
        if r.workload == "matmul" and r.precision == "fp32" and r.launcher == "gpu":
            r.params["repeat_spread_pct"] = 8.0  # the probe's timed batches 8 % apart
    for r in later.results:
        if r.workload == "matmul" and r.precision == "fp32" and r.launcher == "gpu":
            r.value *= 0.95 / 0.969  # -7 % against the baseline: beyond 5 %, within 8 %
    c = compare([("monday", base), ("wednesday", later)])
    (row,) = [r for r in c.rows if r.key == ("matmul", "torch", "gpu", 1, "fp32", "cuda:0")]
    assert row.band_pct == 8.0 and "repeats 8.0 % apart" in row.band_why and not row.regression


def test_other_units_of_one_model_are_a_consistency_check():
    base = load_report(H100)
    other = _two_days_later(base)
    other.fingerprint["gpus"][0]["uuid"] = "GPU-00000000-1111-2222-3333-444444444444"
    for r in other.results:
        if r.workload == "matmul" and r.precision == "bf16" and r.launcher == "gpu":
            r.value *= 0.93 / 1.008  # -7 %: within the threshold plus the unit-to-unit spread
    c = compare([("unit-a", base), ("unit-b", other)])
    assert c.relation == "same model" and c.regressions == []
    assert "consistency check" in c.relation_line
    assert all(row.band_pct == 10 for row in c.rows if row.side == "gpu")


def test_to_dict_puts_the_verdict_first_and_records_sides():
    base = load_report(H100)
    data = json.loads(json.dumps(compare([("a", base), ("b", _two_days_later(base))]).to_dict()))
    assert next(iter(data)) == "verdict" and data["relation"] == "same machine"
    assert {r["side"] for r in data["rows"]} == {"gpu", "host-bound", "host"}
    assert data["host_load"] == {"a": "host load not recorded", "b": "host load not recorded"}


@pytest.mark.parametrize("tag", READABLE_SCHEMAS)
def test_reports_of_every_schema_version_load(tmp_path, tag):
    data = json.loads(H100.read_text())
    data["schema"] = tag
    if not tag.endswith("/1"):
        data["host_load"] = [QUIET]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    report = load_report(path)
    assert report.schema == SCHEMA_ID and report.host_load == ([QUIET] if not tag.endswith("/1") else [])
    assert all(r.spread is None for r in report.results)  # older reports kept no windows: judged on medians


MEASURED_LATER = Path(__file__).parent / "fixtures" / "compare" / "h100x1-standard-2026-11-25.json"


def test_two_real_standard_runs_of_one_gpu_kind_a_day_apart_are_no_regression(capsys):
    # Both real: the 2026-11-24 report and a standard run on another H100 of the same kind a day later. Its host's
    # CPU rows moved from -39 % to +200 % (another Firecracker host); every GPU row stayed within a few %.
    base, later = load_report(H100), load_report(MEASURED_LATER)
    c = compare([("2026-11-24", base), ("2026-11-25", later)])
    assert c.relation == "same model"
    assert c.regressions == [] and c.verdict.startswith("verdict: GPU: no regression")
    gpu = [r for r in c.rows if r.side == "gpu" and r.ratios[1] is not None]
    assert len(gpu) == 8 and all(0.95 < r.ratios[1] < 1.05 for r in gpu)
    host = [r for r in c.rows if r.side == "host"]
    assert min(r.ratios[1] for r in host if r.ratios[1]) < 0.65  # a host row fell far: other hosts are not judged
    assert all(r.band_pct is None and r.band_why == "other hosts: compared, not judged" for r in host)
    assert main(["compare", str(H100), str(MEASURED_LATER)]) == 0
    assert capsys.readouterr().out.startswith("verdict: GPU: no regression")


def test_on_the_same_gpus_a_host_row_that_fell_beyond_its_band_is_a_host_regression():
    base, later = load_report(H100), load_report(MEASURED_LATER)
    same = copy.deepcopy(later)
    same.fingerprint["gpus"] = copy.deepcopy(base.fingerprint["gpus"])  # the same UUIDs: the same machine
    c = compare([("before", base), ("after", same)])
    assert c.relation == "same machine"
    regressed = [r for r in c.rows if r.regressed_in]
    assert regressed and {r.side for r in regressed} == {"host"}
    assert c.verdict.startswith("verdict: GPU: no regression against before · host: REGRESSION: 1 host result(s)")


REAL_PAIR = sorted((Path(__file__).parent / "fixtures" / "compare").glob("h100x1-standard-2026-11-26T*.json"))


def test_two_standard_runs_of_one_h100_two_minutes_apart_are_no_regression(capsys):
    """The pair as measured (one H100 in a KVM guest, the suite run twice in a row, host load recorded as quiet):
    GPU probes within -2.6…+0.6 %, CPU and host-bound rows -20…+13 % in both directions."""
    assert len(REAL_PAIR) == 2
    assert main(["compare", *map(str, REAL_PAIR)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("verdict: GPU: no regression") and "GPU rows: 8, -2.6 %…+0.6 %" in first
    c = compare([(str(p), load_report(p)) for p in REAL_PAIR])
    assert c.relation == "same machine" and c.regressions == []
    assert {row.band_pct for row in c.rows if row.side != "gpu"} == {30}
    assert max(row.band_pct for row in c.rows if row.side == "gpu") < 10  # the GPU rows keep a tight band


def _windowed(report, factor: float, jitter: float):
    """The report's GPU-bound matmul rows with 8 windows around value x factor, +-jitter."""
    from gpulab.report import spread

    rows = [r for r in report.results if r.workload == "matmul" and r.launcher == "gpu"]
    for r in rows:
        values = [r.value * factor * (1 + jitter * d) for d in (-1, -0.6, -0.3, 0, 0.1, 0.4, 0.7, 1)]
        r.spread = spread.of_windows(values, r.unit)
        r.value = r.spread.median
    return rows


def test_a_row_regresses_when_the_interval_of_its_ratio_lies_below_the_band_not_its_median():
    from gpulab.report.compare import compare
    from gpulab.report.compare.render import to_text

    base = load_report(H100)
    noisy = load_report(H100)
    _windowed(base, 1.0, 0.02)
    # 7 % lower median, windows +-12 %: below the 5 % band by the median, not by the interval
    _windowed(noisy, 0.93, 0.12)
    cmp = compare([("a", base), ("b", noisy)], 5.0)
    rows = [r for r in cmp.rows if r.key[0] == "matmul" and r.ratio_interval(1) is not None]
    assert rows and all(r.ratios[1] < 0.95 and r.ratio_interval(1).high >= 0.95 for r in rows)
    assert not any(r.regression for r in rows)
    steady = load_report(H100)
    _windowed(steady, 0.9, 0.01)  # 10 % lower, tight: the interval says so
    cmp = compare([("a", base), ("c", steady)], 5.0)
    rows = [r for r in cmp.rows if r.key[0] == "matmul" and r.ratio_interval(1) is not None]
    assert rows and all(r.regression and r.ratio_interval(1).high < 0.95 for r in rows)
    text = to_text(cmp)
    assert "] (8)" in text and "%" in text  # median [low–high] (n) and the ratio's interval are shown
