"""Outputs are never written through a symbolic link (refused in one line, the link's target untouched), except
`gpulab run --report LINK`, which appends to the report the link names by design; and inputs are parsed with
limits: YAML aliases, nesting and repeated keys, deep or repeated-key JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpulab.cli import main
from gpulab.errors import GpulabError
from gpulab.paths import OutputPathError
from gpulab.report.database import read_database
from gpulab.report.io import ReportError, atomic_write_text, load_report, write_report
from report_builders import sample_report

SECRET = "root's file\n"


@pytest.fixture
def report(tmp_path) -> Path:
    return write_report(sample_report(), tmp_path / "r.json")


def _planted(tmp_path: Path, name: str) -> tuple[Path, Path]:
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir(exist_ok=True)
    target.write_text(SECRET)
    link = tmp_path / "shared" / name
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(target)
    return link, target


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulab: error: ")
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        lambda r, out: ["report", str(r), "--html", str(out)],
        lambda r, out: ["report", str(r), "--md", str(out)],
        lambda r, out: ["compare", str(r), str(r), "--md", str(out)],
        lambda r, out: ["study", "report", str(r.parent / "study"), "--html", str(out)],
    ],
    ids=["report --html", "report --md", "compare --md", "study report --html"],
)
def test_an_output_through_a_planted_link_is_refused_and_its_target_kept(tmp_path, report, capsys, argv):
    link, target = _planted(tmp_path, "out.page")
    line = _refused(argv(report, link), capsys)
    assert f"{link} is a symbolic link (to {target})" in line
    assert target.read_text() == SECRET and link.is_symlink()


@pytest.mark.parametrize(
    ("option", "name"), [("--param", "out.png"), ("--save-weights", "w.pt")], ids=["--param output=", "--save-weights"]
)
def test_run_outputs_through_a_link_are_refused_before_the_run(tmp_path, capsys, option, name):
    link, target = _planted(tmp_path, name)
    value = f"output={link}" if option == "--param" else str(link)
    line = _refused(["run", "style_transfer", "--launcher", "cpu", "--size", "tiny", option, value], capsys)
    assert f"{link} is a symbolic link" in line
    assert target.read_text() == SECRET and link.is_symlink()


def test_the_atomic_writer_refuses_a_link_at_write_time(tmp_path):
    link, target = _planted(tmp_path, "page.html")
    with pytest.raises(OutputPathError, match="is a symbolic link"):
        atomic_write_text(link, "new")
    assert target.read_text() == SECRET and link.is_symlink()
    assert sorted(p.name for p in link.parent.iterdir()) == ["page.html"]  # no temporary file left


def test_the_image_writer_never_follows_a_link(tmp_path):
    from gpulab.paths import open_output

    link, target = _planted(tmp_path, "out.png")
    with pytest.raises(OutputPathError, match="is a symbolic link"):
        open_output(link)
    assert target.read_text() == SECRET


def test_run_report_still_appends_through_a_link(tmp_path, capsys):
    pytest.importorskip("torch")
    from test_launch_stub import BUILDER

    real, link = tmp_path / "real.json", tmp_path / "link.json"
    write_report(sample_report(), real)
    link.symlink_to(real.name)
    before = len(load_report(real).results)
    argv = ["run", "stub", "--launcher", "cpu", "--threads", "1", "--builder", BUILDER, "--size", "tiny"]
    assert main([*argv, "--warmup", "1", "--report", str(link)]) == 0
    assert len(load_report(real).results) == before + 1 and link.is_symlink()


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_an_alias_bomb_study_file_is_refused_at_once_naming_the_file(tmp_path):
    from gpulab.studies.spec import load_study

    path = tmp_path / "bomb.yml"
    path.write_text("study: s\nworkload: style_transfer\n" + BOMB)
    started = time.monotonic()
    with pytest.raises(GpulabError) as err:
        load_study(path)
    assert time.monotonic() - started < 2
    assert str(path) in str(err.value) and "200000" in str(err.value)


def test_many_aliases_and_deep_nesting_are_refused(tmp_path):
    from gpulab.studies.spec import load_study

    path = tmp_path / "s.yml"
    path.write_text("study: s\nx: &x 1\ny: [" + ", ".join(["*x"] * 101) + "]\n")
    with pytest.raises(GpulabError, match=r"more than 100 aliases"):
        load_study(path)
    path.write_text("study: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(GpulabError, match=r"nested more than 64 levels"):
        load_study(path)


def test_a_vm_spec_with_a_repeated_key_is_refused(tmp_path):
    from gpulab.vm.spec import load_spec

    path = tmp_path / "vm.yml"
    path.write_text("name: a\nname: b\n")
    with pytest.raises(GpulabError) as err:
        load_spec(path)
    assert str(path) in str(err.value) and "'name' is given twice" in str(err.value)


def test_a_deeply_nested_json_report_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 10_000 + "]" * 10_000)
    with pytest.raises(ReportError) as err:
        load_report(path)
    assert str(path) in str(err.value) and "nested" in str(err.value)


def test_a_report_with_a_repeated_key_is_refused(tmp_path, report):
    text = report.read_text()
    twice = text.replace('"schema":', '"tier": "x",\n  "tier": "y",\n  "schema":', 1)
    report.write_text(twice)
    with pytest.raises(ReportError) as err:
        load_report(report)
    assert str(report) in str(err.value) and "'tier' is given twice" in str(err.value)


def test_a_database_with_a_repeated_key_is_refused(tmp_path):
    (tmp_path / "database.json").write_text('[{"_pset_id": "a", "_pset_id": "b"}]')
    with pytest.raises(GpulabError) as err:
        read_database(tmp_path)
    assert "database.json" in str(err.value) and "'_pset_id' is given twice" in str(err.value)


def test_a_report_still_loads(report):
    assert json.loads(report.read_text())["schema"] and load_report(report).results
