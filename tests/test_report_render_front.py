"""The front page of the rendered report: verdict, failures with their fixes, key figures, GPU load charts."""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpulab.records import Check, Report, Result
from gpulab.report.io import load_report
from gpulab.report.render import to_html, to_markdown
from gpulab.report.svg import load_chart
from gpulab.report.views import verdict, verdict_text
from report_builders import minimal_fingerprint, sample_report

FIXTURE = Path(__file__).parent / "fixtures" / "reports" / "h200x4-standard.json"
SVG = re.compile(r"<svg\b.*?</svg>", re.S)


def _failing_report() -> Report:
    report = sample_report()
    report.checks.append(
        Check(
            name="probe.matmul_bf16[cuda:3]",
            status="fail",
            message="412 TFLOP/s = 42 % of spec; fix: check clocks <and> power capping",
            evidence={"value": 412.0, "pct_of_spec": 41.66, "clocks": {"sm": 1410}},
            threshold="matmul_bf16.min_pct_of_spec",
        )
    )
    report.checks.append(Check(name="health.nvlink[1]", status="error", message="NVML timed out; reboot the host"))
    return report


def _section(page: str, anchor: str) -> str:
    start = page.index(f'<section id="{anchor}">')
    return page[start : page.index("</section>", start)]


def test_html_front_page_comes_before_the_details():
    page = to_html(_failing_report())
    anchors = [
        "verdict",
        "failures",
        "key-figures",
        "timeline",
        "headlines",
        "details",
        "machine",
        "checks",
        "gpu-load",
    ]
    positions = [page.index(f'id="{a}"') for a in anchors]
    assert positions == sorted(positions)
    assert page.index('id="verdict"') < page.index("<table")  # nothing tabular before the verdict
    verdict_html = _section(page, "verdict")
    assert "v-fail" in verdict_html and "FAIL" in verdict_html
    assert "2 of 9 checks failed (6 pass · 1 fail · 1 skip · 1 error)" in verdict_html


def test_html_failures_show_message_threshold_and_evidence():
    failures = _section(to_html(_failing_report()), "failures")
    assert "probe.matmul_bf16[cuda:3]" in failures and "health.nvlink[1]" in failures
    assert "fix: check clocks &lt;and&gt; power capping" in failures
    assert "NVML timed out; reboot the host" in failures
    assert (
        "matmul_bf16.min_pct_of_spec = 60.00 % (NVIDIA H200 datasheet (989 TFLOP/s dense bf16)); basis: 0.6 x spec"
        in (failures)
    )
    assert "value=412.0, pct_of_spec=41.66, clocks={&#34;sm&#34;:1410}" in failures


def test_key_figures_summarise_devices_against_the_datasheet():
    report = sample_report()
    page, md = to_html(report), to_markdown(report)
    figures = _section(page, "key-figures")
    assert "matmul bf16 (torch gpu, n=1)" in figures and "4 devices" in figures
    assert "782.0 – 785.0 TFLOP/s" in figures and "989.0 TFLOP/s" in figures and "79.1 – 79.4 %" in figures
    assert "Known-good" not in figures  # no result carries one
    row = "| matmul bf16 (torch gpu, n=1) | 4 devices | 782.0 – 785.0 TFLOP/s | 989.0 TFLOP/s | 79.1 – 79.4 % |"
    assert row in md
    assert "| h2d_pinned none (torch gpu, n=1) | 4 devices | 53.10 GB/s | 64.00 GB/s | 83.0 % |" in md


def test_key_figures_show_a_baseline_when_results_carry_one():
    report = sample_report()
    for r in report.results:
        if r.workload == "matmul":
            r.params["known_good"] = {"value": 800.0, "pct": r.value / 800.0 * 100, "source": "a report"}
    md = to_markdown(report)
    assert "| Measurement | Devices | Measured | Datasheet | % of datasheet | Known-good | % of known-good |" in md
    assert "| 989.0 TFLOP/s | 79.1 – 79.4 % | 800.0 TFLOP/s | 97.8 – 98.1 % |" in md
    assert "| 64.00 GB/s | 83.0 % | — | — |" in md  # a row without a baseline keeps its columns
    assert "800.0 TFLOP/s" in _section(to_html(report), "key-figures")


def test_markdown_front_page_order_without_charts():
    md = to_markdown(_failing_report())
    order = ["## Verdict", "## Failures", "## Key figures", "## Speedups and scaling", "## Details", "### Checks"]
    assert [md.index(h) for h in order] == sorted(md.index(h) for h in order)
    assert "- **FAIL** `probe.matmul_bf16[cuda:3]`: 412 TFLOP/s = 42 % of spec; fix: check clocks" in md
    assert "  - Threshold: matmul_bf16.min_pct_of_spec = 60.00 %" in md
    assert "- **ERROR** `health.nvlink[1]`: NVML timed out; reboot the host" in md
    assert "| resnet50 | torch | fp32 | cpu:64 | gpu:1 | 32.60x |" in md.split("## Details")[0]
    assert "<svg" not in md and "<img" not in md


@pytest.mark.parametrize(
    ("checks", "interrupted", "word"),
    [
        ([Check("a", "pass", "ok"), Check("b", "skip", "n/a")], False, "pass"),
        ([Check("a", "pass", "ok")], True, "interrupted"),
        ([Check("a", "fail", "bad")], True, "fail"),
        ([Check("a", "error", "broke")], False, "fail"),
        ([], False, "empty"),
    ],
)
def test_verdict(checks, interrupted, word):
    report = Report(fingerprint=minimal_fingerprint().to_dict(), checks=checks, interrupted=interrupted)
    assert verdict(report) == word
    page = to_html(report)
    assert f'class="verdict v-{word}"' in page
    assert to_markdown(report).index(verdict_text(report)) < to_markdown(report).index("## Details")


