"""Every JSON or YAML input refuses a key given twice and nesting beyond its limit in one line that names the file:
a report, a study's database.json, study.json, sessions.json and a run's row.json, a sweep's database.json, a study
file, `--vars` and a VM spec. JSON nested far deeper than Python's recursion limit is a clear error too, never
"unexpected RecursionError". Each case runs the real `gpulab` command in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

pd = pytest.importorskip("pandas")
pytest.importorskip("psweep")

from gpulab.report.database import write_database  # noqa: E402
from gpulab.studies.runner import study_record  # noqa: E402
from gpulab.studies.spec import load_study  # noqa: E402

REPORT = Path(__file__).parent / "fixtures" / "reports" / "h200x4-standard.json"
STUDY = {"study": "s", "workload": "style_transfer", "size": "tiny", "fixed": {"width": 32, "iterations": 2}}
DEEP_JSON = "[" * 100_000 + "]" * 100_000  # far beyond json's recursion, and any limit


def _study_dir(d: Path) -> Path:
    """A study directory as a finished run leaves it: study.yml, study.json, database.json, a run's row.json."""
    out = d / "study"
    out.mkdir()
    (out / "study.yml").write_text(yaml.safe_dump(STUDY))
    (out / "study.json").write_text(json.dumps(study_record(load_study(out / "study.yml"))))
    row = {**STUDY["fixed"], "study": "s", "workload": "style_transfer", "_pset_id": "p1", "_run_id": "r1"}
    row.update(status_="ok", wall_s_=1.0, _time_utc="2026-11-25 20:00:00")
    write_database(out, pd.DataFrame([row], dtype=object))
    (out / "sessions.json").write_text("[]")
    return out


def _dup_object(text: str) -> str:
    """`text` (a JSON object, or a list of them) with its first object's first key given a second time."""
    start = text.index("{")
    key = text[start + 1 : text.index(":", start)].strip()
    return text[: start + 1] + f"{key}: null, " + text[start + 1 :]


# label -> (make the bad file in the scratch folder from its content, the command line that reads it)
Case = tuple[Callable[[Path, str], Path], Callable[[Path, Path], list[str]]]


def _report(d: Path, content: str) -> Path:
    (d / "r.json").write_text(content)
    return d / "r.json"


def _in_study(name: str) -> Callable[[Path, str], Path]:
    def make(d: Path, content: str) -> Path:
        out = _study_dir(d)
        (out / name).parent.mkdir(exist_ok=True)
        (out / name).write_text(content)
        return out / name

    return make


def _sweep_db(d: Path, content: str) -> Path:
    (d / "sweep").mkdir()
    (d / "sweep" / "database.json").write_text(content)
    return d / "sweep" / "database.json"


def _named(name: str) -> Callable[[Path, str], Path]:
    def make(d: Path, content: str) -> Path:
        (d / name).write_text(content)
        return d / name

    return make


SWEEP = ["sweep", "mnist", "--size", "tiny", "--steps", "1", "--gpus", "1", "--sweep-dir"]
INPUTS: dict[str, Case] = {
    "report": (_report, lambda bad, d: ["report", str(bad), "--print", "md"]),
    "compare": (_report, lambda bad, d: ["compare", str(REPORT), str(bad)]),
    "study database.json": (_in_study("database.json"), lambda bad, d: ["study", "status", str(bad.parent)]),
    "study.json": (_in_study("study.json"), lambda bad, d: ["study", "status", str(bad.parent)]),
    "run row.json": (_in_study("p2/row.json"), lambda bad, d: ["study", "status", str(bad.parent.parent)]),
    "sessions.json": (_in_study("sessions.json"), lambda bad, d: ["study", "report", str(bad.parent)]),
    "sweep database.json": (_sweep_db, lambda bad, d: [*SWEEP, str(bad.parent)]),
    "study file": (_named("s.yml"), lambda bad, d: ["study", "run", str(bad), "--study-dir", str(d / "o")]),
    "--vars": (
        _named("vars.yml"),
        lambda bad, d: ["matrix", "resolve", "--gpu", "H200", "--os", "debian12", "--vars", str(bad)],
    ),
    "VM spec": (_named("vm.yml"), lambda bad, d: ["vm", "plan", str(bad), "--connect", "test:///default"]),
}
YAML_INPUTS = ("study file", "--vars", "VM spec")


DUPLICATED = {
    "study database.json": '[{"_pset_id": "p1", "_pset_id": "p2"}]',
    "study.json": '{"name": "s", "name": "t"}',
    "run row.json": '{"_pset_id": "p2", "_pset_id": "p2"}',
    "sessions.json": '[{"run_ids": [], "run_ids": ["x"]}]',
    "sweep database.json": '[{"_run_id": "r1", "_run_id": "r2"}]',
}


def _content(label: str, family: str) -> str:
    if family == "deep":
        return DEEP_JSON  # JSON is YAML too: the YAML inputs get it as a flow sequence
    if label in YAML_INPUTS:
        return "a: 1\nb: 2\na: 3\n"
    return DUPLICATED.get(label) or _dup_object(REPORT.read_text())


CASES = [(label, family) for label in INPUTS for family in ("duplicate key", "deep")]


@pytest.mark.parametrize(("label", "family"), CASES, ids=[f"{lab}|{fam}" for lab, fam in CASES])
def test_a_duplicate_key_or_deep_nesting_is_one_line_naming_the_file(tmp_path, label, family):
    make, argv = INPUTS[label]
    bad = make(tmp_path, _content(label, family))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "200"}
    env.pop("GPULAB_TRACEBACK", None)
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", *argv(bad, tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("gpulab:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr[-2000:]
    assert "unexpected" not in errors[0] and bad.name in errors[0], errors[0]
    expected = ("given twice",) if family == "duplicate key" else ("nested", "levels deep")
    assert all(word in errors[0] for word in expected), errors[0]
