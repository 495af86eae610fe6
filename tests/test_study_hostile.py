"""A study file and a study directory are data: hostile ones are refused before anything is written, never run,
never hang, and a page made from them links nothing outside the study."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

pd = pytest.importorskip("pandas")
pytest.importorskip("psweep")

from gpulab.errors import GpulabError  # noqa: E402
from gpulab.report.database import write_database  # noqa: E402
from gpulab.studies import cluster  # noqa: E402
from gpulab.studies.page import write_report  # noqa: E402
from gpulab.studies.runner import study_record  # noqa: E402
from gpulab.studies.spec import load_study  # noqa: E402

ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
THOUSAND = list(range(1000))
BASE = {"study": "s", "workload": "style_transfer", "size": "tiny", "fixed": {"width": 32, "iterations": 2}}


def gpulab(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, timeout=timeout, env=ENV, check=False
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (yaml.safe_dump({**BASE, "workload": "nope"}), "workload: 'nope' is not one of style_transfer"),
        (yaml.safe_dump({**BASE, "fixed": {"widht": 32}}), "fixed: unknown parameter(s) widht for style_transfer"),
        ("study: s\nworkload: style_transfer\nfixed: {learning_rate: .nan}\n", "learning_rate: NaN or infinity"),
        ("study: s\nworkload: style_transfer\nfixed: {width: 32}\nfixed: {width: 64}\n", "'fixed' is given twice"),
        (
            yaml.safe_dump({**BASE, "vary": {"params": {"output": ["javascript:alert(1)"]}}}),
            "output is the study's to choose",
        ),
        (
            yaml.safe_dump({**BASE, "vary": {"mode": "grid", "params": {"tv_weight": THOUSAND, "beta1": THOUSAND}}}),
            "the study has 1000000 runs, more than 20000",
        ),
        (
            yaml.safe_dump({**BASE, "vary": {"params": {"tv_weight": {"linspace": [0, 1, 10**9]}}}}),
            "1000000000 values, more than a study's 20000 runs",
        ),
    ],
)  # fmt: skip
def test_a_bad_study_file_is_refused_at_once_and_leaves_nothing(tmp_path, text, expected):
    path = tmp_path / "s.yml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(GpulabError) as err:
        load_study(path)
    assert expected in str(err.value) and time.monotonic() - started < 5


def test_the_command_refuses_a_bad_study_file_before_making_its_directory(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text(yaml.safe_dump({**BASE, "workload": "nope"}))
    out = tmp_path / "out"
    proc = gpulab("study", "run", str(path), "--study-dir", str(out))
    assert proc.returncode == 2 and "workload: 'nope' is not one of" in proc.stderr and not out.exists()
    path.write_text(yaml.safe_dump(BASE))
    proc = gpulab("study", "run", str(path), "--study-dir", str(out), "--param", "output=/tmp/elsewhere.png")
    assert proc.returncode == 2 and "--param output is the study's to choose" in proc.stderr and not out.exists()


def _study_dir(tmp_path: Path, output: str) -> Path:
    """A study directory as a run leaves it, one run whose recorded image is `output`."""
    out = tmp_path / "study"
    out.mkdir()
    (out / "study.yml").write_text(yaml.safe_dump(BASE))
    study = load_study(out / "study.yml")
    (out / "study.json").write_text(json.dumps(study_record(study)))
    row = {**BASE["fixed"], "study": "s", "workload": "style_transfer", "_pset_id": "p1", "_run_id": "r1"}
    row.update(
        {"status_": "ok", "output_": output, "wall_s_": 1.0, "timed_s_": 0.5, "loss_curve_": [[0, 3.0], [1, 2.0]]}
    )
    row["_time_utc"] = "2026-11-25 20:00:00"
    write_database(out, pd.DataFrame([row], dtype=object))
    return out


def test_a_run_output_that_is_not_a_path_inside_the_study_is_never_linked(tmp_path):
    out = _study_dir(tmp_path, "javascript:alert(document.domain)")
    html, _ = write_report(out)
    page = html.read_text()
    assert "javascript:" not in page and "alert(" not in page


def test_study_report_refuses_pages_over_the_study_files(tmp_path):
    out = _study_dir(tmp_path, "p1/output.png")
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for option, target in (("--html", "database.pk"), ("--md", "study.yml"), ("--html", "database.json")):
        proc = gpulab("study", "report", str(out), option, str(out / target))
        assert proc.returncode == 2 and f"{option} {out / target} lies inside the study directory" in proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert gpulab("study", "report", str(out), "--html", str(tmp_path / "page.html")).returncode == 0


def test_a_fifo_for_study_json_is_refused_without_waiting(tmp_path):
    out = _study_dir(tmp_path, "p1/output.png")
    (out / "study.json").unlink()
    os.mkfifo(out / "study.json")
    for args in (("status", str(out)), ("resume", str(out))):
        started = time.monotonic()
        proc = gpulab("study", *args)
        assert proc.returncode == 2 and "named pipe" in proc.stderr, proc.stderr
        assert time.monotonic() - started < 60


def test_a_scheduler_address_that_is_not_a_dask_scheduler_is_refused_in_bounded_time():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        with pytest.raises(GpulabError, match="accepts connections but says nothing within"):
            cluster.reachable(f"tcp://127.0.0.1:{server.server_address[1]}")
        assert time.monotonic() - started < cluster.CONNECT_S + 5
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def black_hole():
    """A TCP listener that accepts connections (the kernel does) and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("target", ["black_hole", "http_server"])
