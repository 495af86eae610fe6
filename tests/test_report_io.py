"""Writing and loading report JSON: round trip, atomic writes, and every way a file can be wrong."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import pytest

from gpulab.errors import GpulabError
from gpulab.records import SCHEMA_ID, Check, GpuTelemetry, Report
from gpulab.report.io import (
    ReportError,
    atomic_write_text,
    default_report_path,
    load_report,
    report_json,
    write_report,
)
from report_builders import minimal_fingerprint, sample_report


def test_round_trip_equals(tmp_path):
    report = sample_report()
    path = write_report(report, tmp_path / "deep" / "dir" / "r.json")
    assert path.exists()
    loaded = load_report(path)
    assert loaded == report
    assert loaded.results[-1].telemetry is not None and loaded.results[-1].telemetry.timeline
    assert loaded.speedups[0].from_ == "cpu:64"


RECORDED = sorted((Path(__file__).parent / "fixtures").glob("*/**/*.json"))
RECORDED_REPORTS = [p for p in RECORDED if '"fingerprint"' in p.read_text() and '"results"' in p.read_text()]


@pytest.mark.parametrize("path", RECORDED_REPORTS, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_recorded_telemetry_reads_as_records_and_writes_back_unchanged(path):
    data = json.loads(path.read_text())
    report = load_report(path)
    gpus = [g for r in report.results if r.telemetry is not None for g in r.telemetry.per_gpu]
    assert all(isinstance(g, GpuTelemetry) for g in gpus)
    written = [row.get("telemetry") for row in report.to_dict()["results"]]
    assert json.dumps(written) == json.dumps([row.get("telemetry") for row in data["results"]])
    if data["schema"] == SCHEMA_ID:  # nothing to upgrade: the whole file comes back byte for byte
        assert report_json(report) == path.read_text()


def test_a_summary_over_the_whole_run_writes_no_window():
    whole = GpuTelemetry(0, samples=3, util_mean=50.0)
    assert "window_s" not in whole.to_dict() and GpuTelemetry.from_dict(whole.to_dict()) == whole
    windowed = GpuTelemetry(0, window_s=[1.0, None])
    assert windowed.to_dict()["window_s"] == [1.0, None]


def test_round_trip_minimal(tmp_path):
    report = Report(fingerprint=minimal_fingerprint().to_dict(), tier="quick")
    assert load_report(write_report(report, tmp_path / "r.json")) == report


def test_write_leaves_no_temp_files(tmp_path):
    write_report(sample_report(), tmp_path / "r.json")
    write_report(sample_report(), tmp_path / "r.json")  # replace an existing one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_invalid_report_is_refused_and_existing_file_kept(tmp_path):
    path = tmp_path / "r.json"
    write_report(sample_report(), path)
    before = path.read_bytes()
    bad = sample_report()
    bad.checks.append(Check(name="x", status="passed", message=""))  # type: ignore[arg-type]
    with pytest.raises(GpulabError, match=r"\$\.checks\[\d+\]\.status"):
        write_report(bad, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_nan_is_refused_with_its_path(tmp_path):
    bad = sample_report()
    bad.results[0].value = math.nan
    with pytest.raises(GpulabError, match=r"\$\.results\[0\]\.value"):
        write_report(bad, tmp_path / "r.json")
    assert not list(tmp_path.iterdir())


def _err(path: Path) -> str:
    with pytest.raises(ReportError) as info:
        load_report(path)
    msg = str(info.value)
    assert str(path) in msg
    assert info.value.exit_code == 2
    return msg


def test_missing_file(tmp_path):
    assert "does not exist" in _err(tmp_path / "nope.json")


def test_directory(tmp_path):
    assert "is a directory" in _err(tmp_path)


def test_empty_file(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("  \n")
    assert "is empty" in _err(p)


def test_truncated_file(tmp_path):
    p = write_report(sample_report(), tmp_path / "r.json")
    text = p.read_text()
    p.write_text(text[: len(text) // 2])
    msg = _err(p)
    assert "truncated" in msg and "line" in msg and "column" in msg


def test_not_json(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("schema: gpulab.report/1\nthis is yaml\n")
    msg = _err(p)
    assert "not valid JSON" in msg and "line 1 column 1" in msg


def test_binary_file(tmp_path):
    p = tmp_path / "r.json"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    assert "not a gpulab report" in _err(p)


@pytest.mark.parametrize("data", [{"name": "package.json"}, {"schema": "other/1"}, [1, 2], "text"])
def test_foreign_json(tmp_path, data):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(data))
    assert f"{p} is not a gpulab report (schema" in _err(p)


def test_newer_schema_version(tmp_path):
    p = write_report(sample_report(), tmp_path / "r.json")
    data = json.loads(p.read_text())
    newer = f"gpulab.report/{int(SCHEMA_ID.rsplit('/', 1)[1]) + 1}"
    data["schema"] = newer
    p.write_text(json.dumps(data))
    msg = _err(p)
    assert f"written by a newer gpulab: {newer}; upgrade gpulab" in msg


def test_schema_violation_names_path(tmp_path):
    p = write_report(sample_report(), tmp_path / "r.json")
    data = json.loads(p.read_text())
    data["results"][2]["n"] = "two"
    del data["checks"][0]["status"]
    p.write_text(json.dumps(data))
    msg = _err(p)
    assert f"does not match {SCHEMA_ID}" in msg
    assert "$.results[2] (matmul torch gpu n=two bf16).n" in msg and "$.checks[0]" in msg
    assert "'status' is a required property" in msg


def test_default_report_path(tmp_path):
    when = dt.datetime(2025, 6, 1, 14, 30, 5, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    path = default_report_path(tmp_path, "gpu 01/a", now=when)
    assert path == tmp_path / "report-gpu_01_a-20250601T123005Z.json"
    assert default_report_path(tmp_path, "h").name.startswith("report-h-")


def test_an_atomic_write_through_a_symbolic_link_is_refused_and_the_file_it_names_kept(tmp_path):
    real = tmp_path / "kept" / "page.html"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "page.html"
    link.symlink_to(real)
    with pytest.raises(GpulabError, match="is a symbolic link"):
        atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "old"
    assert sorted(p.name for p in real.parent.iterdir()) == ["page.html"]  # no temporary file left
