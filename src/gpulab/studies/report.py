"""A study's report, from its directory (the psweep database and sessions.json): HTML beside Markdown.

Front: what ran and how it went (runs ok/failed, wall time, the share of it spent in the runs' own iterations,
the overhead per run), the comparison with the study's published baseline in one line, per-worker utilisation.
Then the loss curves, the per-parameter image grids (the original study's visual comparison: one row per varied
parameter, its values left to right), and the runs table. Images are linked from the run folders, not embedded:
a full study has hundreds.
"""

from __future__ import annotations

import math
import os
import posixpath
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.report.io import atomic_write_text
from gpulab.report.render import CSS, Markup, _e, _figure, _html_table, _img, _md_table, _png, fmt_num
from gpulab.studies import baselines
from gpulab.studies.psets import varied_columns
from gpulab.studies.runner import load_database, load_recorded, read_sessions
from gpulab.studies.spec import Study
from gpulab.studies.task import outcome
from gpulab.workloads.stand_ins import stand_ins
from gpulab.workloads.stand_ins import summary as stand_ins_summary

EXTRA_CSS = """
.grid{display:flex;flex-wrap:wrap;gap:.4rem;margin:.4rem 0 1rem}
.grid figure{margin:0;width:132px;font-size:.75rem;text-align:center}
.grid img{width:128px;height:auto;image-rendering:auto;border:1px solid #ddd}
.grid .failed{color:#c62828}
.headline{font-size:1.1rem;padding:.5rem 1rem;border-left:.4rem solid #4c78a8;background:#f4f6f8}
"""


@dataclass
class Run:
    pset_id: str
    values: dict[str, Any]
    status: str
    failure: str | None
    wall_s: float | None
    timed_s: float | None
    overhead_s: float | None
    final_loss: float | None
    curve: list[Any]
    output: str | None
    device: str | None
    worker: str | None
    started: float | None
    vary: str | None
    metric: str | None = None
    precision: str | None = None
    final_metric: float | None = None
    time_to_target_s: float | None = None
    epochs: list[dict[str, Any]] = field(default_factory=list)
    gpus_used: int | None = None  # the devices a whole-machine run took (`gpulab run`'s n); None: a worker's one
    stand_ins: list[str] = field(default_factory=list)  # random weights, stand-in data (gpulab.workloads.stand_ins)


@dataclass
class Summary:
    runs: int
    ok: int
    failed: int
    wall_s: float
    timed_s: float
    busy_s: float
    overhead_median_s: float | None
    overhead_first_s: float | None
    workers: list[str]
    per_worker: list[tuple[str, int, float, float]]  # worker, runs, busy s, share of the wall time

    @property
    def iteration_share(self) -> float | None:
        return self.timed_s / (self.wall_s * max(1, len(self.workers))) if self.wall_s > 0 else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _timestamp(value: Any) -> float | None:
    stamp = getattr(value, "timestamp", None)
    return float(stamp()) if callable(stamp) else None


def read_runs(df: Any, study: Study) -> list[Run]:
    columns = varied_columns(study)
    runs = []
    for _, raw in df.iterrows():
        row = outcome(raw)
        if row.get("study") != study.name:
            continue
        started = row.get("_time_utc")
        runs.append(
            Run(
                pset_id=str(row["_pset_id"]),
                values={c: row.get(c) for c in columns},
                status=str(row.get("status") or "failed"),
                failure=row.get("failure") if isinstance(row.get("failure"), str) else None,
                wall_s=_num(row.get("wall_s")),
                timed_s=_num(row.get("timed_s")),
                overhead_s=_num(row.get("overhead_s")),
                final_loss=_num(row.get("final_loss")),
                curve=_list(row.get("loss_curve")),
                output=row.get("output") if isinstance(row.get("output"), str) else None,
                device=row.get("device") if isinstance(row.get("device"), str) else None,
                worker=row.get("worker") if isinstance(row.get("worker"), str) else None,
                started=_timestamp(started),
                vary=row.get("_vary") if isinstance(row.get("_vary"), str) else None,
                metric=row.get("metric") if isinstance(row.get("metric"), str) else None,
                precision=row.get("precision_used") if isinstance(row.get("precision_used"), str) else None,
                final_metric=_num(row.get("final_metric")),
                time_to_target_s=_num(row.get("time_to_target_s")),
                epochs=[e for e in _list(row.get("epoch_records")) if isinstance(e, dict)],
                gpus_used=int(n) if (n := _num(row.get("gpus_used"))) is not None else None,
                stand_ins=_stand_ins(row, study),
            )
        )
    return runs


