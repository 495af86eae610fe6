"""Every shipped study's report (STUDY_DIR/report.json) compared with its shipped baseline (`baseline:NAME`): the
comparison works, or says why not, and work of another size never gets a bare ratio.

The study reports are built the way a study builds them (studies.results.study_results) from database rows as a
run on the real H100 of tests/fixtures/reports/h100x1-standard.json would leave them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpulab.cli import main
from gpulab.names import RUN_REPORT_TIER
from gpulab.records import Report
from gpulab.report.append import merge_results
from gpulab.report.compare import compare
from gpulab.report.io import load_report, write_report
from gpulab.studies import baselines
from gpulab.studies.commands import shipped
from gpulab.studies.results import study_results
from gpulab.studies.spec import Study, load_study

H100 = Path(__file__).parent / "fixtures" / "reports" / "h100x1-standard.json"


def _variants(path: Path) -> list[str | None]:
    return [None, *sorted(yaml.safe_load(path.read_text()).get("variants") or {})]


CASES = [(name, variant) for name, path in shipped().items() for variant in _variants(path)]


def _rows(study: Study) -> list[dict[str, Any]]:
    """Database rows of successful runs: whole-machine runs one per GPU count, worker runs on GPU 0."""
    common = {"status": "ok", "study": study.name, **study.fixed}
    if study.whole_machine:
        given = study.vary.params.get("gpus") or [study.gpus]
        counts = [int(n) if str(n).isdigit() else 4 for n in given]  # "all": the four GPUs of a machine
        return [
            {
                **common,
                "launcher_used": study.launcher,
                "gpus_used": int(n),
                "precision_used": "bf16",
                "samples_per_s": 1000.0 * int(n) * 0.8,
                "timed_s": 10.0 / int(n),
            }
            for n in counts
        ]
    return [
        {**common, "device": "gpu0 (NVIDIA H100 80GB HBM3)", "precision_used": "tf32", "samples_per_s": 170.0}
        for _ in range(3)
    ]


def _study_report(tmp_path: Path, study: Study) -> Path:
    report = Report(fingerprint=load_report(H100).fingerprint, tier=RUN_REPORT_TIER)
    return write_report(merge_results(report, study_results(_rows(study), study)), tmp_path / "report.json")


@pytest.mark.parametrize(("name", "variant"), CASES, ids=[f"{n}-{v or 'full'}" for n, v in CASES])
def test_every_study_compares_with_its_baseline_or_says_why_not(tmp_path, capsys, name, variant):
    study = load_study(shipped()[name], variant)
    path = _study_report(tmp_path, study)
    if not study.baseline:
        line = baselines.compare_line(study, [])
        assert line and "no published figures are shipped" in line
        return
    code = main(["compare", str(path), f"baseline:{study.baseline}"])
    captured = capsys.readouterr()
    out = captured.out + captured.err
    if code == 2:  # refused: it must say why in one line naming both sides
        assert "share no results" in out and "gpulab: error:" in out
        return
    assert code == 0 and out.startswith("verdict: none")
    c = compare([("study", load_report(path)), ("published", baselines.load(study.baseline))])
    shared = [r for r in c.rows if all(v is not None for v in r.values)]
    assert shared, out
    for row in shared:
        if row.ratios[1] is None:  # no ratio: the row says why (other work, or units without a one-GPU row)
            assert "no ratio" in row.status and row.status in out
        else:
            assert row.status == "ok"


def test_the_epoch_studies_compare_with_the_published_epoch_figures():
    """mnist-keras (MirroredStrategy) and cifar10-vgg (DataParallel) against the published "x one GPU" figures."""
    for name, key in (("mnist-keras", "mnist (epochs)"), ("cifar10-vgg", "cifar10 (epochs)")):
        study = load_study(shipped()[name])
        report = Report(fingerprint=load_report(H100).fingerprint, tier=RUN_REPORT_TIER)
        report.results = study_results(_rows(study), study)
        c = compare([("study", report), ("published", baselines.load(study.baseline or ""))])
        (two,) = [r for r in c.rows if r.key[0] == key and r.key[3] == 2]
        assert two.unit == "x one GPU" and two.values[0] == pytest.approx(2.0)  # 1600 / 800 samples/s
        assert two.values[1] in (1.6, 1.3) and two.ratios[1] == pytest.approx(two.values[1] / 2.0)
        assert any("compared as speedup over each report's own one-GPU rate" in n for n in c.notes)


def test_a_tiny_style_study_is_not_set_against_the_full_size_figures(tmp_path, capsys):
    study = load_study(shipped()["neural-style"], "tiny")
    path = _study_report(tmp_path, study)
    assert main(["compare", str(path), "baseline:neural-style-2018"]) == 0
    out = capsys.readouterr().out
    assert "other work: iterations 2 → 1000, image_width 32 → 512: no ratio" in out
    full = load_study(shipped()["neural-style"])
    c = compare(
        [("study", load_report(_study_report(tmp_path, full))), ("published", baselines.load("neural-style-2018"))]
    )
    (gpu,) = [r for r in c.rows if r.key[2] == "gpu"]
    assert gpu.status == "ok" and gpu.ratios[1] == pytest.approx(16.667 / 170.0)