def test_study_worker_refuses_an_address_where_no_scheduler_answers(target, request):
    address = request.getfixturevalue(target)
    started = time.monotonic()
    proc = gpulab("study", "worker", address, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"gpulab: error: study worker {address}: ") and "says nothing within" in lines[0]
    assert time.monotonic() - started < cluster.CONNECT_S + 10


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once it is closed


@pytest.mark.parametrize(
    ("fixed", "vary", "expected"),
    [
        ({"width": -3}, None, "every run would fail: style_transfer: parameter width=-3 is invalid"),
        ({"iterations": -2}, None, "parameter iterations=-2 is invalid; expected an integer ≥ 1"),
        ({}, {"width": [32, -3]}, "the run with width=-3 would fail: style_transfer: parameter width=-3"),
        ({"content": "{dir}/not-an-image.png"}, None, "not-an-image.png is not an image Pillow can read"),
        ({"content": "{dir}/missing.png"}, None, "missing.png does not exist"),
        ({"vgg_weights": "https://example.invalid/vgg19.pth"}, None, "carries no checksum"),
        ({"vgg_weights": "http://127.0.0.1:{port}/vgg19-dcbb9e9d.pth"}, None, "cannot be fetched (Connection refused)"),
    ],
)  # fmt: skip
def test_a_run_value_that_would_fail_is_refused_before_the_study_directory(tmp_path, fixed, vary, expected):
    (tmp_path / "not-an-image.png").write_text("these are notes, not an image\n")
    port = _closed_port()
    fixed = {k: v.format(dir=tmp_path, port=port) if isinstance(v, str) else v for k, v in fixed.items()}
    study = {**BASE, "fixed": {**BASE["fixed"], **fixed}, **({"vary": {"params": vary}} if vary else {})}
    (tmp_path / "s.yml").write_text(yaml.safe_dump(study))
    out = tmp_path / "out"
    proc = gpulab("study", "run", str(tmp_path / "s.yml"), "--study-dir", str(out))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("gpulab:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert errors[0].startswith("gpulab: error: study s: ") and expected in errors[0], errors[0]
    assert errors[0].endswith("nothing was written") and not out.exists()


def test_runs_for_another_hosts_workers_are_checked_without_their_files(tmp_path):
    from gpulab.studies import preflight

    study = {**BASE, "fixed": {**BASE["fixed"], "content": str(tmp_path / "on-the-worker.png")}}
    (tmp_path / "s.yml").write_text(yaml.safe_dump(study))
    preflight.check_runs(load_study(tmp_path / "s.yml"), files_here=False)  # the image is the workers' host's
    with pytest.raises(GpulabError, match=r"on-the-worker\.png does not exist"):
        preflight.check_runs(load_study(tmp_path / "s.yml"))
    study["fixed"]["width"] = -3
    (tmp_path / "s.yml").write_text(yaml.safe_dump(study))
    with pytest.raises(GpulabError, match="parameter width=-3 is invalid"):
        preflight.check_runs(load_study(tmp_path / "s.yml"), files_here=False)