def test_load_charts_are_svg_with_the_telemetry_values():
    report = load_report(FIXTURE)
    page = to_html(report)
    charts = [ET.fromstring(svg) for svg in SVG.findall(_section(page, "gpu-load"))]
    measured = [r for r in report.results if r.telemetry is not None and r.telemetry.per_gpu]
    assert len(charts) == len(measured) == 11
    keys = {
        "util": ("util_mean", "util_max"),
        "mem": ("mem_mean_mib", "mem_max_mib"),
        "power": ("power_mean_w", "power_max_w"),
    }
    for chart, result in zip(charts, measured, strict=True):
        assert result.telemetry is not None
        bars = {(g.get("data-metric"), g.get("data-gpu")): g for g in chart.iter("g")}
        assert len(bars) == 3 * len(result.telemetry.per_gpu)
        for stats in result.telemetry.per_gpu:
            for metric, (mean, peak) in keys.items():
                bar = bars[(metric, str(stats.index))]
                assert float(bar.get("data-mean", "nan")) == getattr(stats, mean)
                assert float(bar.get("data-max", "nan")) == getattr(stats, peak)
    ddp1 = ET.tostring(charts[0], encoding="unicode")
    assert "9.0 GiB max (6 % of 140 GiB)" in ddp1 and "490 W mean, 574 max (70 % of 700 W)" in ddp1


def test_load_chart_without_memory_samples_still_draws():
    report = sample_report()
    result = next(r for r in report.results if r.telemetry is not None and r.n == 4)
    chart = load_chart(result, {})
    assert chart is not None
    root = ET.fromstring(chart)
    texts = ["".join(t.itertext()) for t in root.iter("text")]
    assert "95 % mean, — % max" in texts and "—" in texts and "610 W mean, — max" in texts
    assert load_chart(Result("matmul", "torch", "gpu", 1, "bf16", 1.0, "TFLOP/s"), {}) is None


def test_every_svg_parses_and_the_page_has_no_external_reference():
    for report in (load_report(FIXTURE), _failing_report()):
        page = to_html(report)
        svgs = SVG.findall(page)
        assert svgs
        for svg in svgs:
            ET.fromstring(svg)
        assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
        assert "<script" not in page and "<link" not in page and "@import" not in page
        assert not re.search(r"url\((?!#)", page)  # only references inside the page (an SVG's clip paths)
        anchors = set(re.findall(r'href="#([\w-]+)"', page))
        assert anchors and all(f'id="{a}"' in page for a in anchors)  # the table of contents resolves


REPEAT = Path(__file__).parent / "fixtures" / "reports" / "h200x2-repeat-1.json"


def test_key_figures_carry_interval_bound_and_verdict_on_one_line():
    figures = _section(to_html(load_report(REPEAT)), "key-figures")
    row = next(r for r in figures.split("<tr>") if "matmul bf16 (torch gpu, n=1) · 2 devices" in r)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[:6] == [
        "matmul bf16 (torch gpu, n=1) · 2 devices",
        "658.6 – 670.7 TFLOP/s",
        "66.6 – 67.8 %",
        "66.4 – 68.3 %",  # the two devices' checks' intervals of the % of the datasheet
        "≥ 60 % of datasheet",
        "pass",
    ]
    known = next(r for r in figures.split("<tr>") if "resnet50 bf16 (torch gpu, n=1)" in r)
    assert "≥ 85 % of known-good" in known and ">pass<" in known
    host_bound = next(r for r in figures.split("<tr>") if "style_transfer tf32" in r)
    assert ">not judged<" in host_bound and "a host-bound row" in figures  # and why, below the table


def test_an_unbounded_launcher_says_it_is_for_comparison_only_where_it_appears():
    headlines = _section(to_html(load_report(REPEAT)), "headlines")
    row = next(r for r in headlines.split("<tr>") if "dataparallel" in r)
    assert "0.03x" in row and "for comparison only — not judged" in row
    ddp = next(r for r in headlines.split("<tr>") if ">ddp<" in r)
    assert ">pass<" in ddp


def test_a_window_shorter_than_the_sampling_interval_is_too_short_to_sample():
    report = load_report(REPEAT)
    result = next(r for r in report.results if r.telemetry is not None and r.telemetry.per_gpu)
    assert result.telemetry is not None
    result.telemetry.per_gpu[0] = dataclasses.replace(  # 40 ms at 100 ms sampling
        result.telemetry.per_gpu[0], window_s=[2.05, 2.09], samples=0, util_mean=None, util_max=None
    )
    chart = load_chart(result, {})
    assert chart is not None and "too short to sample" in chart and "0 % mean" not in chart
    page = to_html(report)
    assert "too short to sample" in _section(page, "gpu-load")


def test_the_timeline_shades_and_names_every_timed_window_once():
    page = to_html(load_report(REPEAT))
    timeline = _section(page, "timeline")
    assert len(re.findall(r'aria-label="GPU \d+ timeline"', timeline)) == 2
    names = re.findall(r"<li>(.*?)</li>", timeline)
    assert len(names) == 9  # the 1- and 2-GPU DDP rows shared one sampler: one window
    assert names[0].startswith("resnet50 ddp n=1 / n=2 — window 5.49 s")
    for svg in SVG.findall(timeline):
        root = ET.fromstring(svg)
        labels = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")] or [
            "".join(t.itertext()) for t in root.iter("text")
        ]
        assert any(label.startswith("1. resnet50 ddp") for label in labels)
        assert {"util %", "memory GiB", "power W", "SM MHz", "temp °C"} <= set(labels)
