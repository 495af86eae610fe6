"""A study's HTML page from the Jinja2 template `study.html.j2` (autoescaped, the reports' one stylesheet).

Front: what ran and how it went, the comparison with the published baseline, the GPUs over the study (one timeline
per GPU, as on the validation page), final loss against each varied parameter, the loss curves; then the image grids
(a long row subsampled: the lowest loss, both ends, every k-th, with a note when every output looks alike) and the
runs table (sortable; a worker's first, cold run marked). Images are embedded, so the page stands alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpulab.report.io import atomic_write_text
from gpulab.report.plots import new_figure
from gpulab.report.templating import Markup, render, svg_figure
from gpulab.report.timeline import Stretch, plot_gpu_timeline
from gpulab.report.views import fmt_num
from gpulab.studies import report
from gpulab.studies.report import LOSS_WEIGHTS, Run, StudyPage

GRID_MAX = 12  # images shown per parameter row; more are subsampled
ALIKE = 3.0  # mean absolute difference (0-255) under which two outputs look the same


def _number(value: Any) -> float | None:
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else None
    )


def plot_final_loss(page: StudyPage) -> Markup | None:
    """Final loss against each varied numeric parameter, one panel each (a star study: the runs varying it)."""
    panels = []
    for name in page.columns:
        runs = [r for r in page.runs if r.status == "ok" and r.final_loss is not None]
        if page.study.vary.mode == "star":
            runs = [r for r in runs if r.vary == name]
        points = [
            (x, r.final_loss)
            for r in runs
            if (x := _number(r.values.get(name))) is not None and r.final_loss is not None
        ]
        if len(points) >= 2:
            panels.append((name, points))
    if not panels:
        return None
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = new_figure(11, 2.6 * rows)
    for k, (name, points) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, k + 1)
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        ax.plot(xs, ys, "o", ms=3, color="#4c78a8", alpha=0.7)
        if min(xs) > 0 and max(xs) / min(xs) > 100:
            ax.set_xscale("log")
        if min(ys) > 0 and max(ys) / min(ys) > 100:
            ax.set_yscale("log")
        ax.set_title(name + (" (weighs the loss itself)" if name in LOSS_WEIGHTS else ""), fontsize=9)
        ax.set_ylabel("final loss", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    return svg_figure(fig)


def gpu_timelines(page: StudyPage) -> list[tuple[int, Markup]]:
    parts = []
    for samples in page.gpu_timeline:
        by_gpu: dict[int, list[dict[str, Any]]] = {}
        for s in samples:
            if isinstance(s, dict) and isinstance(s.get("t"), (int, float)) and isinstance(s.get("index"), int):
                by_gpu.setdefault(s["index"], []).append(s)
        if by_gpu:
            parts.append(
                Stretch(["study session"], None, 0.0, {i: sorted(v, key=lambda s: s["t"]) for i, v in by_gpu.items()})
            )
    gpus = sorted({i for p in parts for i in p.samples})
    xlabel = "sampled seconds of the study (sessions joined)"
    return [(i, svg) for i in gpus if (svg := plot_gpu_timeline(parts, i, xlabel)) is not None]


def subsample(members: Sequence[Run], best: Run | None, limit: int = GRID_MAX) -> tuple[list[Run], str]:
    """At most `limit` of a row's runs, in value order: the lowest loss, both ends, then evenly spaced ones; and a
    note saying so."""
    n = len(members)
    if n <= limit:
        return list(members), ""
    keep = {0, n - 1} | ({members.index(best)} if best is not None else set())
    for j in range(limit):
        if len(keep) >= limit:
            break
        keep.add(round(j * (n - 1) / (limit - 1)))
    note = f"showing {len(keep)} of {n}: the lowest loss, both ends and evenly spaced values between"
    return [members[i] for i in sorted(keep)], note


def _look(path: str | None, study_dir: Path | None) -> Any:
    """A run's output as a 16x16 grey array (for telling alike outputs apart), or None."""
    if not path or study_dir is None:
        return None
    import numpy as np
    from PIL import Image

    root = study_dir.resolve()
    target = (root / path).resolve()
    if root not in target.parents:
        return None
    try:
        with Image.open(target) as img:
            return np.asarray(img.convert("L").resize((16, 16)), dtype=float)
    except (OSError, ValueError):
        return None


def all_alike(members: Sequence[Run], study_dir: Path | None) -> bool:
    looks = [a for a in (_look(r.output, study_dir) for r in members) if a is not None]
    return len(looks) >= 3 and all(float(abs(a - looks[0]).mean()) < ALIKE for a in looks[1:])


