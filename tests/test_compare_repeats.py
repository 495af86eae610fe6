"""A configuration measured more than once in a report: every measurement kept, the median compared, the
count and the spread shown."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from gpulab.cli import main
from gpulab.records import Report, Result
from gpulab.report.append import append_results
from gpulab.report.compare import compare
from gpulab.report.compare.render import to_text
from gpulab.report.io import load_report, write_report
from report_builders import sample_report

FIXTURE = Path(__file__).parent / "fixtures" / "reports" / "h200x4-standard.json"
KEY = ("resnet50", "torch", "gpu", 1, "bf16", "")


def _gpu1(report: Report) -> Result:
    return next(r for r in report.results if r.key() == KEY)


def _with_repeats(report: Report, *factors: float) -> Report:
    """A copy whose resnet50 gpu:1 row is measured again once per factor (value × factor), appended last."""
    out = copy.deepcopy(report)
    first = _gpu1(out)
    out.results += [dataclasses.replace(first, value=first.value * f) for f in factors]
    return out


def test_a_second_measurement_at_half_speed_is_kept_and_compared_by_median():
    base = sample_report()
    new = _with_repeats(base, 0.5)  # 3100 then 1550: the old compare kept 3100 and passed
    c = compare([("A", base), ("B", new)], threshold_pct=5)
    row = next(r for r in c.rows if r.key == KEY)
    assert row.measurements == [[3100.0], [3100.0, 1550.0]]
    assert row.values == [3100.0, pytest.approx(2325.0)]
    assert row.ratios[1] == pytest.approx(0.75) and row.regressed_in == ["B"]
    assert row.spread(1) == (1550.0, 3100.0) and row.spread(0) == (3100.0, 3100.0)
    assert sum(len(m) for r in c.rows for m in r.measurements) == len(base.results) + len(new.results)
    assert c.wide_spreads == [
        "resnet50/torch/gpu n=1 bf16: B has 2 measurements (3,100, 1,550 samples/s), 67 % apart; median 2,325 compared"
    ]
    text = to_text(c, width=240)
    assert "2,325 (median of 2: 1,550–3,100)" in text
    assert "regressions are judged on the median" in text
    assert "repeated measurements more than 5 % apart" in text
    assert "resnet50/torch/gpu n=1 bf16: B 2,325 (median of 2: 1,550–3,100) vs 3,100 samples/s (-25.0 %; GPU" in text
    data = json.loads(json.dumps(c.to_dict()))
    jrow = next(r for r in data["rows"] if r["workload"] == "resnet50" and r["launcher"] == "gpu")
    assert jrow["counts"] == {"A": 1, "B": 2}
    assert jrow["spread"] == {"A": {"min": 3100.0, "max": 3100.0}, "B": {"min": 1550.0, "max": 3100.0}}
    assert jrow["measurements"] == {"A": [3100.0], "B": [3100.0, 1550.0]}
    assert data["aggregate"] == "median" and data["wide_spreads"] == c.wide_spreads


def test_one_outlier_among_three_does_not_fake_a_regression_but_shows():
    base = sample_report()
    new = _with_repeats(base, 0.99, 0.5)  # 3100, 3069, 1550: median 3069
    c = compare([("A", base), ("B", new)], threshold_pct=5)
    row = next(r for r in c.rows if r.key == KEY)
    assert row.values[1] == pytest.approx(3069.0) and not row.regression
    assert c.regressions == [] and len(c.wide_spreads) == 1 and "B has 3 measurements" in c.wide_spreads[0]


def test_repeats_in_the_baseline_compare_by_their_median():
    base = _with_repeats(sample_report(), 0.5)
    c = compare([("A", base), ("B", sample_report())], threshold_pct=5)
    row = next(r for r in c.rows if r.key == KEY)
    assert row.values[0] == pytest.approx(2325.0) and row.ratios[1] == pytest.approx(3100 / 2325)
    assert c.regressions == [] and c.wide_spreads[0].startswith("resnet50/torch/gpu n=1 bf16: A has 2")


def test_close_repeats_are_not_listed_as_wide():
    c = compare([("A", sample_report()), ("B", _with_repeats(sample_report(), 0.98))], threshold_pct=5)
    assert c.wide_spreads == [] and c.regressions == []
    assert "median of 2" in to_text(c, width=240)


def test_cli_two_runs_appended_to_one_report(tmp_path, capsys):
    """What `gpulab run --report new.json` twice makes: the same key twice, the second at half speed."""
    base = tmp_path / "base.json"
    write_report(sample_report(), base)
    new = tmp_path / "new.json"
    write_report(sample_report(), new)
    slow = dataclasses.replace(_gpu1(sample_report()), value=1550.0)
    append_results(new, [slow])
    assert sum(r.key() == KEY for r in load_report(new).results) == 2
    assert main(["compare", str(base), str(new)]) == 1
    out = capsys.readouterr().out
    assert "verdict: GPU: REGRESSION" in out and "median of 2" in out and "1,550–3,100" in out  # the table may wrap
    assert main(["compare", str(base), str(new), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    (row,) = [r for r in data["rows"] if r["regressed_in"]]
    assert row["counts"][str(new)] == 2 and row["spread"][str(new)] == {"min": 1550.0, "max": 3100.0}


def test_cli_the_real_fixture_compared_with_itself(capsys):
    report = load_report(FIXTURE)
    assert main(["compare", str(FIXTURE), str(FIXTURE), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["regression"] is False
    assert sum(r["counts"][str(FIXTURE)] for r in data["rows"]) == len(report.results)  # nothing dropped
    (twice,) = [r for r in data["rows"] if r["counts"][str(FIXTURE)] > 1]
    assert (twice["workload"], twice["launcher"], twice["n"], twice["device"]) == ("resnet50", "gpu", 1, "cuda:0")
    low, high = sorted(r.value for r in report.results if r.key() == ("resnet50", "torch", "gpu", 1, "bf16", "cuda:0"))
    assert twice["spread"][str(FIXTURE)] == {"min": low, "max": high}
    assert twice["values"][str(FIXTURE)] == pytest.approx((low + high) / 2)
    assert main(["compare", str(FIXTURE), str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "(median" in out and "3,956–4,331" in out  # the table may wrap the cell
    assert "9 % apart" in out and out.startswith("verdict: GPU: no regression")


def test_compare_help_states_the_median_rule(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "judged on the median" in " ".join(capsys.readouterr().out.split())
