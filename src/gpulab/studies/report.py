"""A study's report, from its directory (the psweep database and sessions.json): HTML beside Markdown.

Front: what ran and how it went (runs ok/failed, wall time, the share of it spent in the runs' own iterations,
the overhead per run), the comparison with the study's published baseline in one line, per-worker utilisation.
Then the loss curves (one plot per varied parameter, a legend by its values), the per-parameter image grids (the
original study's visual comparison: one row per varied parameter, the content and style references first, then its
values left to right with the final loss under each and the lowest marked), and the runs table. Images are
embedded as small thumbnails, so the page stands alone when copied.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError, UnknownValue
from gpulab.names import Precision
from gpulab.report.formatting import stand_ins_summary
from gpulab.report.markdown import md_table, md_text
from gpulab.report.plots import new_figure
from gpulab.report.templating import Markup, svg_figure
from gpulab.report.views import fmt_num
from gpulab.studies import arithmetic, baselines, ledger
from gpulab.studies.psets import varied_columns
from gpulab.studies.runner import load_database, load_recorded, read_sessions
from gpulab.studies.spec import Study
from gpulab.studies.task import outcome, study_relative
from gpulab.workloads.stand_ins import stand_ins


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
    precision: Precision | None = None  # the one it trained in (a row's precision_used)
    final_metric: float | None = None
    time_to_target_s: float | None = None
    epochs: list[dict[str, Any]] = field(default_factory=list)
    gpus_used: int | None = None  # the devices a whole-machine run took (`gpulab run`'s n); None: a worker's one
    stand_ins: list[str] = field(default_factory=list)  # random weights, stand-in data (gpulab.workloads.stand_ins)
    flops_per_iteration: float | None = None  # torch's FLOP counter on the worker (gpulab.studies.arithmetic)
    steps_run: int | None = None
    batch_runs: int | None = None  # the runs of its batch (gpulab.studies.batching); None or 1: it ran alone
    gpu_name: str | None = None


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


def _precision_used(value: Any) -> Precision | None:
    """A row's precision_used, read once here (the study's database is an edge); None where it names none."""
    try:
        return Precision.parse(value)
    except UnknownValue:
        return None


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
                output=study_relative(row.get("output")),  # never a link out of the study (javascript:, ../)
                device=row.get("device") if isinstance(row.get("device"), str) else None,
                worker=row.get("worker") if isinstance(row.get("worker"), str) else None,
                started=_timestamp(started),
                vary=row.get("_vary") if isinstance(row.get("_vary"), str) else None,
                metric=row.get("metric") if isinstance(row.get("metric"), str) else None,
                precision=_precision_used(row.get("precision_used")),
                final_metric=_num(row.get("final_metric")),
                time_to_target_s=_num(row.get("time_to_target_s")),
                epochs=[e for e in _list(row.get("epoch_records")) if isinstance(e, dict)],
                gpus_used=int(n) if (n := _num(row.get("gpus_used"))) is not None else None,
                stand_ins=_stand_ins(row, study),
                flops_per_iteration=_num(row.get("flops_per_iteration")),
                steps_run=int(n) if (n := _num(row.get("steps_run"))) is not None else None,
                batch_runs=int(n) if (n := _num(row.get("batch_runs"))) is not None else None,
                gpu_name=row.get("gpu_name") if isinstance(row.get("gpu_name"), str) else None,
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


def plot_curves(runs: Sequence[Run], limit: int = 60, columns: Sequence[str] = ()) -> Markup | None:
    """Loss against step (log scale), one line per run (the first `limit` successful ones), coloured by run; a
    legend by the varied values where there are few lines to tell apart, whole epochs on the axis of epoch runs."""
    drawn = [r for r in runs if r.status == "ok" and len(r.curve) >= 2][:limit]
    if not drawn:
        return None
    fig = new_figure(9, 4)
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
    return svg_figure(fig)


LEGEND_VALUES = 12  # more values than this: a colour bar over the values instead of legend entries


def _points(run: Run) -> list[tuple[float, float]]:
    return [
        (float(p[0]), float(p[1]))
        for p in run.curve
        if isinstance(p, (list, tuple)) and len(p) == 2 and _num(p[0]) is not None and _num(p[1]) is not None
    ]


def plot_param_curves(runs: Sequence[Run], name: str) -> Markup | None:
    """The loss curves of the runs that vary `name` (a star study's row), coloured in value order, with a legend
    of the values (a colour bar where there are many)."""
    import matplotlib as mpl

    drawn = [r for r in runs if r.status == "ok" and len(_points(r)) >= 2]
    if not drawn:
        return None
    values = sorted({_short(r.values.get(name)) for r in drawn}, key=lambda v: (_as_number(v), v))
    cmap = mpl.colormaps["viridis"]
    colour = {v: cmap(i / max(1, len(values) - 1)) for i, v in enumerate(values)}
    fig = new_figure(9, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    labelled: set[str] = set()
    for r in sorted(drawn, key=lambda r: values.index(_short(r.values.get(name)))):
        value = _short(r.values.get(name))
        points = _points(r)
        label = f"{name}={value}" if value not in labelled and len(values) <= LEGEND_VALUES else None
        labelled.add(value)
        ax.plot([p[0] for p in points], [p[1] for p in points], color=colour[value], linewidth=1.0, label=label)
    epochs = all(r.epochs for r in drawn)
    ax.set_xlabel("epoch" if epochs else "step")
    ax.set_ylabel("loss")
    if all(p[1] > 0 for r in drawn for p in _points(r)):
        ax.set_yscale("log")
    if len(values) <= LEGEND_VALUES:
        ax.legend(fontsize="small", title=name, loc="center left", bbox_to_anchor=(1.01, 0.5))
    else:
        bar = fig.colorbar(mpl.cm.ScalarMappable(cmap=cmap, norm=mpl.colors.Normalize(0, len(values) - 1)), ax=ax)
        ticks = sorted({0, len(values) // 2, len(values) - 1})
        bar.set_ticks(ticks, labels=[values[t] for t in ticks])
        bar.set_label(name)
    ax.set_title(f"loss curves varying {name} ({len(drawn)} runs)")
    fig.tight_layout()
    return svg_figure(fig, tight=False)


def _as_number(text: str) -> float:
    number = _num(_to_float(text))
    return number if number is not None else math.inf


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


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
    counts_line: str | None = None  # planned, done, failed, missing, repeated (studies.ledger)
    stand_ins_line: str | None = None
    work_line: str | None = None  # the runs' work and rate against the GPU's datasheet (gpulab.studies.arithmetic)
    study_dir: Path | None = None  # where the runs' images are (embedded from there)
    # the GPUs' NVML samples while the study ran, per session: {t, index, util, mem_mib, power_w, sm_mhz, temp_c}
    gpu_timeline: list[list[dict[str, Any]]] = field(default_factory=list)


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
    df = load_database(study_dir)
    runs = read_runs(df, study)
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
        counts_line=ledger.summary_line(study, df),
        stand_ins_line=stand_ins_line(runs, study.workload),
        work_line=arithmetic.work_line(runs),
        study_dir=study_dir,
        gpu_timeline=[list(s.get("gpu_timeline") or []) for s in sessions if s.get("gpu_timeline")],
    )


def to_markdown(page: StudyPage) -> str:
    s = page.study  # every text from the study and its runs HTML-escaped, as the HTML page has it
    out = [md_text(f"# Study {s.name}" + (f" ({s.variant})" if s.variant else "")), ""]
    if s.title:
        out += [md_text(s.title), ""]
    out += [f"- {md_text(page.counts_line)}"] if page.counts_line else []
    out += [f"- {md_text(headline(page.summary, s.whole_machine))}"]
    if page.baseline_line:
        out += [f"- {md_text(page.baseline_line)}"]
    if page.work_line:
        out += [f"- {md_text(page.work_line)}"]
    if page.stand_ins_line:
        out += [f"- **{md_text(page.stand_ins_line)}**"]
    out += ["", "## Workers", ""]
    out += md_table(
        ("worker", "runs", "busy", "share of wall time"),
        [(w, n, fmt_num(b, "s"), f"{100 * u:.0f} %") for w, n, b, u in page.summary.per_worker],
    )
    if page.gpu_use:
        out += ["", "GPU use while the study ran (NVML):", "", *md_table(GPU_USE_HEADERS, page.gpu_use)]
    out += ["", "## Runs", ""]
    out += md_table(_RUN_HEADERS(page.columns), _runs_rows(page.runs, page.columns))
    return "\n".join(out).rstrip() + "\n"


def _RUN_HEADERS(columns: Sequence[str]) -> tuple[str, ...]:
    return ("run", *columns, "status", "wall", "iterations", "overhead", "final loss", "metric", "device", "failure")


# Parameters that weigh the loss's own terms: a lower loss under another value of these is not a better image.
LOSS_WEIGHTS = ("content_weight", "content_weight_blend", "style_weight", "tv_weight", "style_layer_weight_exp",
                "style_scales")  # fmt: skip
THUMB_WIDTH = 144  # pixels of an embedded image's width (the page shows them at this size)


def _thumbnail(array_or_path: Any, study_dir: Path | None = None) -> str | None:
    """A small JPEG of an image (an array, or a run's output inside the study directory) as base64; None when it
    cannot be read or the path leaves the study directory."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    from gpulab.paths import input_file

    try:
        if isinstance(array_or_path, str):
            if study_dir is None:
                return None
            root = study_dir.resolve()
            path = (root / array_or_path).resolve()
            if root not in path.parents:
                return None
            with Image.open(input_file(path, "image", limit=256 << 20)) as opened:
                img = opened.convert("RGB")
        else:
            img = Image.fromarray(np.asarray(array_or_path, dtype=np.uint8)).convert("RGB")
        img.thumbnail((THUMB_WIDTH, THUMB_WIDTH * 4))
        buffer = io.BytesIO()
        img.save(buffer, "JPEG", quality=88)
    except (GpulabError, OSError, ValueError, TypeError):
        return None
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def references(study: Study) -> list[tuple[str, str, Any]]:
    """(label, source, image array) of the inputs the study's runs share, as the workload's registry entry reads
    them from the study's fixed and varied parameters (style transfer's content and style); else empty."""
    from gpulab.workloads.registry import REGISTRY, load

    declared = REGISTRY.get(study.workload)
    if declared is None or declared.references is None:
        return []
    read = load(declared.references, f"the study references of {study.workload}")
    found: list[tuple[str, str, Any]] = read(study.fixed, set(study.vary.params))
    return found


def _best(members: Sequence[Run]) -> Run | None:
    done = [r for r in members if r.status == "ok" and r.final_loss is not None]
    return min(done, key=lambda r: r.final_loss or 0.0) if done else None


__all__ = ["build", "to_markdown"]
