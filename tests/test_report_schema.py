"""The report JSON Schema: well-formed, and it accepts what the fingerprint and report models write."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from gpulab.records import READABLE_SCHEMAS, Report
from gpulab.report.io import load_schema, schema_errors
from report_builders import full_fingerprint, minimal_fingerprint, sample_report


def _fp_errors(fp: dict) -> list[str]:
    return schema_errors(Report(fingerprint=fp).to_dict())


def test_schema_is_valid_draft_2020_12():
    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["properties"]["schema"]["enum"] == list(READABLE_SCHEMAS)


def test_full_fingerprint_validates():
    fp = full_fingerprint().to_dict()
    assert fp["gpus"] and fp["host"]["numa_nodes"] and fp["software"]["frameworks"]
    assert _fp_errors(fp) == []


def test_minimal_fingerprint_without_gpus_validates():
    assert _fp_errors(minimal_fingerprint().to_dict()) == []


def test_every_fingerprint_field_is_described():
    """Each key `to_dict` writes is a declared property, so the schema keeps up with records/machine.py."""
    schema = load_schema()
    defs = schema["$defs"]
    fp = full_fingerprint().to_dict()
    assert set(fp) == set(defs["fingerprint"]["properties"])
    assert set(fp["host"]) == set(defs["host"]["properties"])
    assert set(fp["host"]["cpu"]) == set(defs["cpu"]["properties"])
    assert set(fp["software"]) == set(defs["software"]["properties"])
    assert set(fp["software"]["frameworks"][0]) == set(defs["framework"]["properties"])
    gpu = fp["gpus"][0]
    assert set(gpu) == set(defs["gpu"]["properties"])
    assert set(gpu["pcie"]) == set(defs["pcie_link"]["properties"])
    assert set(gpu["ecc_errors"]) == set(defs["ecc_errors"]["properties"])
    assert set(gpu["retirement"]) == set(defs["memory_retirement"]["properties"])
    assert set(gpu["nvlinks"][0]) == set(defs["nvlink"]["properties"])


def test_sample_report_validates_and_uses_from_key():
    data = sample_report().to_dict()
    assert schema_errors(data) == []
    assert "from" in data["speedups"][0] and "from_" not in data["speedups"][0]


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d["fingerprint"]["host"].update(hostnme="x"), "$.fingerprint.host"),
        (
            lambda d: d["fingerprint"]["gpus"][0]["pcie"].update(gen_current="5"),
            "$.fingerprint.gpus[0].pcie.gen_current",
        ),
        (lambda d: d["checks"][0].update(status="passed"), "$.checks[0].status"),
        (lambda d: d["results"][0].update(value="fast"), "$.results[0].value"),
        (lambda d: d["speedups"][0].update(from_=d["speedups"][0].pop("from")), "$.speedups[0]"),
        (lambda d: d["thresholds"][0].pop("source"), "$.thresholds[0]"),
        (lambda d: d["scaling"][0].pop("efficiency"), "$.scaling[0]"),
        (lambda d: d.update(extra=1), "$"),
        (lambda d: d.pop("fingerprint"), "$"),
    ],
)
def test_schema_catches_mistakes(mutate, where):
    data = json.loads(json.dumps(sample_report().to_dict()))
    mutate(data)
    errors = schema_errors(data)
    assert errors, "expected a schema error"
    assert any(e.startswith(where + ":") for e in errors), errors
