"""Markdown and HTML renderings of a report."""

from __future__ import annotations

import re

from gpulab.records import Check, Report
from gpulab.report.io import write_report
from gpulab.report.plots import plot_scaling, plot_speedups
from gpulab.report.render import to_html, to_markdown, write_rendered
from gpulab.report.timeline import gpu_timelines
from report_builders import minimal_fingerprint, sample_report


def _report_with_failure() -> Report:
    report = sample_report()
    report.checks.append(
        Check(
            name="health.pcie_link[0000:07:00.0]",
            status="fail",
            message="link runs gen4 x16, max gen5 x16: <script>alert(1)</script> reseat card | check BIOS",
        )
    )
    report.checks.append(Check(name="probe.copy", status="error", message="CUDA error: out of memory"))
    return report


def test_markdown_key_lines():
    md = to_markdown(_report_with_failure())
    assert md.startswith("# gpulab report — gpu-vm-01\n")
    assert "| Platform | VM (KVM) — evidence: lscpu, cpuinfo flag |" in md
    assert "| 0 | NVIDIA H200 | 0000:06:00.0 | 140 GiB | gen5 x16 | gen5 x16 | 0 | on | on | Pass-Through |" in md
    assert "| NVIDIA driver | 570.124.06 |" in md
    assert "| CUDA (driver supports) | 12.8 |" in md
    assert "| cuDNN | 9.8.0 |" in md and "| NCCL | 2.26.2 |" in md
    assert "| torch | 2.7.0+cu128 (CUDA 12.8, cuDNN 90800, NCCL 2.26.2, sees 4 GPU(s)) |" in md
    # the front page (verdict, failures, key figures) comes before the details; counts before the table
    assert "**FAIL: 2 of 9 checks failed (6 pass · 1 fail · 1 skip · 1 error)**" in md
    order = ["## Verdict", "**FAIL", "## Failures", "## Key figures", "## Details", "**6 pass", "| Status | Check |"]
    assert [md.index(h) for h in order] == sorted(md.index(h) for h in order)
    assert "- **FAIL** `health.pcie_link[0000:07:00.0]`: link runs gen4 x16" in md
    assert "- **ERROR** `probe.copy`: CUDA error: out of memory" in md
    assert "reseat card \\| check BIOS" in md  # a pipe cannot break the table
    assert "| matmul | torch | gpu | 1 | bf16 | cuda:0 | 785.0 TFLOP/s | 989.0 TFLOP/s | 79.4 % |" in md
    assert "| resnet50 | torch | fp32 | cpu:64 | gpu:1 | 32.60x |" in md
    assert "| resnet50 | torch | ddp | bf16 | 4 | 11,780 | 3.80x | 95.0 % ✓ | 85 % | gpulab default |" in md
    spec = "NVIDIA H200 datasheet (989 TFLOP/s dense bf16)"
    assert f"| matmul_bf16.min_pct_of_spec | 60.00 % | {spec} | 0.6 x spec |" in md


def test_markdown_bare_metal_without_gpus():
    report = Report(fingerprint=minimal_fingerprint().to_dict(), interrupted=True)
    md = to_markdown(report)
    assert "| Platform | bare metal |" in md
    assert "No GPU found: no NVIDIA GPU/driver found" in md
    assert "Interrupted" in md and "No checks ran." in md and "No measurements." in md
    assert "## Speedups" not in md and "## Scaling" not in md


def test_html_is_self_contained_with_plots():
    page = to_html(_report_with_failure())
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and "<script" not in page
    assert page.count('<figure class="plot"') >= 4  # spec bars, speedups, scaling, the GPU timeline
    assert "<img" not in page and page.count('<svg class="plot"') >= 4  # plots are inline SVG: they zoom and print
    assert "GPU timeline" in page


def test_html_escapes_report_text():
    page = to_html(_report_with_failure())
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in page


def test_html_without_data_has_no_plots():
    page = to_html(Report(fingerprint=minimal_fingerprint().to_dict()))
    assert "<img" not in page and "<svg" not in page
    assert "No GPU found" in page


def test_plots_skip_empty_data():
    empty = Report(fingerprint=minimal_fingerprint().to_dict())
    assert plot_speedups(empty) is None
    assert plot_scaling([]) is None
    report = sample_report()
    assert gpu_timelines(empty) == []  # no row with telemetry
    assert [index for index, _ in gpu_timelines(report)] == [0, 1, 2, 3]


def test_write_rendered_beside_json(tmp_path):
    report = sample_report()
    json_path = write_report(report, tmp_path / "report-gpu-vm-01-20250601T120000Z.json")
    md, page = write_rendered(report, json_path)
    assert md == tmp_path / "report-gpu-vm-01-20250601T120000Z.md"
    assert page == tmp_path / "report-gpu-vm-01-20250601T120000Z.html"
    assert md.read_text().startswith("# gpulab report")
    assert '<svg class="plot"' in page.read_text()
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".html", ".json", ".md"]


def test_topology_is_rendered():
    from gpulab.report.render import to_html, to_markdown
    from report_builders import sample_report

    report = sample_report()
    md = to_markdown(report)
    assert "GPU topology:" in md and "| GPU0 | X | NV18 |" in md
    assert "<th>GPU3</th>" in to_html(report)


def test_a_real_standard_tier_report_renders_one_cpu_chart_and_one_per_gpu_launcher():
    """The standard tier from 4x H200 (telemetry thinned to every 10th sample per GPU): what its HTML page must show."""
    from pathlib import Path

    from gpulab.report.io import load_report
    from gpulab.report.plots import plot_cpu_threads

    report = load_report(Path(__file__).parent / "fixtures" / "reports" / "h200x4-standard.json")
    page = to_html(report)
    scaling_alts = page.split('aria-label="scaling ')[1:]
    assert sorted(a.split('"')[0] for a in scaling_alts) == [
        "resnet50 torch dataparallel bf16",
        "resnet50 torch ddp bf16",
        "style_transfer torch sweep tf32",
    ]
    assert page.count('aria-label="CPU thread scaling"') == 1
    timelines = re.findall(r'aria-label="GPU \d+ timeline"', page)
    assert len(timelines) == len(report.fingerprint["gpus"])  # one timeline per GPU for the whole run
    assert "cpu:64 fp32" in page and "98.0 %" in page  # GPU rows against fp32 CPU rows; DDP efficiency at 4 GPUs
    assert plot_cpu_threads({}) is None


def test_a_captured_host_is_not_called_bare_metal():
    from gpulab.report.views import platform_text

    assert platform_text({"host": None, "captured_from": ["p100.xml"]}) == "not captured (judged from p100.xml)"
    assert platform_text({"host": {"hypervisor": None}}) == "bare metal"
    assert platform_text({"host": {"hypervisor": "KVM"}}).startswith("VM (KVM)")
