"""A command loads its own package alone: `gpulab compare` starts without torch, libvirt or the study runner, and
the table that maps commands to packages stays true to what the packages register."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from gpulab import cli


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_the_table_names_every_command_and_the_package_that_registers_it():
    assert _commands(cli.build_parser()) == set(cli.COMMANDS)
    for command, package in cli.COMMANDS.items():
        alone = _commands(cli.build_parser([command]))
        assert command in alone, (command, package)
        assert alone == {c for c, p in cli.COMMANDS.items() if p == package}
    assert set(cli.PACKAGES) == set(cli.COMMANDS.values())


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (["compare", "--help"], ("torch", "libvirt", "gpulab.launch", "gpulab.studies.runner", "gpulab.vm")),
        (["matrix", "--help"], ("torch", "libvirt", "gpulab.launch", "gpulab.report.compare")),
        (["vm", "--help"], ("torch", "gpulab.launch", "gpulab.studies.runner")),
    ],
)
def test_a_command_imports_only_what_it_needs(argv, absent):
    code = (
        "import sys\nfrom gpulab.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m in sys.argv[0].split(',')), file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code.replace("sys.argv[0].split(',')", repr(absent)), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: gpulab " + argv[0])
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr


def test_help_and_a_bad_command_still_list_every_command(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["nosuch"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nosuch'" in err and all(c in err for c in cli.COMMANDS)
