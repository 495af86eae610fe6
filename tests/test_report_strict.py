"""The loader is as strict as the writer: no NaN or infinity, no zero or negative measurements, counts or
ratios; each refused in one line that names the file, the JSON location and what is wrong."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from gpulab.cli import main
from gpulab.errors import GpulabError
from gpulab.records import SCHEMA_ID
from gpulab.report.io import ReportError, load_report, report_from_data, write_report
from report_builders import sample_report


@pytest.fixture
def good(tmp_path) -> tuple[Path, str, dict[str, Any]]:
    path = write_report(sample_report(), tmp_path / "good.json")
    text = path.read_text()
    return path, text, json.loads(text)


def _refused(path: Path) -> str:
    with pytest.raises(ReportError) as info:
        load_report(path)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    assert info.value.exit_code == 2
    return _unlabelled(msg)


def _unlabelled(msg: str) -> str:
    """The message without the key of the row a path points into: `$.results[2] (matmul ...).value` -> `[2].value`."""
    return re.sub(r"(\[\d+\]) \([^)]*\)", r"\1", msg)


@pytest.mark.parametrize(
    ("literal", "shown"),
    [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e999", "1e999 (beyond the float range)")],
)
def test_non_finite_numbers_are_refused_with_their_location(tmp_path, good, literal, shown):
    _, text, data = good
    value = data["results"][2]["value"]
    assert text.count(f'"value": {value},') == 1
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace(f'"value": {value},', f'"value": {literal},'))
    msg = _refused(bad)
    assert f"$.results[2].value is {shown}, not a finite number" in msg
    assert "re-run it, or fix or remove that value" in msg


def test_non_finite_deep_inside_telemetry_is_found(tmp_path, good):
    _, text, _ = good
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace('"power_w": 600.0', '"power_w": NaN', 1))
    assert "$.results[9].telemetry.timeline[0].power_w is NaN" in _refused(bad)


def _spread(**changes: Any) -> dict[str, Any]:
    spread = {"windows": [1.0, 2.0, 3.0], "median": 2.0, "low": 1.0, "high": 3.0, "confidence": 0.75}
    return {**spread, "method": "range", **changes}


@pytest.mark.parametrize(
    ("where", "mutate", "expected"),
    [
        ("$.results[0].value", lambda d: d["results"][0].update(value=-785.0), "-785.0 is out of range"),
        ("$.results[0].value", lambda d: d["results"][0].update(value=0), "0 is out of range, it must be greater"),
        ("$.results[0].n", lambda d: d["results"][0].update(n=0), "must be at least 1"),
        ("$.results[0].seconds", lambda d: d["results"][0].update(seconds=-2.0), "must be at least 0"),
        ("$.results[0].spec_value", lambda d: d["results"][0].update(spec_value=0), "greater than 0"),
        ("$.results[11].batch", lambda d: d["results"][11].update(batch=0), "must be at least 1"),
        ("$.results[0].iterations", lambda d: d["results"][0].update(iterations=0), "must be at least 1"),
        (
            "$.results[11].telemetry.interval_s",
            lambda d: d["results"][11]["telemetry"].update(interval_s=0),
            "greater than 0",
        ),
        ("$.speedups[0].ratio", lambda d: d["speedups"][0].update(ratio=-1.5), "greater than 0"),
        ("$.scaling[1].throughput", lambda d: d["scaling"][1].update(throughput=0), "greater than 0"),
        ("$.scaling[1].efficiency", lambda d: d["scaling"][1].update(efficiency=-0.5), "greater than 0"),
        ("$.scaling[1].n", lambda d: d["scaling"][1].update(n=0), "must be at least 1"),
        ("$.duration_s", lambda d: d.update(duration_s=-1), "must be at least 0"),
        (
            "$.results[0].value",
            lambda d: d["results"][0].update(value=1e300),
            "1e+300 is out of range, it must be at most",
        ),
        ("$.results[0].pct_of_spec", lambda d: d["results"][0].update(pct_of_spec=1e13), "must be at most 1e+12"),
        ("$.speedups[0].ratio", lambda d: d["speedups"][0].update(ratio=1e300), "must be at most 1e+12"),
        ("$.scaling[1].throughput", lambda d: d["scaling"][1].update(throughput=1e300), "must be at most 1e+12"),
        (
            "$.results[0].spread.windows[1]",
            lambda d: d["results"][0].update(spread=_spread(windows=[1.0, 1e300, 2.0])),
            "must be at most 1e+12",
        ),
        (
            "$.fingerprint.gpus[0].nvlinks[0].bandwidth_gbps",
            lambda d: d["fingerprint"]["gpus"][0]["nvlinks"][0].update(bandwidth_gbps=-26.5),
            "must be at least 0",
        ),
    ],
)
def test_out_of_range_values_are_refused(tmp_path, good, where, mutate, expected):
    _, _, data = good
    data = copy.deepcopy(data)
    mutate(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    msg = _refused(bad)
    assert f"does not match {SCHEMA_ID}: {where}: " in msg and expected in msg, msg


def test_writer_refuses_what_the_loader_refuses(tmp_path):
    report = sample_report()
    report.results[0].value = -1.0
    with pytest.raises(GpulabError, match=r"\$\.results\[0\]\.value: -1\.0 is out of range"):
        write_report(report, tmp_path / "r.json")
    report.results[0].value = math.inf
    with pytest.raises(GpulabError, match=r"\$\.results\[0\]\.value is not a JSON value"):
        write_report(report, tmp_path / "r.json")
    assert not list(tmp_path.iterdir())


def test_report_from_data_refuses_nan_built_in_memory():
    data = sample_report().to_dict()
    data["scaling"][0]["efficiency"] = math.nan
    with pytest.raises(ReportError, match=r"\$\.scaling\[0\] \(\w+ .*\)\.efficiency is NaN, not a finite number"):
        report_from_data(data, "child.json")


def test_the_fixture_report_still_loads():
    report = load_report(Path(__file__).parent / "fixtures" / "reports" / "h200x4-standard.json")
    assert all(r.value > 0 for r in report.results)


def test_compare_refuses_nan_and_negative_reports(tmp_path, good, capsys):
    path, text, data = good
    nan = tmp_path / "nan.json"
    nan.write_text(text.replace(f'"value": {data["results"][0]["value"]},', '"value": NaN,'))
    assert main(["compare", str(path), str(nan)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"gpulab: error: {nan}: $.results[0] (matmul torch gpu n=1 bf16).value is NaN, not a finite number (gpulab "
        "never writes NaN or infinity); the run that produced it went wrong: re-run it, or fix or remove that value"
    )
    data["results"][0]["value"] = -785.0
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps(data))
    assert main(["compare", str(path), str(neg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"{neg} does not match {SCHEMA_ID}: $.results[0] (matmul torch gpu n=1 bf16).value: -785.0 is out" in err


@pytest.mark.parametrize("literal", ["1e300", "Infinity", "NaN", "-5"])
def test_compare_refuses_an_absurd_figure_naming_the_file_row_and_field(tmp_path, good, literal):
    import subprocess
    import sys

    path, text, data = good
    bad = tmp_path / "absurd.json"
    bad.write_text(text.replace(f'"value": {data["results"][0]["value"]},', f'"value": {literal},', 1))
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", "compare", str(path), str(bad)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith(f"gpulab: error: {bad}") and "$.results[0] (matmul torch gpu n=1 bf16).value" in (
        proc.stderr
    )
    assert "regress" not in proc.stdout