def _stand_ins(row: dict[str, Any], study: Study) -> list[str]:
    """The run's recorded stand-ins; for rows written before they were recorded, read from its weights and data."""
    recorded = row.get("stand_ins")
    if isinstance(recorded, (list, tuple)):
        return [str(s) for s in recorded]
    if not isinstance(row.get("weights"), str) and not isinstance(row.get("data_used"), str):
        return []
    facts = {"weights": row.get("weights"), "data": row.get("data_used"), "workload_params": row}
    return stand_ins(study.workload, facts)


def stand_ins_line(runs: Sequence[Run], workload: str) -> str | None:
    """ "Stand-ins: random VGG19 weights (style_transfer; 252 runs) …" when any run used one, else None."""
    text = stand_ins_summary((workload, r.stand_ins) for r in runs)
    if text is None:
        return None
    return (
        f"Stand-ins: {text}. Losses, metrics and images show these, not the published "
        "experiment's (vgg_weights=imagenet, pretrained=imagenet and --data mnist / cifar10 fetch the real ones)"
    )


def summarise(runs: Sequence[Run], sessions: Sequence[dict[str, Any]]) -> Summary:
    ok = [r for r in runs if r.status == "ok"]
    wall = sum(float(s.get("wall_s") or 0) for s in sessions)
    workers = sorted({w for s in sessions for w in s.get("workers") or []})
    overheads = [r.overhead_s for r in ok if r.overhead_s is not None]
    first: dict[str, Run] = {}
    for r in sorted(ok, key=lambda r: r.started or 0):
        first.setdefault(r.worker or r.device or "?", r)
    firsts = {id(r) for r in first.values()}
    warm = [r.overhead_s for r in ok if r.overhead_s is not None and id(r) not in firsts]
    busy: dict[str, list[float]] = {}
    for r in runs:
        busy.setdefault(r.worker or r.device or "?", []).append(r.wall_s or 0.0)
    per_worker = [(w, len(v), sum(v), sum(v) / wall if wall > 0 else 0.0) for w, v in sorted(busy.items())]
    return Summary(
        runs=len(runs),
        ok=len(ok),
        failed=len(runs) - len(ok),
        wall_s=wall,
        timed_s=sum(r.timed_s or 0.0 for r in ok),
        busy_s=sum(r.wall_s or 0.0 for r in runs),
        overhead_median_s=statistics.median(warm or overheads) if (warm or overheads) else None,
        overhead_first_s=max((first[k].overhead_s or 0.0) for k in first) if first else None,
        workers=workers or sorted(busy),
        per_worker=per_worker,
    )


LEGEND_MAX = 8  # more lines than this: colours alone, the runs table names them


def plot_curves(runs: Sequence[Run], limit: int = 60, columns: Sequence[str] = ()) -> str | None:
    """Loss against step (log scale), one line per run (the first `limit` successful ones), coloured by run; a
    legend by the varied values where there are few lines to tell apart, whole epochs on the axis of epoch runs."""
    drawn = [r for r in runs if r.status == "ok" and len(r.curve) >= 2][:limit]
    if not drawn:
        return None
    fig = _figure(9, 4)
    ax = fig.add_subplot(1, 1, 1)
    labelled = bool(columns) and len(drawn) <= LEGEND_MAX
    for r in drawn:
        points = [(p[0], p[1]) for p in r.curve if isinstance(p, (list, tuple)) and len(p) == 2 and _num(p[1])]
        if points:
            label = ", ".join(f"{c}={_short(r.values.get(c))}" for c in columns) if labelled else None
            ax.plot([p[0] for p in points], [p[1] for p in points], linewidth=0.8, alpha=0.7, label=label)
    epochs = all(r.epochs for r in drawn)
    ax.set_xlabel("epoch" if epochs else "step")
    if epochs:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("loss")
    if all((_num(p[1]) or 0) > 0 for r in drawn for p in r.curve if _num(p[1]) is not None):
        ax.set_yscale("log")
    if labelled:
        ax.legend(fontsize="small")
    ax.set_title(f"loss curves ({len(drawn)} runs)")
    return _png(fig)


