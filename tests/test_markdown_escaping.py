"""Strings in a report (host name, GPU names, check names and messages, environment values) and in a study (its
title, a run's failure) reach the Markdown pages as text: HTML in them is escaped as the HTML pages escape it, so a
Markdown viewer never runs a planted `<script>`. Real reports, the real `gpulab` commands in child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPORT = Path(__file__).parent / "fixtures" / "reports" / "h200x4-standard.json"
SCRIPT = "<script>alert(1)</script>"
RAW = ("<script", "<img", "<svg", "<iframe")


def gpulab(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, timeout=300, env=env, check=False
    )


def _planted(tmp_path: Path, name: str) -> Path:
    data: dict[str, Any] = json.loads(REPORT.read_text())
    fp = data["fingerprint"]
    fp["host"]["hostname"] = f"gpu01{SCRIPT}"
    fp["gpus"][0]["name"] = 'NVIDIA H200 <img src=x onerror="alert(2)">'
    fp["software"]["env"] = {"CUDA_VISIBLE_DEVICES": f"0`{SCRIPT}`"}
    fp["gpu_absent_reason"] = "<svg onload=alert(3)>"
    data["checks"][0].update(status="fail", message=f"failed {SCRIPT} | <iframe src=//x>", name=f"health.{SCRIPT}")
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _no_raw_html(markdown: str) -> None:
    found = [tag for tag in RAW if tag in markdown.lower()]
    assert not found, f"raw HTML {found} in the Markdown"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in markdown  # the text is kept, escaped


def test_report_md_escapes_html_from_the_report(tmp_path):
    report = _planted(tmp_path, "r.json")
    proc = gpulab("report", str(report), "--md", str(tmp_path / "r.md"), "--html", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    markdown = (tmp_path / "r.md").read_text()
    _no_raw_html(markdown)
    assert "<code>health.&lt;script&gt;" in markdown  # the check's name, inline code that holds no HTML


def test_compare_md_escapes_html_from_the_reports(tmp_path):
    other = _planted(tmp_path, "b.json")  # its host, GPU and failed check differ from the baseline's
    proc = gpulab("compare", str(REPORT), str(other), "--md", str(tmp_path / "c.md"))
    assert proc.returncode in (0, 1), proc.stderr
    _no_raw_html((tmp_path / "c.md").read_text())


def test_study_md_escapes_html_from_the_study_and_its_runs(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("psweep")
    from gpulab.report.database import write_database
    from gpulab.studies.runner import study_record
    from gpulab.studies.spec import load_study

    out = tmp_path / "study"
    out.mkdir()
    base = {"study": "s", "title": f"A study {SCRIPT}", "workload": "style_transfer", "size": "tiny"}
    (out / "study.yml").write_text(yaml.safe_dump({**base, "fixed": {"width": 32, "iterations": 2}}))
    (out / "study.json").write_text(json.dumps(study_record(load_study(out / "study.yml"))))
    row = {"study": "s", "workload": "style_transfer", "width": 32, "iterations": 2, "_pset_id": "p1", "_run_id": "r1"}
    row.update(status_="failed", failure_=f"RuntimeError: {SCRIPT}", wall_s_=1.0, device_=f"cpu{SCRIPT}")
    row["_time_utc"] = "2026-11-25 20:00:00"
    write_database(out, pd.DataFrame([row], dtype=object))
    proc = gpulab("study", "report", str(out))
    assert proc.returncode == 0, proc.stderr
    _no_raw_html((out / "report.md").read_text())
