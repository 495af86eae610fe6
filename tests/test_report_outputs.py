"""`gpulab report` never writes over its input and refuses a bad output path in one line, before anything is
rendered or written."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulab.cli import main
from gpulab.report.io import write_report
from report_builders import sample_report

NOBODY = 65534


@pytest.fixture
def report(tmp_path) -> Path:
    return write_report(sample_report(), tmp_path / "r.json")


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run `gpulab` expecting exit 2 with one line on stderr and nothing on stdout; returns that line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gpulab: error: ")
    return lines[0].removeprefix("gpulab: error: ")


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def test_md_over_the_input_is_refused_and_the_report_kept(report, capsys):
    before, listing = report.read_bytes(), _files(report.parent)
    msg = _refused(["report", str(report), "--md", str(report)], capsys)
    assert msg == (
        f"--md {report} is the input report {report}; writing it would destroy the report: "
        f"choose another path, e.g. {report.with_suffix('.md')}"
    )
    assert report.read_bytes() == before and _files(report.parent) == listing


@pytest.mark.parametrize("how", ["symlink", "hard link", "relative detour"])
def test_other_names_of_the_input_are_refused(report, capsys, how):
    if how == "symlink":
        out = report.parent / "alias.html"
        out.symlink_to(report)
    elif how == "hard link":
        out = report.parent / "alias.html"
        os.link(report, out)
    else:
        out = report.parent / "missing" / ".." / report.name
    before = report.read_bytes()
    msg = _refused(["report", str(report), "--html", str(out)], capsys)
    assert msg.startswith(f"--html {out} is the input report {report}; writing it would destroy the report")
    assert report.read_bytes() == before


def test_default_outputs_over_the_input_are_refused(tmp_path, report, capsys):
    named_md = tmp_path / "r.md"
    shutil.copy(report, named_md)  # a report JSON someone named .md: its Markdown view would be itself
    msg = _refused(["report", str(named_md)], capsys)
    assert msg == (
        f"the Markdown view {named_md} is the input report {named_md}; writing it would destroy the report: "
        "rename the report to .json or pass --md OUT and --html OUT"
    )
    assert named_md.read_bytes() == report.read_bytes() and not (tmp_path / "r.html").exists()


def test_html_into_a_directory_is_refused_before_anything_is_written(tmp_path, report, capsys):
    out_dir = tmp_path / "site"
    out_dir.mkdir()
    md = tmp_path / "r-view.md"
    msg = _refused(["report", str(report), "--md", str(md), "--html", str(out_dir)], capsys)
    assert msg == f"--html {out_dir} is a directory; name a file inside it, e.g. {out_dir / 'r.html'}"
    assert not md.exists() and _files(out_dir) == []


@pytest.mark.parametrize("below", ["x.md", "sub/x.md"])
def test_an_output_under_a_regular_file_is_refused(tmp_path, report, capsys, below):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a directory\n")
    out = blocker / below
    msg = _refused(["report", str(report), "--md", str(out)], capsys)
    assert msg == f"--md {out}: {blocker} is a file, not a directory; choose a path inside a directory"
    assert blocker.read_text() == "a file, not a directory\n"


def test_the_same_output_twice_is_refused(tmp_path, report, capsys):
    out = tmp_path / "both.txt"
    msg = _refused(["report", str(report), "--md", str(out), "--html", str(out)], capsys)
    assert msg == f"--md and --html both name {out}; give each its own file"
    assert not out.exists()


def test_a_device_is_refused(report, capsys):
    msg = _refused(["report", str(report), "--md", os.devnull], capsys)
    assert msg == f"--md {os.devnull} exists and is not a regular file; choose another path"


@contextlib.contextmanager
def _unprivileged() -> Iterator[None]:
    """Run the block as a user that permissions apply to (root writes anywhere)."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)


@pytest.mark.parametrize("below", ["x.html", "new/dir/x.html"])
def test_an_output_in_a_read_only_directory_is_refused(report, capsys, below):
    main(["report", str(report), "--print", "md"])  # imports everything while files are readable
    capsys.readouterr()
    # outside pytest's private tmp dir, so that an unprivileged user can read the report
    base = Path(tempfile.mkdtemp(prefix="gpulab-ro-"))
    try:
        base.chmod(0o755)
        source = base / "r.json"
        shutil.copy(report, source)
        source.chmod(0o644)
        locked = base / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        out = locked / below
        with _unprivileged():
            msg = _refused(["report", str(source), "--html", str(out)], capsys)
        assert msg == f"--html {out}: directory {locked} is not writable; fix its permissions or choose another path"
        assert _files(locked) == []
    finally:
        shutil.rmtree(base)


def test_good_outputs_are_still_written(tmp_path, report, capsys):
    md, page = tmp_path / "views" / "r.md", tmp_path / "views" / "r.html"
    assert main(["report", str(report), "--md", str(md), "--html", str(page)]) == 0
    assert md.read_text().startswith("# gpulab report") and page.read_text().startswith("<!DOCTYPE html>")
    assert capsys.readouterr().out.splitlines() == [f"wrote {md}", f"wrote {page}"]