def _tile(r: Run, name: str, best: Run | None, study_dir: Path | None) -> dict[str, Any]:
    value = report._short(r.values.get(name)) if name in r.values else report._caption(r, None)
    return {
        "value": value,
        "status": r.status,
        "loss": f"{r.final_loss:.3g}" if r.status == "ok" and r.final_loss is not None else None,
        "best": r is best,
        "alt": report._caption(r, name if name in r.values else None),
        "src": report._thumbnail(r.output, study_dir),
    }


def grids(page: StudyPage) -> list[dict[str, Any]]:
    out = []
    for name, members in report.image_grids(page.runs, page.study):
        best = report._best(members)
        shown, sampled = subsample(members, best)
        note = f"{len(members)} run(s) in value order"
        if best is not None:
            where = report._caption(best, name if name in best.values else None)
            note += f"; lowest final loss {best.final_loss:.3g} at {where}"
        if name in LOSS_WEIGHTS:
            note += f" ({name} weighs the loss itself: losses under different values do not compare; judge the images)"
        alike = all_alike(members, page.study_dir)
        out.append(
            {"name": name, "note": note, "sampled": sampled, "alike": alike,
             "tiles": [_tile(r, name, best, page.study_dir) for r in shown]}
        )  # fmt: skip
    return out


def _refs(page: StudyPage) -> list[dict[str, Any]]:
    return [
        {"label": label, "source": source, "src": report._thumbnail(array) if array is not None else None}
        for label, source, array in report.references(page.study)
    ]


def cold_runs(runs: Sequence[Run]) -> set[int]:
    """The first run of each worker (it paid the worker's start-up): ids of the Run objects."""
    first: dict[str, Run] = {}
    for r in sorted((r for r in runs if r.started is not None), key=lambda r: r.started or 0.0):
        first.setdefault(r.worker or r.device or "?", r)
    return {id(r) for r in first.values()}


def _loss_plots(page: StudyPage) -> list[tuple[str, Markup]]:
    s = page.study
    if s.vary.mode == "star" and s.vary.params:
        plots = [(n, report.plot_param_curves([r for r in page.runs if r.vary == n], n)) for n in s.vary.params]
        return [(f"loss curves varying {n}", svg) for n, svg in plots if svg]
    curves = report.plot_curves(page.runs, columns=page.columns)
    return [("loss curves", curves)] if curves else []


def context(page: StudyPage) -> dict[str, Any]:
    s = page.study
    cold = cold_runs(page.runs)
    rows = report._runs_rows(page.runs, page.columns)
    return {
        "title": f"Study {s.name}" + (f" ({s.variant})" if s.variant else ""),
        "subtitle": s.title,
        "lines": [
            x
            for x in (
                page.counts_line,
                report.headline(page.summary, s.whole_machine),
                page.baseline_line,
                page.work_line,
            )
            if x
        ],
        "stand_ins": page.stand_ins_line,
        "workers": [(w, n, fmt_num(b, "s"), f"{100 * u:.0f} %") for w, n, b, u in page.summary.per_worker],
        "gpu_use": page.gpu_use,
        "gpu_use_headers": report.GPU_USE_HEADERS,
        "timelines": gpu_timelines(page),
        "final_loss": plot_final_loss(page),
        "loss_plots": _loss_plots(page),
        "refs": _refs(page),
        "grids": grids(page),
        "run_headers": report._RUN_HEADERS(page.columns),
        "runs": [(row, id(r) in cold) for row, r in zip(rows, page.runs, strict=True)],
        "status_col": len(page.columns) + 1,
        "num_cols": (len(page.columns) + 2, len(page.columns) + 3, len(page.columns) + 4, len(page.columns) + 5),
        "cold": len(cold),
    }


def to_html(page: StudyPage) -> str:
    """The page, self-contained: plots and images embedded."""
    return render("study.html.j2", **context(page))


def write_report(study_dir: Path, *, html: Path | None = None, md: Path | None = None) -> tuple[Path, Path]:
    """Write the study's report (default STUDY_DIR/report.html and report.md) atomically; returns both paths."""
    study_dir = Path(study_dir)
    page = report.build(study_dir)
    html_path = Path(html) if html else study_dir / "report.html"
    md_path = Path(md) if md else study_dir / "report.md"
    atomic_write_text(html_path, to_html(page))
    atomic_write_text(md_path, report.to_markdown(page))
    return html_path, md_path


__all__ = ["to_html", "write_report"]
