"""A report's tier is a value type: gpulab.names.ValidationTier (quick, standard, full; `.meaning` is its Tier) or,
for a report no validation run wrote, ReportOrigin (run, published). Both are str enums, so a report's JSON is as
before; they are read by their parser at the edges only: the suite's --tier option and a report being loaded."""

from __future__ import annotations

import ast
import json
import typing
from pathlib import Path

import pytest

from gpulab.checks import dcgm
from gpulab.errors import UnknownValue
from gpulab.names import (
    DEFAULT_TIER,
    PUBLISHED_TIER,
    REPORT_TIERS,
    RUN_REPORT_TIER,
    TIER_TABLE,
    TIERS,
    ReportOrigin,
    ReportTier,
    ValidationTier,
)
from gpulab.records import Report
from gpulab.report.io import load_report
from gpulab.validation.session import Options
from vocabulary_reads import offenders, quiet_edges, text_reads

REPORTS = Path(__file__).parent / "fixtures" / "reports"
EDGES = {
    "src/gpulab/names.py": "the parser",
    "src/gpulab/validation/plugin.py": "pytest validate/ --tier",
    "src/gpulab/records/report.py": "a report's tier",
}


def _tier_reads(tree: ast.AST) -> list[str]:
    """Code that reads a tier's text: the parser called (names.tier, ValidationTier.parse, ValidationTier("full")),
    a membership test in the tier names, or the meaning table used."""
    return text_reads(
        tree,
        types=("ValidationTier", "ReportOrigin"),
        parsers=("parse", "parse_reported"),
        functions=("names.tier", "tier"),
        names="TIERS",
        table="TIER_TABLE",
    )


def test_no_module_but_the_edges_reads_a_tiers_text() -> None:
    assert offenders(_tier_reads, EDGES) == {}
    assert quiet_edges(_tier_reads, EDGES) == []


def test_the_check_finds_each_way_a_tier_was_read() -> None:
    source = (
        'a = names.tier(t)\nb = ValidationTier.parse(t)\nc = names.ValidationTier("full")\nd = t in names.TIERS\n'
        'e = t not in REPORT_TIERS\nf = TIER_TABLE[t]\ng = ReportOrigin("run")\nh = ValidationTier.parse_reported(t)\n'
    )
    assert len(_tier_reads(ast.parse(source))) == 8
    assert _tier_reads(ast.parse("a = lab.options.tier.meaning.workload_size\nb = list(ValidationTier)\n")) == []


def test_each_tier_is_its_value_and_has_its_meaning() -> None:
    assert tuple(t.value for t in ValidationTier) == TIERS and (*TIERS, "run", "published") == REPORT_TIERS
    for member in ValidationTier:
        assert ValidationTier.parse(member.value) is member is ValidationTier.parse_reported(member.value)
        assert member.meaning is TIER_TABLE[member] and member.meaning.name is member
        assert str(member) == f"{member}" == member.value and json.dumps(member) == json.dumps(member.value)
    for origin in ReportOrigin:
        assert ValidationTier.parse_reported(origin.value) is origin and str(origin) == origin.value
    assert (DEFAULT_TIER, RUN_REPORT_TIER, PUBLISHED_TIER) == ("quick", "run", "published")
    with pytest.raises(UnknownValue) as err:
        ValidationTier.parse("run")  # a report's origin is not a tier a validation run takes
    assert err.value.choices == TIERS
    with pytest.raises(UnknownValue) as err:
        ValidationTier.parse_reported("deep")
    assert err.value.choices == REPORT_TIERS


def test_the_records_hold_the_type() -> None:
    assert typing.get_type_hints(Report)["tier"] == ReportTier
    assert typing.get_type_hints(Options)["tier"] is ValidationTier
    assert Options().tier is ValidationTier.QUICK and dcgm.level_for(ValidationTier.FULL) == 3


@pytest.mark.parametrize("path", sorted(REPORTS.glob("*.json")), ids=lambda p: p.stem)
def test_a_recorded_reports_tier_loads_as_a_member(path: Path) -> None:
    report = load_report(path)
    assert isinstance(report.tier, ValidationTier | ReportOrigin)
    assert report.tier == json.loads(path.read_text()).get("tier", "quick")
