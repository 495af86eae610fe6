"""One process at a time owns a study directory: a second `resume` is refused naming the owner, a lock left by a
killed process is taken over, the database keeps every row whoever wrote it, and `gpulab report` never replaces a
study's page with a validation page."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pd = pytest.importorskip("pandas")
pytest.importorskip("psweep")

from gpulab import names  # noqa: E402
from gpulab.records import Report  # noqa: E402
from gpulab.report.append import this_host  # noqa: E402
from gpulab.report.database import merge_database, read_database, save_row, write_database  # noqa: E402
from gpulab.report.io import write_report  # noqa: E402
from gpulab.studies.lock import LOCK_FILE, owning  # noqa: E402
from gpulab.studies.runner import study_record  # noqa: E402
from gpulab.studies.spec import load_study  # noqa: E402

ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
STUDY = {
    "study": "locked",
    "workload": "style_transfer",
    "size": "tiny",
    "fixed": {"width": 32, "iterations": 2},
    "vary": {"mode": "star", "params": {"tv_weight": [0, 1, 10, 100]}},
    "workers": 1,
}


def _gpulab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, timeout=300, env=ENV, check=False
    )


def _planned_dir(tmp_path: Path) -> Path:
    """A study directory as `study run` leaves it before its first run: every run missing."""
    out = tmp_path / "study"
    out.mkdir()
    (out / "study.yml").write_text(yaml.safe_dump(STUDY))
    (out / "study.json").write_text(json.dumps(study_record(load_study(out / "study.yml"))))
    return out


def _wait(what, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _owner(out: Path) -> dict:
    text = (out / LOCK_FILE).read_text() if (out / LOCK_FILE).exists() else ""
    return json.loads(text) if text.strip() else {}


def test_a_second_resume_is_refused_naming_the_first_and_nothing_runs_twice(tmp_path):
    out = _planned_dir(tmp_path)
    first = subprocess.Popen(
        [sys.executable, "-m", "gpulab", "study", "resume", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    _wait(lambda: _owner(out).get("pid") == first.pid or first.poll() is not None)
    assert first.poll() is None, first.communicate()
    second = _gpulab("study", "resume", str(out))
    assert first.poll() is None, "the first resume ended before the second was refused: make the study longer"
    lines = [line for line in second.stderr.splitlines() if line.startswith("gpulab:")]
    assert second.returncode == 2 and len(lines) == 1, second.stderr
    assert lines[0].startswith("gpulab: error:") and f"pid {first.pid} " in lines[0] and "in use" in lines[0]
    assert "gpulab study resume" in lines[0] and "Traceback" not in second.stderr
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr[-3000:]
    assert _owner(out) == {}  # a clean end names no owner
    status = json.loads(_gpulab("study", "status", str(out), "--json").stdout)
    assert (status["done"], status["repeated"], status["rows"]) == (4, 0, 4)
    assert len(json.loads((out / "database.json").read_text())) == 4
    assert len(json.loads((out / "sessions.json").read_text())) == 1  # the refused resume recorded nothing


def test_a_lock_left_by_a_killed_process_is_taken_over_with_one_line(tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from gpulab.studies.lock import owning\n"
            f"with owning({str(out)!r}, print):\n    print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    said: list[str] = []
    with pytest.raises(Exception, match=f"pid {holder.pid} "), owning(out, said.append):
        pass  # refused while the holder lives
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    assert _owner(out)["pid"] == holder.pid  # the killed owner's record is still there, its lock is not
    with owning(out, said.append):
        assert _owner(out)["pid"] == os.getpid()
    assert len(said) == 1 and "took over" in said[0] and f"pid {holder.pid} " in said[0], said
    assert _owner(out) == {}


def test_the_database_written_keeps_rows_only_the_runs_saved_and_rows_another_session_wrote(tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    rows = [{"a": k, "_pset_id": f"p{k}", "_run_id": "r1", "status_": "ok"} for k in (1, 2)]
    write_database(out, pd.DataFrame(rows, dtype=object))  # another session's rows
    save_row(out / "p3", {"a": 3, "_pset_id": "p3", "_run_id": "r2", "status_": "ok"})  # a late run's row only
    mine = pd.DataFrame([{"a": 4, "_pset_id": "p4", "_run_id": "r3", "status_": "ok"}], dtype=object)
    merge_database(out, mine)  # this session's narrower view
    written = json.loads((out / "database.json").read_text())
    assert sorted(r["_pset_id"] for r in written) == ["p1", "p2", "p3", "p4"]
    failed_then_ok = pd.DataFrame([{"a": 1, "_pset_id": "p1", "_run_id": "r1", "status_": "failed"}], dtype=object)
    merge_database(out, failed_then_ok)  # the same run's row in memory replaces its row on disk, once
    df = read_database(out)
    assert len(df) == 4 and list(df[df["_pset_id"] == "p1"]["status_"]) == ["failed"]


def test_gpulab_report_on_a_study_report_refuses_to_replace_the_study_page(tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    (out / "study.yml").write_text(yaml.safe_dump(STUDY))
    report = Report(fingerprint=this_host(), tier=names.RUN_REPORT_TIER, command="gpulab study run locked")
    write_report(report, out / "report.json")
    (out / "report.html").write_text("<html>the study page</html>")
    (out / "report.md").write_text("the study page")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = _gpulab("report", str(out / "report.json"))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and f"gpulab study report {out}" in lines[0], proc.stderr
    proc = _gpulab("report", str(out / "report.json"), "--html", str(out / "report.html"))
    assert proc.returncode == 2 and "gpulab study report" in proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    elsewhere = tmp_path / "validation.html"
    proc = _gpulab("report", str(out / "report.json"), "--html", str(elsewhere))
    assert proc.returncode == 0 and elsewhere.is_file(), proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
