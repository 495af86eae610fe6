"""A report as one self-contained HTML page, from the Jinja2 template `report.html.j2` (autoescaped).

What matters first: the GPU and host verdicts, the failures and marginal checks, the key figures (measured, interval,
bound, verdict on one line), one telemetry timeline per GPU with the timed windows shaded, the headline speedups and
scaling; the details below, passing checks folded. Plots are inline SVG; the page loads nothing from outside.
"""

from __future__ import annotations

from typing import Any

from gpulab.names import Launcher
from gpulab.records import Check, Report
from gpulab.report import keyfigs
from gpulab.report.plots import plot_cpu_threads, plot_pct_of_spec, plot_scaling, plot_speedups, result_label
from gpulab.report.svg import gpu_facts, load_chart
from gpulab.report.templating import render
from gpulab.report.timeline import gpu_timelines, stretches, too_short, window_name
from gpulab.report.views import (
    DASH,
    GPU_HEADERS,
    MAX_SCALING_PLOTS,
    RESULT_HEADERS,
    SCALING_HEADERS,
    SPEEDUP_HEADERS,
    THRESHOLD_HEADERS,
    cell_text,
    failed_checks,
    failure_facts,
    fmt_num,
    gpu_rows,
    has_baselines,
    headline_scaling,
    headline_speedups,
    host_verdict,
    host_verdict_text,
    key_figure_groups,
    key_figure_headers,
    key_figure_row,
    marginal_checks,
    overview_rows,
    page_title,
    result_row,
    run_text,
    scaling_groups,
    scaling_row,
    software_rows,
    speedup_row,
    stand_ins_text,
    status_counts,
    threshold_rows,
    topology_table,
    verdict,
    verdict_text,
)

__all__ = ["context", "to_html"]


def _verdict(report: Report) -> dict[str, Any]:
    word, _, detail = verdict_text(report).partition(": ")
    host = host_verdict(report)
    return {
        "cls": verdict(report),
        "word": word,
        "detail": detail,
        "host_cls": host.replace(" ", "-"),
        "host_detail": host_verdict_text(report).removeprefix("host: "),
        "run": run_text(report),
        "stand_ins": stand_ins_text(report),
        "interrupted": report.interrupted,
    }


def _failure(report: Report, c: Check) -> dict[str, Any]:
    return {"status": c.status, "name": c.name, "message": c.message, "facts": failure_facts(report, c)}


def _key_figures(report: Report) -> dict[str, Any] | None:
    """Each key figure on one line: what, measured, % of its reference, interval, bound, verdict; then the
    references (datasheet, known-good) and the bar."""
    groups = key_figure_groups(report.results)
    if not groups:
        return None
    base = has_baselines(report.results)
    rows = []
    for g in groups:
        cells = key_figure_row(g, base)
        j = keyfigs.key_figure_judgement(report, g)
        rows.append(
            {
                "lead": (f"{cells[0]} · {cells[1]}", cells[2], cells[4]),
                "refs": (cells[3], *cells[5:]),
                "j": j,
            }
        )
    headers = key_figure_headers(base)
    return {"lead": (headers[0], headers[2], headers[4]), "refs": (headers[3], *headers[5:]), "rows": rows}


def _headlines(report: Report) -> dict[str, Any]:
    scaling = [(scaling_row(s), keyfigs.scaling_judgement(report, s)) for s in headline_scaling(report)]
    return {"speedups": [speedup_row(s) for s in headline_speedups(report)], "scaling": scaling}


def _windows(report: Report) -> list[dict[str, Any]]:
    """The timed windows in the timeline's numbering, with each GPU's figures in them (or "too short to sample")."""
    out = []
    for n, part in enumerate(stretches(report), start=1):
        out.append({"n": n, "name": window_name(part), "window": part.window, "interval": part.interval_s})
    return out


def _n0(value: Any) -> str:
    return DASH if not isinstance(value, (int, float)) else f"{value:.0f}"


