"""A study's record tells the truth whoever wrote it: each planned run done once across interrupted sessions, the
counts (planned, done, failed, missing, repeated), and a study directory read as data, never as code."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pd = pytest.importorskip("pandas")
ps = pytest.importorskip("psweep")

from gpulab.errors import GpulabError  # noqa: E402
from gpulab.report.database import read_database, save_row, write_database  # noqa: E402
from gpulab.studies import ledger  # noqa: E402
from gpulab.studies.psets import parameter_sets  # noqa: E402
from gpulab.studies.spec import study_from_dict  # noqa: E402

ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
STAR = {
    "study": "twice",
    "workload": "style_transfer",
    "size": "tiny",
    "precision": "fp32",
    # the centre's learning rate (10) beside 2.5: psweep turns the column to floats when handed the whole star,
    # keeps ints when handed only some of it
    "fixed": {"width": 32, "iterations": 2, "learning_rate": 10},
    "vary": {"mode": "star", "params": {"learning_rate": [1, 2.5, 10, 20], "tv_weight": [0, 10, 100, 1000]}},
    "workers": 1,
}


def _washed(psets):
    return ps.df_extract_dicts(ps.df_ensure_dtypes(pd.DataFrame(psets, dtype=object)), py_types=False)


def test_psweep_hashes_a_run_apart_by_the_runs_beside_it_the_run_key_does_not():
    whole = _washed([{"lr": 10}, {"lr": 2.5}])
    alone = _washed([{"lr": 10}])
    assert whole[0]["lr"] == 10.0 and isinstance(whole[0]["lr"], float) and isinstance(alone[0]["lr"], int)
    assert ps.pset_hash(whole[0]) != ps.pset_hash(alone[0])  # the cause of the repeated runs
    assert ledger.run_key(whole[0]) == ledger.run_key(alone[0])
    assert ledger.run_key({"lr": 10, "_pset_id": "a", "loss_": 1}) == ledger.run_key({"lr": 10.0, "extra": pd.NA})
    assert ledger.run_key({"lr": 10}) != ledger.run_key({"lr": 11}) != ledger.run_key({"lr": "10"})


def _rows(psets, status):
    return [{**p, "_pset_id": f"id{k}", "status_": s} for k, (p, s) in enumerate(zip(psets, status, strict=True))]


def test_what_is_done_is_decided_from_every_row_however_its_session_typed_it():
    study = study_from_dict(STAR)
    planned = ledger.plan(study)
    assert len(planned) == 8
    # A second session handed only the runs with a whole learning rate stored them as ints.
    second = _washed([p for p in parameter_sets(study) if p["learning_rate"] != 2.5][:3])
    assert {type(p["learning_rate"]) for p in second} == {int}
    df = pd.DataFrame(_rows(second, ["ok", "ok", "failed"]))
    todo, total = ledger.todo(study, df)
    assert total == 8 and len(todo) == 6
    counts = ledger.counts(study, df)
    assert (counts.planned, counts.done, counts.failed, counts.missing, counts.repeated) == (8, 2, 1, 5, 0)
    again = pd.DataFrame(_rows([*second[:1], *second[:1]], ["ok", "ok"]) + _rows(planned[-1:], ["ok"]))
    counts = ledger.counts(study, again)
    assert (counts.done, counts.repeated, counts.rows) == (2, 1, 3)
    assert "2 of 8 planned runs done, 0 failed, 6 missing, 1 repeated" in counts.line()


def _study_dir(tmp_path: Path) -> Path:
    out = tmp_path / "study"
    out.mkdir()
    rows = [{"a": k, "_pset_id": f"p{k}", "_run_id": "r1", "status_": "ok"} for k in (1, 2)]
    write_database(out, pd.DataFrame(rows, dtype=object))
    return out


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {Path(os.environ['PAYLOAD_MARK'])}",))


def test_a_study_directory_is_read_as_data_never_unpickled_and_reading_writes_nothing(tmp_path, monkeypatch):
    out = _study_dir(tmp_path)
    mark = tmp_path / "payload-ran"
    monkeypatch.setenv("PAYLOAD_MARK", str(mark))
    (out / "database.pk").write_bytes(pickle.dumps(Payload()))  # a crafted pickle beside the JSON copy
    # a run of the last session that finished (on a remote worker) after the session wrote the database
    save_row(out / "p3", {"a": 3, "_pset_id": "p3", "_run_id": "r1", "status_": "ok"})
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    df = read_database(out)
    assert sorted(df["a"]) == [1, 2, 3] and not mark.exists()
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # nothing rewritten in place
    (out / "tmpsave" / "run1").mkdir(parents=True)
    (out / "tmpsave" / "run1" / "p9.pk").write_bytes(pickle.dumps(Payload()))  # an older gpulab's per-run pickle
    with pytest.raises(GpulabError, match=r"tmpsave holds 1 run\(s\) saved only as pickles.*--trust-pickles"):
        read_database(out)
    (out / "database.json").unlink()
    (out / "tmpsave" / "run1" / "p9.pk").unlink()
    with pytest.raises(GpulabError, match=r"holds its database only as a pickle \(database.pk\); pass --trust"):
        read_database(out)
    assert not mark.exists()


def test_a_damaged_row_or_a_fifo_is_refused_not_read_or_waited_on(tmp_path):
    out = _study_dir(tmp_path)
    (out / "p3").mkdir()
    (out / "p3" / "row.json").write_text('{"a": 3, "_pset_id": "other"}')
    with pytest.raises(GpulabError, match=r"p3/row.json is not the row of run p3"):
        read_database(out)
    (out / "p3" / "row.json").unlink()
    (out / "database.json").unlink()
    os.mkfifo(out / "database.json")
    started = time.monotonic()
    with pytest.raises(GpulabError, match="named pipe"):
        read_database(out)
    assert time.monotonic() - started < 5


def test_a_failed_write_leaves_the_old_database_whole(tmp_path, monkeypatch):
    out = _study_dir(tmp_path)
    old_json, old_pk = (out / "database.json").read_bytes(), (out / "database.pk").read_bytes()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_database(out, pd.DataFrame([{"a": 9, "_pset_id": "p9"}], dtype=object))
    assert (out / "database.json").read_bytes() == old_json and (out / "database.pk").read_bytes() == old_pk
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []


def _gpulab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", *args], capture_output=True, text=True, timeout=600, env=ENV, check=False
    )


def _interrupt(out: Path, more: int, *args: str, again_after: float | None = None) -> subprocess.CompletedProcess[str]:
    """Start `gpulab study ARGS`, Ctrl-C it (the whole process group, as a terminal does) once `more` runs have
    saved their row, and again `again_after` seconds later (while it records what finished)."""
    rows = len(list(out.glob("*/row.json"))) + more
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulab", "study", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while len(list(out.glob("*/row.json"))) < rows and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, f"the study ended before it was interrupted: {proc.communicate()}"
    os.killpg(proc.pid, signal.SIGINT)
    if again_after is not None:
        time.sleep(again_after)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _status(out: Path) -> dict[str, int]:
    proc = _gpulab("study", "status", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def test_a_study_interrupted_three_times_ends_with_each_run_exactly_once(tmp_path):
    path = tmp_path / "twice.yml"
    path.write_text(yaml.safe_dump(STAR))
    out = tmp_path / "out"
    first = _interrupt(out, 2, "run", str(path), "--study-dir", str(out))
    second = _interrupt(out, 2, "resume", str(out))
    third = _interrupt(out, 1, "resume", str(out), again_after=0.3)  # the second Ctrl-C lands while it records
    for proc in (first, second, third):
        assert proc.returncode == 130, proc.stderr[-3000:]
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert lines[-1].startswith("gpulab: interrupted; finished runs are kept in"), proc.stderr[-3000:]
        for noise in ("Traceback", "KeyboardInterrupt", "AllExit", "never retrieved"):
            assert noise not in proc.stderr, proc.stderr[-3000:]
    status = _status(out)
    assert status["done"] >= 5 and status["repeated"] == 0 and status["failed"] == 0
    sessions = json.loads((out / "sessions.json").read_text())
    assert [s["interrupted"] for s in sessions] == [True, True, True]
    # written by the stopped session; a run its worker finished after that saved its row, which joins on reading
    assert 5 <= len(json.loads((out / "database.json").read_text())) <= status["rows"]
    last = _gpulab("study", "resume", str(out))
    assert last.returncode == 0, last.stderr[-3000:]
    status = _status(out)
    assert {k: status[k] for k in ("planned", "done", "failed", "missing", "repeated", "rows", "extra")} == {
        "planned": 8,
        "done": 8,
        "failed": 0,
        "missing": 0,
        "repeated": 0,
        "rows": 8,
        "extra": 0,
    }
    assert "Runs: 8 of 8 planned runs done, 0 failed, 0 missing, 0 repeated" in (out / "report.md").read_text()
    finished = _gpulab("study", "resume", str(out))  # a finished study runs nothing
    assert finished.returncode == 0 and "nothing to run: all 8 runs" in finished.stderr
    assert _status(out)["rows"] == 8
