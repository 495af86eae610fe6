"""`gpulab compare` modes: same machine kind (regression check, VM/host overhead) and different machines
(side by side, no verdict), the pages it writes, and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.report.compare import compare
from gpulab.report.io import load_report, write_report

REPORTS = Path(__file__).parent / "fixtures" / "reports"
H200 = REPORTS / "h200x4-standard.json"
H100 = REPORTS / "h100x1-standard.json"
ROW = ("resnet50", "torch", "ddp", 4, "bf16", "")


def gpulab(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", "compare", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def _lowered(tmp_path: Path, name: str, factor: float, keys: set[tuple[object, ...]] | None = None) -> Path:
    report = load_report(H200)
    for r in report.results:
        if keys is None or r.key() in keys:
            r.value *= factor
    return write_report(report, tmp_path / name)


def test_different_machines_side_by_side_exit_0():
    proc = gpulab(H200, H100)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.startswith("verdict: none (other GPU models") and out.splitlines()[1].startswith("mode: different")
    assert "REGRESSION" not in out
    # resnet50's GPU-over-all-CPU-threads speedups of both machines, on one line
    (line,) = [ln for ln in out.splitlines() if "resnet50" in ln and "cpu:all fp32 -> gpu:1" in ln]
    assert "181.0x" in line and "206.3x" in line
    assert out.index("speedups") < out.index("scaling") < out.index("throughputs")
    assert "GPU model: 4x NVIDIA H200 → 1x NVIDIA H100 80GB HBM3" in out and "CPU threads: 64 → 16" in out


def test_different_machines_per_gpu_watt_dollar():
    c = compare([(str(H200), load_report(H200)), (str(H100), load_report(H100))], prices={0: 12.0, 1: 3.0})
    assert c.mode == "different" and c.regressions == []
    (ddp,) = [r for r in c.rows if r.key == ROW]
    assert ddp.value_per_gpu(0) == pytest.approx(ddp.values[0] / 4)
    assert ddp.value_per_watt(0) == pytest.approx(ddp.values[0] / (511.97 + 531.64 + 502.0 + 528.84))
    cpu = [r for r in c.rows if r.key == ("resnet50", "torch", "cpu", 0, "fp32", "cpu")]
    assert cpu and cpu[0].values[1] == pytest.approx(17.436380670657087)  # 16 threads against 64
    assert "probes.gpus_perform_alike[bf16]" in c.not_comparable
    assert json.loads(json.dumps(c.to_dict()))["mode"] == "different"


def test_same_machine_one_row_lower_exit_1(tmp_path):
    low = _lowered(tmp_path, "low.json", 0.9, {ROW})
    proc = gpulab(H200, low)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("verdict: GPU: REGRESSION: 1 result(s) below their noise band (GPU 1)")
    assert proc.stdout.splitlines()[1].startswith("mode: same machine kind")
    assert "resnet50/torch/ddp n=4 bf16" in proc.stdout.split("regressions:")[1]


def test_forced_different_on_same_pair_exit_0(tmp_path):
    low = _lowered(tmp_path, "low.json", 0.9, {ROW})
    proc = gpulab(H200, low, "--mode", "different")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "forced with --mode different" in proc.stdout and "REGRESSION" not in proc.stdout


def test_vm_against_host_overhead_column(tmp_path):
    host = load_report(H200)
    host.fingerprint["host"]["hypervisor"] = None
    host_path = write_report(host, tmp_path / "host.json")
    vm_path = _lowered(tmp_path, "vm.json", 0.97)  # the fixture itself runs under KVM
    proc = gpulab(host_path, vm_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert out.startswith("verdict: GPU: no regression") and out.splitlines()[1].startswith("mode: same machine kind")
    assert "VM/host" in out and "0.970" in out and "virtualisation overhead: VM " in out
    assert "platform: bare metal → VM (KVM)" in out
    c = compare([("host", host), ("vm", load_report(vm_path))])
    assert c.vm_overhead[0].startswith("virtualisation overhead: VM vm / host host = 0.970")
    assert c.vm == [None, 1] and all(c.vm_ratio(r, 1) == pytest.approx(0.97) for r in c.rows)


def test_html_and_md_pages(tmp_path):
    page, md = tmp_path / "cmp.html", tmp_path / "cmp.md"
    proc = gpulab(H200, H100, "--html", page, "--md", md, "--price", "h100x1-standard.json=3", "--price", "1=12")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text and "http" not in text
    sections = text.split("<section")
    assert 'id="verdict"' in sections[1] and 'id="mode"' in sections[2] and "different machines" in sections[2]
    assert 'id="ratios"' in sections[3] and "<svg" in sections[3]  # each row's ratio charted before the tables
    assert "speedups" in sections[4]
    assert "samples per $" in text
    assert md.read_text().splitlines()[2] == "## verdict"


def test_bad_outputs_and_prices_exit_2(tmp_path):
    proc = gpulab(H200, H100, "--html", H100)
    assert proc.returncode == 2 and "--html" in proc.stdout + proc.stderr
    proc = gpulab(H200, H100, "--price", "nosuch.json=3")
    assert proc.returncode == 2 and "no report" in proc.stdout + proc.stderr
    proc = gpulab(H200, H100, "--price", "2=-1")
    assert proc.returncode == 2