def _window_rows(report: Report) -> list[tuple[str, ...]]:
    rows = []
    for r in report.results:
        if r.telemetry is None:
            continue
        for st in r.telemetry.per_gpu:
            span: Any = st.window_s or (None, None)
            length = DASH if None in span else f"{span[1] - span[0]:.2f} s"
            if too_short(st, r.telemetry.interval_s):
                figures: tuple[str, ...] = ("too short to sample",) + ("",) * 5
            else:
                figures = (
                    f"{_n0(st.util_mean)} / {_n0(st.util_max)} %",
                    DASH if st.mem_max_mib is None else f"{st.mem_max_mib / 1024:.1f} GiB",
                    f"{fmt_num(st.power_mean_w)} / {fmt_num(st.power_max_w)} W",
                    f"{fmt_num(st.sm_mhz_min)} – {fmt_num(st.sm_mhz_max)} MHz",
                    f"{_n0(st.temp_max_c)} °C",
                    ", ".join(sorted(st.throttle_counts)) or "none",
                )
            rows.append((result_label(r), cell_text(st.index), length, str(st.samples), *figures))
    return rows


WINDOW_HEADERS = (
    "Row",
    "GPU",
    "Window",
    "Samples",
    "Util mean / max",
    "Memory max",
    "Power mean / max",
    "SM clock",
    "Temp max",
    "Throttle reasons",
)


def _checks(report: Report) -> dict[str, Any]:
    def row(c: Check) -> tuple[str, ...]:
        return (c.status, c.name, c.message, cell_text(c.threshold), DASH if c.seconds is None else f"{c.seconds:.1f}")

    return {
        "counts": status_counts(report.checks),
        "open": [row(c) for c in report.checks if c.status in ("fail", "error", "marginal")],
        "passing": [row(c) for c in report.checks if c.status == "pass"],
        "skipped": [row(c) for c in report.checks if c.status == "skip"],
        "headers": ("Status", "Check", "Message", "Threshold", "Seconds"),
    }


def _plots(report: Report) -> dict[str, Any]:
    groups = scaling_groups(report)
    devices = [(key, pts) for key, pts in groups.items() if key[2] != Launcher.CPU][:MAX_SCALING_PLOTS]
    gpus = gpu_facts(report.fingerprint)
    return {
        "pct": plot_pct_of_spec(report),
        "speedups": plot_speedups(report) if report.speedups else None,
        "scaling": [("scaling " + " ".join(key), plot_scaling(pts)) for key, pts in devices],
        "cpu": plot_cpu_threads(groups),
        "load": [(result_label(r), svg) for r in report.results if (svg := load_chart(r, gpus))],
    }


def context(report: Report) -> dict[str, Any]:
    """Everything `report.html.j2` shows, as plain values (text is escaped by the template)."""
    fp = report.fingerprint
    return {
        "title": page_title(report),
        "v": _verdict(report),
        "has_checks": bool(report.checks),
        "failures": [_failure(report, c) for c in marginal_checks(report) + failed_checks(report)],
        "key": _key_figures(report),
        "timelines": gpu_timelines(report),
        "windows": _windows(report),
        "headlines": _headlines(report),
        "overview": overview_rows(report),
        "gpus": gpu_rows(fp),
        "gpu_absent": fp.get("gpu_absent_reason"),
        "topology": topology_table(fp),
        "software": software_rows(fp),
        "env": sorted(((fp.get("software") or {}).get("env") or {}).items()),
        "checks": _checks(report),
        "results": [result_row(r) for r in report.results],
        "speedups": [speedup_row(s) for s in report.speedups],
        "scaling": [scaling_row(s) for s in report.scaling],
        "window_rows": _window_rows(report),
        "thresholds": threshold_rows(report) if report.thresholds else [],
        "plots": _plots(report),
        "H": {
            "gpu": GPU_HEADERS,
            "result": RESULT_HEADERS,
            "scaling": SCALING_HEADERS,
            "speedup": SPEEDUP_HEADERS,
            "threshold": THRESHOLD_HEADERS,
            "window": WINDOW_HEADERS,
        },
    }


def to_html(report: Report) -> str:
    """One self-contained HTML page (inline CSS and SVG, no external resource): the front page first, the details
    below."""
    return render("report.html.j2", **context(report))
