"""The study report's image grid answers the study's question: per varied parameter the content and style
references, then the images in value order with their final loss, the lowest marked; embedded, so the page stands
alone; loss curves per parameter with a legend of its values."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import pytest

from gpulab.studies import page as study_page
from gpulab.studies import report
from gpulab.studies.report import Run, StudyPage, summarise
from gpulab.studies.spec import Study, Vary

pytest.importorskip("matplotlib")
VALUES = {"learning_rate": [30.0, 1.0, 3.0], "style_weight": [10.0, 1000.0, 100.0, 1.0]}


def _run(tmp_path: Path, name: str, value: float, loss: float | None, status: str = "ok") -> Run:
    from PIL import Image

    pid = f"{name}-{value:g}"
    out = f"{pid}/out.png"
    (tmp_path / pid).mkdir()
    Image.new("RGB", (64, 66), (int(value) % 255, 90, 160)).save(tmp_path / out)
    curve = [[0, 1e6], [10, (loss or 1.0) * 3], [20, loss or 1.0]]
    return Run(pid, {"learning_rate": 10.0, "style_weight": 500.0, name: value}, status, None if status == "ok" else
               "boom", 1.0, 0.5, 0.5, loss, curve, out, "cpu", "cpu0", 0.0, name)  # fmt: skip


def page(tmp_path: Path) -> StudyPage:
    runs = []
    for name, values in VALUES.items():
        for k, value in enumerate(values):
            runs.append(_run(tmp_path, name, value, 100.0 * (k + 1) if value != 1.0 else 50.0))
    runs.append(_run(tmp_path, "style_weight", 5.0, None, status="failed"))
    study = Study(
        "look", "style_transfer", fixed={"width": 64}, vary=Vary("star", {k: list(v) for k, v in VALUES.items()})
    )
    return StudyPage(study, runs, summarise(runs, []), None, list(VALUES), study_dir=tmp_path)


def test_each_parameter_row_is_in_value_order_with_losses_and_the_lowest_marked(tmp_path):
    html = study_page.to_html(page(tmp_path))
    sections = re.split(r"<h3>", html.split("Images per parameter", 1)[1])[1:]
    assert [s.split("</h3>", 1)[0] for s in sections] == ["learning_rate", "style_weight"]
    for section, name in zip(sections, VALUES, strict=True):
        shown = re.findall(r'<figure><(?:img|div)[^>]*>.*?<span class="value">([^<]+)</span>', section)
        expected = sorted(VALUES[name] + ([5.0] if name == "style_weight" else []))
        assert [float(v) for v in shown] == expected  # value order, not run order
        assert section.count("★ lowest loss") == 1 and section.count("<img class=best") == 1
        best = section.split("<img class=best", 1)[1].split("</figure>", 1)[0]
        assert 'class="value">1</span><br>loss 50' in best  # value 1 had the lowest loss, 50
        assert section.count('<figure class="ref">') == 2  # content and style beside every row
        assert "content" in section and "style" in section
    assert "failed" in sections[1] and 'class="missing"' not in sections[0]
    assert "weighs the loss itself" in sections[1] and "weighs the loss itself" not in sections[0]


def test_the_page_stands_alone(tmp_path):
    html = study_page.to_html(page(tmp_path))
    assert not re.search(r'href="(?!#)', html) and not re.search(
        r'src="(?!data:)', html
    )  # nothing linked out, all embedded
    images = re.findall(r'src="data:image/jpeg;base64,([^"]+)"', html)
    assert len(images) == 7 + 1 + 2 * 2  # 3 + 5 runs' images (the failed one made one too), refs twice
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(images[0]))) as img:
        assert img.width <= report.THUMB_WIDTH


def test_an_output_outside_the_study_is_not_embedded(tmp_path):
    p = page(tmp_path)
    outside = tmp_path.parent / "outside.png"
    from PIL import Image

    Image.new("RGB", (8, 8)).save(outside)
    p.runs[0].output = "../outside.png"
    html = study_page.to_html(p)
    assert html.count('class="missing"') == 1


def test_loss_curves_one_plot_per_parameter_with_a_legend(tmp_path, monkeypatch):
    labels: list[list[str]] = []
    real = report.plot_param_curves

    def spy(runs, name):
        png = real(runs, name)
        labels.append([name])
        return png

    monkeypatch.setattr(report, "plot_param_curves", spy)
    html = study_page.to_html(page(tmp_path))
    assert labels == [["learning_rate"], ["style_weight"]]
    assert (
        'aria-label="loss curves varying learning_rate"' in html
        and 'aria-label="loss curves varying style_weight"' in html
    )


def test_the_legend_names_every_value(tmp_path):
    import matplotlib.figure

    seen: list[list[str]] = []
    original = matplotlib.figure.Figure.savefig

    def capture(fig, *args, **kwargs):
        for ax in fig.axes:
            if ax.get_legend():
                seen.append([t.get_text() for t in ax.get_legend().get_texts()])
        return original(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(matplotlib.figure.Figure, "savefig", capture)
        runs = [r for r in page(tmp_path).runs if r.vary == "style_weight"]
        assert report.plot_param_curves(runs, "style_weight")
    assert seen == [[f"style_weight={v:.3g}" for v in sorted(VALUES["style_weight"])]]


def test_the_study_report_names_its_stand_ins_at_the_top(tmp_path):
    p = page(tmp_path)
    for r in p.runs:
        r.stand_ins = ["random VGG19 weights"]
    p.stand_ins_line = report.stand_ins_line(p.runs, "style_transfer")
    assert p.stand_ins_line is not None
    assert p.stand_ins_line.startswith("Stand-ins: random VGG19 weights (style_transfer; 8 runs).")
    html, md = study_page.to_html(p), report.to_markdown(p)
    assert html.index("Stand-ins: random VGG19 weights") < html.index("Loss curves")
    assert md.index("Stand-ins: random VGG19 weights") < md.index("## Workers")
    p.runs[0].stand_ins = []
    assert "(style_transfer; 7 runs)" in (report.stand_ins_line(p.runs, "style_transfer") or "")


def test_rows_written_before_stand_ins_were_recorded_are_read_from_their_weights(tmp_path):
    study = Study("old", "style_transfer")
    assert report._stand_ins({"weights": "random", "data_used": None}, study) == ["random VGG19 weights"]
    assert report._stand_ins({"weights": "/w.pth sha256:1", "data_used": None}, study) == []
    assert report._stand_ins({"stand_ins": ["x"]}, study) == ["x"]
    assert report._stand_ins({}, study) == []
