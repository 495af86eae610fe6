"""`gpulab matrix ...`: exit codes and what the user reads."""

from __future__ import annotations

import argparse
import json

import pytest

from gpulab.compat import commands


def _run(argv: list[str]) -> int:
    """Parse with a parser holding only this package's commands, so these tests stand alone."""
    parser = argparse.ArgumentParser(prog="gpulab")
    commands.add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


P100_OK = ["--gpu", "Tesla P100-PCIE-16GB", "--driver", "580.95.05", "--cuda", "12.9", "--cudnn", "9.10"]


def test_check_ok(capsys):
    assert _run(["matrix", "check", *P100_OK, "--torch", "2.9", "--tensorflow", "2.20", "--python", "3.12"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK: ")
    assert "https://download.pytorch.org/whl/cu126" in out


def test_check_failure_lists_every_reason_and_fix(capsys):
    rc = _run(["matrix", "check", "--gpu", "P100", "--driver", "590.48.01", "--cuda", "13.0", "--torch", "2.9+cu130"])
    assert rc == 1
    out = capsys.readouterr().out
    assert out.startswith("INCOMPATIBLE: ")
    assert "[driver]" in out and "[cuda]" in out and "[torch]" in out
    assert out.count("fix: ") == 3
    assert "R580" in out and "cu126" in out


def test_check_json(capsys):
    assert _run(["matrix", "check", "--gpu", "GTX 1080 Ti", "--driver", "590.48.01", "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is False
    assert payload["incompatibilities"][0]["component"] == "driver"
    assert payload["stack"]["gpu"] == "GTX 1080 Ti"


def test_check_profile_with_override(capsys):
    assert _run(["matrix", "check", "--profile", "legacy-2018"]) == 0
    assert _run(["matrix", "check", "--profile", "legacy-2018", "--os", "ubuntu18.04"]) == 1
    assert "[os]" in capsys.readouterr().out


def test_check_needs_something(capsys):
    assert _run(["matrix", "check"]) == 2
    assert "--profile" in capsys.readouterr().err


def test_plan(capsys):
    assert _run(["matrix", "plan", "--gpu", "P100"]) == 0
    out = capsys.readouterr().out
    assert "Tesla P100-PCIE-16GB" in out and "580." in out and "12.9" in out
    assert "--index-url https://download.pytorch.org/whl/cu126" in out


def test_plan_json(capsys):
    assert _run(["matrix", "plan", "--gpu", "10de:2335", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["stack"]["gpu"] == "NVIDIA H200"
    assert payload["torch_index_url"] == "https://download.pytorch.org/whl/cu130"


def test_gpus_table_and_json(capsys):
    assert _run(["matrix", "gpus"]) == 0
    out = capsys.readouterr().out
    assert "Tesla P100-PCIE-16GB" in out and "10de:2335" in out
    assert _run(["matrix", "gpus", "--json"]) == 0
    names = [g["name"] for g in json.loads(capsys.readouterr().out)]
    assert "NVIDIA H200" in names


def test_show(capsys):
    assert _run(["matrix", "show", "legacy-2018"]) == 0
    out = capsys.readouterr().out
    assert "legacy-2018" in out and "OK: " in out and "410.79" in out


def test_via_gpulab_main(capsys):
    """The same through the real entry point, including GpulabError handling (exit 2 + message)."""
    cli = pytest.importorskip("gpulab.cli")
    try:
        cli.build_parser()
    except ImportError:  # another part of the CLI is not importable in this tree yet
        pytest.skip("gpulab.cli cannot build its parser yet")
    h200 = ["--gpu", "H200", "--driver", "580.159.04", "--cuda", "13.0", "--torch", "2.11"]
    assert cli.main(["matrix", "check", *h200]) == 0
    assert "OK: " in capsys.readouterr().out
    assert cli.main(["matrix", "check", "--gpu", "P100", "--cuda", "13.0"]) == 1
    assert "12.9" in capsys.readouterr().out
    assert cli.main(["matrix", "plan", "--gpu", "Radeon VII"]) == 2
    assert "not in the compatibility matrix" in capsys.readouterr().err
    assert cli.main(["matrix", "show", "nope"]) == 2
    assert "legacy-2018" in capsys.readouterr().err
