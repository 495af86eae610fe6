"""Appending results to one report from many processes at once: nothing lost, nothing else changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpulab.errors import GpulabError
from gpulab.records import Result
from gpulab.report.append import append_results, lock_path
from gpulab.report.io import ReportError, load_report, write_report
from report_builders import sample_report

SRC = Path(__file__).resolve().parents[1] / "src"
PROCESSES = 8

# Each child waits for the go file so that all of them read, merge and write at the same moment.
CHILD = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from gpulab.report.append import append_results
    from gpulab.records import Result

    report, go, i = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    while not go.exists():
        time.sleep(0.001)
    row = Result(f"worker{i}", "torch", "cpu", 1, "fp32", 100.0 + i, "samples/s", devices=["cpu"])
    append_results(report, [row], "concurrent test", fingerprint=lambda: {"host": {"hostname": "concurrent"}})
    """
)


def _append_concurrently(report: Path, go: Path, through: Path | None = None) -> None:
    """PROCESSES children append at once; with `through`, every second one writes through that path instead."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(through if through and i % 2 else report), str(go), str(i)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    time.sleep(1.0)  # let every child import and start waiting
    go.touch()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err


@pytest.mark.parametrize("start", ["no report yet", "existing report"])
def test_eight_concurrent_processes_append_eight_results_every_time(tmp_path, start):
    for attempt in range(3):
        report = tmp_path / f"run{attempt}" / "same.json"
        before = None
        if start == "existing report":
            before = sample_report()
            write_report(before, report)
        _append_concurrently(report, tmp_path / f"go{attempt}")
        loaded = load_report(report)
        workers = sorted(r.workload for r in loaded.results if r.workload.startswith("worker"))
        assert workers == [f"worker{i}" for i in range(PROCESSES)], f"attempt {attempt}: {workers}"
        if before is None:
            assert len(loaded.results) == PROCESSES
            assert loaded.fingerprint == {"host": {"hostname": "concurrent"}} and loaded.tier == "run"
        else:  # everything the report held before is still there, unchanged
            assert loaded.results[: len(before.results)] == before.results
            assert len(loaded.results) == len(before.results) + PROCESSES
            assert (loaded.fingerprint, loaded.checks, loaded.thresholds) == (
                before.fingerprint,
                before.checks,
                before.thresholds,
            )
            assert (loaded.created, loaded.tier, loaded.command, loaded.duration_s) == (
                before.created,
                before.tier,
                before.command,
                before.duration_s,
            )
        # one lock file beside the report, no temporary files left behind
        assert sorted(p.name for p in report.parent.iterdir()) == [".same.json.lock", "same.json"]


def test_writers_through_a_symbolic_link_and_the_real_path_share_one_lock_and_the_link_stays(tmp_path):
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    write_report(sample_report(), real)
    link.symlink_to(real.name)
    before = len(load_report(real).results)
    _append_concurrently(real, tmp_path / "go", through=link)
    workers = sorted(r.workload for r in load_report(real).results if r.workload.startswith("worker"))
    assert workers == [f"worker{i}" for i in range(PROCESSES)]
    assert len(load_report(real).results) == before + PROCESSES
    assert link.is_symlink() and link.resolve() == real.resolve()


def test_lock_file_sits_beside_the_report(tmp_path):
    assert lock_path(tmp_path / "dir" / "same.json") == tmp_path / "dir" / ".same.json.lock"


def test_append_recomputes_speedups_and_scaling_and_keeps_the_rest(tmp_path):
    path = tmp_path / "r.json"
    before = sample_report()
    write_report(before, path)
    cpu1 = Result("resnet50", "torch", "cpu", 1, "fp32", 5.0, "samples/s", devices=["cpu"])
    report = append_results(path, [cpu1])
    on_disk = json.loads(path.read_text())
    assert on_disk["results"][-1]["value"] == 5.0 and len(on_disk["results"]) == len(before.results) + 1
    assert ("cpu:1", "cpu:64") in {(s.from_, s.to) for s in report.speedups}
    assert load_report(path).checks == before.checks and load_report(path).thresholds == before.thresholds
    # the ddp rows keep the expected efficiency recorded before
    ddp = {(s.n, s.expected, s.expected_source) for s in report.scaling if s.launcher == "ddp"}
    assert ddp == {(2, 0.85, "gpulab default"), (4, 0.85, "gpulab default")}


def test_a_corrupt_report_is_not_replaced(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"schema": "gpulab.report/1", "results": [')
    row = Result("w", "torch", "cpu", 1, "fp32", 1.0, "samples/s")
    with pytest.raises(ReportError, match="truncated"):
        append_results(path, [row], fingerprint=lambda: {"host": {"hostname": "h"}})
    assert path.read_text() == '{"schema": "gpulab.report/1", "results": ['


def test_a_report_path_under_a_file_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    row = Result("w", "torch", "cpu", 1, "fp32", 1.0, "samples/s")
    with pytest.raises(GpulabError) as info:
        append_results(blocker / "r.json", [row], fingerprint=lambda: {"host": {"hostname": "h"}})
    msg = str(info.value)
    assert msg == (
        f"cannot lock report {blocker / 'r.json'}: a part of {blocker} is a file, not a directory; "
        "pass another --report path"
    )
