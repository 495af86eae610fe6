"""A comparison as one self-contained HTML page, from the Jinja2 template `compare.html.j2` (autoescaped).

The verdict first, styled as on the validation page (the GPU verdict and the host's, the regressions under it), the
ratio of every row to the baseline with its interval as a chart, the trend over the reports when more than two are
compared, then the sections the text and Markdown views have (`compare_render.sections`).
"""

from __future__ import annotations

from typing import Any

from gpulab.report.compare.comparison import Comparison, short_labels
from gpulab.report.compare.plots import ratio_chart, trend_chart
from gpulab.report.compare.render import labels_of, sections
from gpulab.report.templating import render


def _verdict(c: Comparison) -> dict[str, Any]:
    text = c.verdict.removeprefix("verdict: ")
    if c.mode != "same":
        return {"cls": "inconclusive", "word": "NOT JUDGED", "detail": text, "host": None}
    gpu, _, host = text.partition(" · host: ")
    gpu = gpu.removeprefix("GPU: ")
    word = "REGRESSION" if c.regressions else "NO REGRESSION"
    host_word = host.split(" ", 1)[0].strip(" —:(") or "not-measured"
    return {
        "cls": "regression" if c.regressions else "pass",
        "word": word,
        "detail": gpu,
        "host": {"cls": host_word, "detail": host},
    }


def _numeric(cell: str) -> bool:
    return cell[:1].isdigit() or cell == "-" or (cell[:1] in "+-" and cell[1:2].isdigit())


def context(c: Comparison) -> dict[str, Any]:
    labels = labels_of(c)
    secs = [s for s in sections(c) if s.title != "verdict"]
    return {
        "title": f"gpulab comparison: {' vs '.join(short_labels(c.labels))}",
        "v": _verdict(c),
        "regressions": c.regressions,
        "contended": c.host_contended,
        "ratio": ratio_chart(c, labels),
        "trend": trend_chart(c, labels),
        "sections": [
            {
                "id": s.title.split()[0],
                "title": s.title,
                "headers": s.headers,
                "rows": [[(cell, _numeric(cell)) for cell in row] for row in s.rows],
                "regression": [bool(row) and row[-1] == "REGRESSION" for row in s.rows],
                "lines": s.lines,
                "plain": s.title == "mode",
            }
            for s in secs
        ],
    }


def to_html(c: Comparison) -> str:
    return render("compare.html.j2", **context(c))
