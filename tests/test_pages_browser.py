"""The pages in a real browser: headless Chromium lays out a real device report and a compare of three real runs.

What a reader sees first is asserted where it lands: the verdict within the first screen (1280 x 900), the front
sections in their order, the GPU timeline before the details, nothing fetched from outside (the network is shut),
no page wider than the screen. Screenshots of the first screen are taken as a reader's browser would show it.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from browser import SCREEN, layout, printed_pages, screenshot
from gpulab.report.compare import compare
from gpulab.report.io import load_report
from gpulab.report.render import to_html

pytestmark = pytest.mark.slow  # each page is two or three Chromium starts: ~10-20 s here

REPORTS = Path(__file__).parent / "fixtures" / "reports"
REPEATS = [REPORTS / f"h200x2-repeat-{i}.json" for i in (1, 2, 3)]


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def _first_screen(probe: dict, page: Path, tmp_path: Path) -> None:
    verdict = probe["verdict"]
    assert verdict is not None and verdict["top"] >= 0 and verdict["bottom"] <= SCREEN[1]
    assert probe["fetched"] == [] and probe["external"] == []  # one self-contained file
    assert probe["width"] <= SCREEN[0]  # nothing wider than the screen
    shot = screenshot(page, tmp_path / f"{page.stem}.png")
    assert _png_size(shot) == SCREEN


def test_the_validation_page_of_a_real_run_shows_its_verdict_first(tmp_path):
    report = load_report(REPEATS[0])
    page = tmp_path / "report.html"
    page.write_text(to_html(report))
    probe = layout(page, tmp_path)
    _first_screen(probe, page, tmp_path)
    headings = [h for h, _ in probe["headings"]]
    front = ["Verdict", "Failures", "Key figures", "GPU timeline", "Speedups and scaling", "Details"]
    assert [headings.index(h) for h in front] == sorted(headings.index(h) for h in front)
    timelines = [box for label, box in probe["figures"] if label and label.endswith(" timeline")]
    assert len(timelines) == len(report.fingerprint["gpus"]) == 2  # one per GPU, for the whole run
    details = dict(probe["headings"])["Details"]
    assert all(box["bottom"] < details for box in timelines)  # above the details
    assert printed_pages(page, tmp_path) <= 15  # passing checks stay folded in print (the page before printed 35)


def test_the_compare_page_of_three_runs_shows_its_verdict_first(tmp_path):
    from gpulab.report.compare.page import to_html as compare_html

    page = tmp_path / "compare.html"
    page.write_text(compare_html(compare([(p.name, load_report(p)) for p in REPEATS])))
    probe = layout(page, tmp_path)
    _first_screen(probe, page, tmp_path)
    labels = [label for label, _ in probe["figures"]]
    assert "ratio to the baseline per row" in labels and "trend over the reports" in labels


def _study_page(tmp_path: Path):
    """A star study over two parameters with real images (30 values of one: its row is subsampled) and the GPU
    samples of a real run (the 2-GPU sweep of h200x2-repeat-1) as its session's telemetry."""
    from PIL import Image

    from gpulab.studies.report import Run, StudyPage, summarise
    from gpulab.studies.spec import Study, Vary

    values = {"learning_rate": [float(v) for v in range(1, 31)], "style_weight": [1.0, 10.0, 100.0]}
    runs = []
    for name, vs in values.items():
        for k, value in enumerate(vs):
            pid = f"{name}-{value:g}"
            (tmp_path / pid).mkdir()
            Image.new("RGB", (64, 64), (8 * k % 255, 90, 160)).save(tmp_path / pid / "out.png")
            loss = 50.0 + abs(value - 7.0)
            worker = f"cpu{k % 2}"
            curve = [[0, 1e3], [10, loss * 2], [20, loss]]
            runs.append(Run(pid, {name: value}, "ok", None, 1.0 + (k < 2), 0.5, 0.5 + (k < 2), loss, curve,
                            f"{pid}/out.png", "cpu", worker, 100.0 + k, name))  # fmt: skip
    study = Study(
        "look", "style_transfer", fixed={"width": 64}, vary=Vary("star", {k: list(v) for k, v in values.items()})
    )
    sweep = next(r for r in load_report(REPEATS[0]).results if r.launcher == "sweep" and r.n == 2)
    assert sweep.telemetry is not None
    return StudyPage(study, runs, summarise(runs, []), None, list(values), study_dir=tmp_path,
                     gpu_timeline=[sweep.telemetry.timeline])  # fmt: skip


def test_the_study_page_subsamples_long_rows_and_sorts_its_runs(tmp_path):
    from gpulab.studies.page import to_html as study_html

    page = tmp_path / "study.html"
    page.write_text(study_html(_study_page(tmp_path)))
    probe = layout(page, tmp_path)
    assert probe["fetched"] == [] and probe["external"] == [] and probe["width"] <= SCREEN[0]
    headings = [h for h, _ in probe["headings"]]
    assert headings[:2] == ["Workers", "GPU timeline"] and headings[-1] == "Runs"
    assert dict(probe["headings"])["GPU timeline"] < SCREEN[1]  # the GPUs over the study on the first screen
    labels = [label for label, _ in probe["figures"]]
    assert labels.count("GPU 0 timeline") == labels.count("GPU 1 timeline") == 1
    assert "final loss against each varied parameter" in labels
    rows = page.read_text().split("<h3>")[1:]
    shown = [row.count("<figure>") for row in rows]  # the runs' tiles (the references are figure class="ref")
    assert (
        shown == [12, 3] and "showing 12 of 30: the lowest loss, both ends and evenly spaced" in rows[0]
    )  # 30 learning rates subsampled, 3 style weights all
    losses = [float(v) for v in probe["sorted_by_final_loss"]]
    assert losses == sorted(losses) and len(losses) == 33  # one click: ascending
    assert _png_size(screenshot(page, tmp_path / "study.png")) == SCREEN