def image_grids(runs: Sequence[Run], study: Study) -> list[tuple[str, list[Run]]]:
    """Per varied parameter (star) or per study (grid/zip): the runs that made an image, in value order."""
    with_images = [r for r in runs if r.output]
    if not with_images:
        return []
    if study.vary.mode != "star":
        return [("all runs", with_images)]
    groups: list[tuple[str, list[Run]]] = []
    for name in study.vary.params:
        members = [r for r in with_images if r.vary == name]
        members.sort(key=lambda r: _num(r.values.get(name)) or 0.0)
        if members:
            groups.append((name, members))
    return groups


def _caption(run: Run, name: str | None) -> str:
    if name and name in run.values:
        value = run.values[name]
        return f"{name}={_short(value)}"
    return ", ".join(f"{k}={_short(v)}" for k, v in run.values.items()) or run.pset_id[:8]


def _short(value: Any) -> str:
    number = _num(value)
    return f"{number:.3g}" if number is not None else str(value)


def _runs_rows(runs: Sequence[Run], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    rows = []
    for r in runs:
        metric = f"{r.metric} {r.final_metric:.3f}" if r.metric and r.final_metric is not None else ""
        rows.append(
            (
                r.pset_id[:8],
                *(_short(r.values.get(c)) for c in columns),
                r.status,
                fmt_num(r.wall_s, "s"),
                fmt_num(r.timed_s, "s"),
                fmt_num(r.overhead_s, "s"),
                f"{r.final_loss:.4g}" if r.final_loss is not None else "",
                metric,
                r.device or "",
                r.failure or "",
            )
        )
    return rows


def headline(summary: Summary, whole_machine: bool = False) -> str:
    share = summary.iteration_share
    where = "the machine, one run at a time" if whole_machine else f"{len(summary.workers)} worker(s)"
    text = f"{summary.ok} of {summary.runs} runs ok ({summary.failed} failed) in {fmt_num(summary.wall_s, 's')}"
    text += f" on {where}"
    if share is not None:
        whose = "the" if whole_machine else "the workers'"
        text += f"; the runs' own iterations filled {100 * share:.0f} % of {whose} time"
    if whole_machine and summary.overhead_median_s is not None:
        text += f"; overhead per run {summary.overhead_median_s:.1f} s (median: each run is a `gpulab run` process)"
        return text
    if summary.overhead_median_s is not None:
        text += f"; overhead per run {summary.overhead_median_s:.2f} s (median, warm worker)"
    if summary.overhead_first_s is not None:
        text += f", {summary.overhead_first_s:.1f} s for a worker's first run (start-up)"
    return text


GPU_USE_HEADERS = ("GPU", "utilisation (mean)", "memory (max)", "power (mean)", "samples")


@dataclass
class StudyPage:
    study: Study
    runs: list[Run]
    summary: Summary
    baseline_line: str | None
    columns: list[str]
    gpu_use: list[tuple[Any, ...]] = field(default_factory=list)
    stand_ins_line: str | None = None


def _gpu_use(sessions: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    rows = []
    for k, session in enumerate(sessions):
        for g in session.get("gpu_use") or []:
            label = f"GPU {g.get('index')}" + (f" (session {k + 1})" if len(sessions) > 1 else "")
            util = _num(g.get("util_mean"))
            rows.append(
                (
                    label,
                    f"{util:.0f} %" if util is not None else "",
                    fmt_num(_num(g.get("mem_max_mib")), "MiB"),
                    fmt_num(_num(g.get("power_mean_w")), "W"),
                    g.get("samples", ""),
                )
            )
    return rows


def build(study_dir: Path) -> StudyPage:
    study = load_recorded(study_dir)
    runs = read_runs(load_database(study_dir), study)
    sessions = read_sessions(study_dir)
    summary = summarise(runs, sessions)
    line = baselines.compare_line(study, runs) if study.baseline else None
    return StudyPage(
        study,
        runs,
        summary,
        line,
        varied_columns(study),
        _gpu_use(sessions),
        stand_ins_line=stand_ins_line(runs, study.workload),
    )


def to_markdown(page: StudyPage) -> str:
    s = page.study
    out = [f"# Study {s.name}" + (f" ({s.variant})" if s.variant else ""), ""]
    if s.title:
        out += [s.title, ""]
    out += [f"- {headline(page.summary, s.whole_machine)}"]
    if page.baseline_line:
        out += [f"- {page.baseline_line}"]
    if page.stand_ins_line:
        out += [f"- **{page.stand_ins_line}**"]
    out += ["", "## Workers", ""]
    out += _md_table(
        ("worker", "runs", "busy", "share of wall time"),
        [(w, n, fmt_num(b, "s"), f"{100 * u:.0f} %") for w, n, b, u in page.summary.per_worker],
    )
    if page.gpu_use:
        out += ["", "GPU use while the study ran (NVML):", "", *_md_table(GPU_USE_HEADERS, page.gpu_use)]
    out += ["", "## Runs", ""]
    out += _md_table(_RUN_HEADERS(page.columns), _runs_rows(page.runs, page.columns))
    return "\n".join(out).rstrip() + "\n"


def _RUN_HEADERS(columns: Sequence[str]) -> tuple[str, ...]:
    return ("run", *columns, "status", "wall", "iterations", "overhead", "final loss", "metric", "device", "failure")


def _grid_html(page: StudyPage, base: str) -> str:
    parts = []
    for name, members in image_grids(page.runs, page.study):
        figures = []
        for r in members:
            cls = ' class="failed"' if r.status != "ok" else ""
            src = _e(posixpath.join(base, r.output or "") if base != "." else r.output or "")
            figures.append(
                f'<figure><a href="{src}"><img loading="lazy" src="{src}" alt="{_e(_caption(r, name))}"></a>'
                f"<figcaption{cls}>{_e(_caption(r, name))}</figcaption></figure>"
            )
        parts.append(f"<h3>{_e(name)}</h3><div class='grid'>{''.join(figures)}</div>")
    return "".join(parts)


def to_html(page: StudyPage, base: str = ".") -> str:
    """The page; `base` is the study directory relative to where the page is written (images are linked)."""
    s = page.study
    title = f"Study {s.name}" + (f" ({s.variant})" if s.variant else "")
    body = [f"<h1>{_e(title)}</h1>"]
    if s.title:
        body.append(f"<p class='run'>{_e(s.title)}</p>")
    body.append(f"<p class='headline'>{_e(headline(page.summary, s.whole_machine))}</p>")
    if page.baseline_line:
        body.append(f"<p class='headline'>{_e(page.baseline_line)}</p>")
    if page.stand_ins_line:
        body.append(f"<p class='banner'>{_e(page.stand_ins_line)}</p>")
    body.append("<h2>Workers</h2>")
    body.append(
        _html_table(
            ("worker", "runs", "busy", "share of wall time"),
            [(w, n, fmt_num(b, "s"), f"{100 * u:.0f} %") for w, n, b, u in page.summary.per_worker],
            num_cols=(1, 2, 3),
        )
    )
    if page.gpu_use:
        body.append("<h3>GPU use while the study ran (NVML)</h3>")
        body.append(_html_table(GPU_USE_HEADERS, page.gpu_use, num_cols=(1, 2, 3, 4)))
    curves = plot_curves(page.runs, columns=page.columns)
    if curves:
        body.append("<h2>Loss curves</h2>" + _img(curves, "loss curves"))
    grids = _grid_html(page, base)
    if grids:
        body.append("<h2>Images per parameter</h2>" + grids)
    headers = _RUN_HEADERS(page.columns)
    body.append("<h2>Runs</h2>")
    body.append(
        _html_table(headers, _runs_rows(page.runs, page.columns), num_cols=(4, 5, 6), status_col=len(page.columns) + 1)
    )
    head = f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
    return head + f"<style>{CSS}{EXTRA_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"


def write_report(study_dir: Path, *, html: Path | None = None, md: Path | None = None) -> tuple[Path, Path]:
    """Write the study's report (default STUDY_DIR/report.html and report.md) atomically; returns both paths."""
    study_dir = Path(study_dir)
    page = build(study_dir)
    html_path = Path(html) if html else study_dir / "report.html"
    md_path = Path(md) if md else study_dir / "report.md"
    base = os.path.relpath(study_dir.resolve(), html_path.resolve().parent)
    atomic_write_text(html_path, to_html(page, base))
    atomic_write_text(md_path, to_markdown(page))
    return html_path, md_path


__all__ = ["Markup", "build", "to_html", "to_markdown", "write_report"]
