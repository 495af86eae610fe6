"""A report's `telemetry.per_gpu` entries are GpuTelemetry records: the schema's item lists exactly the record's fields
and refuses any other key, so what the schema accepts the record reads, and a key the record would refuse is a schema
error naming the entry rather than a TypeError in the loader."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gpulab.records import GpuTelemetry
from gpulab.report.io import ReportError, load_report, load_schema, report_from_data, report_json

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = [ROOT / "tests" / "fixtures", ROOT.parent / "shared" / "fixtures"]


def _per_gpu_item() -> dict[str, Any]:
    item: dict[str, Any] = load_schema()["$defs"]["telemetry"]["properties"]["per_gpu"]["items"]
    return item


def _reports() -> list[Path]:
    """Every JSON file under the fixtures that is a gpulab report (its `schema` names gpulab.report)."""
    found = []
    for base in FIXTURES:
        for path in sorted(base.rglob("*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and str(data.get("schema", "")).startswith("gpulab.report/"):
                found.append(path)
    return found


def test_the_schemas_per_gpu_item_is_the_records_fields() -> None:
    item = _per_gpu_item()
    assert set(item["properties"]) == {f.name for f in dataclasses.fields(GpuTelemetry)}
    assert item["additionalProperties"] is False
    required = {f.name for f in dataclasses.fields(GpuTelemetry) if f.default is dataclasses.MISSING}
    required -= {f.name for f in dataclasses.fields(GpuTelemetry) if f.default_factory is not dataclasses.MISSING}
    assert set(item["required"]) == required == {"index"}


def test_the_reports_gpulab_wrote_hold_no_other_key() -> None:
    reports = _reports()
    assert len(reports) >= 10
    for path in reports:
        report = load_report(path)  # validated against the schema, then read into the records
        again = json.loads(report_json(report))
        raw = json.loads(path.read_text())
        assert [r.get("telemetry") for r in again.get("results", [])] == [
            r.get("telemetry") for r in raw.get("results", [])
        ], path


def test_a_key_the_record_lacks_is_a_schema_error_naming_it() -> None:
    path, data, row = next(
        (p, d, r)
        for p in _reports()
        for d in [json.loads(p.read_text())]
        for r in d.get("results", [])
        if (r.get("telemetry") or {}).get("per_gpu")
    )
    row["telemetry"]["per_gpu"][0]["fan_pct"] = 40
    with pytest.raises(ReportError, match=r"per_gpu\[0\].*fan_pct"):
        report_from_data(data, path)


def test_a_record_written_is_a_valid_item() -> None:
    counts = {"gpu_idle": 2}
    full = GpuTelemetry(1, 3, 50.0, throttle_reasons=["gpu_idle"], throttle_counts=counts, window_s=[0.5, None])
    assert set(full.to_dict()) == set(_per_gpu_item()["properties"])
    assert "window_s" not in GpuTelemetry(0).to_dict()
