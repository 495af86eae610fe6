"""`gpulab matrix ...`: exit codes and what the user reads."""

from __future__ import annotations

import argparse
import json

import pytest

from gpulab.cli import main
from gpulab.compat import commands
from gpulab.errors import GpulabError


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
    # Coherent on its own OS (Ubuntu 16.04), which gpulab does not provision: the check says both.
    assert _run(["matrix", "check", "--profile", "legacy-2018"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK: ") and "os=ubuntu16.04" in out
    assert "note: gpulab cannot provision it: no OS its roles provision (Debian 13, Debian 12, Debian 11, Ubuntu" in out
    assert _run(["matrix", "check", "--profile", "legacy-2018", "--os", "ubuntu18.04"]) == 1
    assert "[os]" in capsys.readouterr().out


def test_the_legacy_profile_is_not_ok_on_debian_12(capsys):
    assert _run(["matrix", "check", "--profile", "legacy-2018", "--os", "debian12"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INCOMPATIBLE: ") and "OK:" not in out
    assert (
        "- [os] driver 410.79 (R410) is not available on Debian 12: Debian 12's archive packages R535, R470 and "
        "NVIDIA's repository R535–R595." in out
    )
    assert (
        "- [os] CUDA 9.0 is not available on Debian 12: NVIDIA published it for Ubuntu 16.04, 17.04, and Debian 12's "
        "archive has CUDA 11.8." in out
    )
    assert "fix: on Debian 12 use CUDA 11.8 (Debian 12's archive) or 12.2–13.2 (NVIDIA's repository)." in out
    assert _run(["matrix", "check", "--profile", "legacy-2018", "--os", "Debian 12", "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is False and payload["provisioned_on"] == []


def test_check_needs_something():
    with pytest.raises(GpulabError, match="nothing to check: pass --profile"):
        _run(["matrix", "check"])


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
    assert "gpulab cannot provision it" in out and "run this stack in an Ubuntu 16.04 container" in out
    assert _run(["matrix", "show", "modern"]) == 0
    assert "note: gpulab provisions it on: Debian 13, Debian 12, Ubuntu 24.04, Ubuntu 22.04" in capsys.readouterr().out


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


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gpulab: error: ")
    return lines[0]


BAD_VALUES = ["", "   ", "\t", "12..9", "abc", "-1", "1.x", "P1\n00"]
# Every option of every `gpulab matrix` subcommand that takes a value, with the example its error must show.
OPTIONS = [
    (["matrix", "check"], "--gpu", "--gpu P100"),
    (["matrix", "check"], "--driver", "--driver 580.95.05"),
    (["matrix", "check"], "--cuda", "--cuda 12.9"),
    (["matrix", "check"], "--cudnn", "--cudnn 9.10"),
    (["matrix", "check"], "--torch", "--torch 2.9.0+cu126"),
    (["matrix", "check"], "--tensorflow", "--tensorflow 2.20"),
    (["matrix", "check"], "--python", "--python 3.12"),
    (["matrix", "check"], "--os", "--os ubuntu22.04"),
    (["matrix", "check"], "--profile", "--profile legacy-2018"),
    (["matrix", "plan"], "--gpu", "--gpu P100"),
    (["matrix", "plan", "--gpu", "P100"], "--os", "--os ubuntu22.04"),
]
# Values that are free text for an option (a GPU name, a non-Ubuntu OS) are only refused when empty.
FREE_TEXT = {"--gpu": ["", "   ", "\t", "P1\n00"], "--os": ["", "   ", "\t", "12..9", "-1", "P1\n00"]}


@pytest.mark.parametrize(("prefix", "option", "example"), OPTIONS)
def test_empty_or_malformed_option_values_are_refused(prefix, option, example, capsys):
    refused = FREE_TEXT.get(option, BAD_VALUES)
    for value in refused:
        assert main([*prefix, f"{option}={value}"]) == 2, value
        line = _one_error_line(capsys)
        assert f"error: {option} " in line and f"e.g. {example}" in line, line
        if value.strip():
            assert repr(value.strip()) in line, line
        else:
            assert f"{option} is empty" in line
    # Also when other options are fine: one bad value is never read as "not given".
    if prefix == ["matrix", "check"] and option != "--profile":
        assert main([*prefix, "--gpu", "P100", "--cuda", "12.9", f"{option}="]) == 2
        assert f"{option} is empty" in _one_error_line(capsys)


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["matrix", "check", "--cuda", "12.9,"], "--cuda '12.9,' is not a CUDA version"),
        (["matrix", "check", "--cuda", "9.0,,10.0"], "--cuda '9.0,,10.0' is not a CUDA version"),
        (["matrix", "check", "--cuda", "12.9,abc"], "--cuda '12.9,abc' is not a CUDA version"),
        (["matrix", "check", "--torch", "2.9+"], "--torch '2.9+' is not a torch version"),
        (["matrix", "check", "--torch", "2.9+cu 126"], "--torch '2.9+cu 126' is not a torch version"),
        (["matrix", "check", "--os", "ubuntu22.4"], "--os 'ubuntu22.4' is not an Ubuntu release"),
        (["matrix", "check", "--driver", "R"], "--driver 'R' is not a version number"),
        (["matrix", "check", "--profile", "nope"], "--profile 'nope' is not a known stack (known: legacy-2018"),
        (["matrix", "show", ""], "PROFILE is empty; pass a named stack, e.g. gpulab matrix show legacy-2018"),
        (["matrix", "show", " "], "PROFILE is empty"),
        (["matrix", "show", "nope"], "PROFILE 'nope' is not a known stack"),
        (["matrix", "show", "legacy-2018\n"], "e.g. gpulab matrix show legacy-2018"),
        (["matrix", "check"], "nothing to check: pass --profile"),
    ],
)
def test_malformed_values_name_the_option(argv, text, capsys):
    rc = main(argv)
    if argv[-1] == "legacy-2018\n":  # surrounding whitespace is not an error
        assert rc == 0 and "legacy-2018" in capsys.readouterr().out
        return
    assert rc == 2
    assert text in _one_error_line(capsys)


@pytest.mark.parametrize(
    "argv",
    [
        ["matrix", "check", "--cuda", "9.0,10.0"],
        ["matrix", "check", "--cuda", "cu129"],
        ["matrix", "check", "--cuda", " 12.9 "],
        ["matrix", "check", "--driver", "R580"],
        ["matrix", "check", "--os", "rhel9"],
        ["matrix", "check", "--os", "Ubuntu 22.04"],
        ["matrix", "check", "--torch", "2.9.0+cu126"],
        ["matrix", "check", "--python", "3"],
        ["matrix", "plan", "--gpu", "P100", "--os", "ubuntu22.04"],
    ],
)
def test_well_formed_values_still_pass(argv, capsys):
    assert main(argv) == 0
    assert capsys.readouterr().err == ""


def test_unknown_but_well_formed_versions_stay_incompatibilities(capsys):
    """A version the matrix does not list is a finding with a fix (exit 1), not a typo (exit 2)."""
    assert main(["matrix", "check", "--cuda", "12.7"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INCOMPATIBLE: cuda=12.7") and "known: 9.0" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["matrix", "check", "--gpu", "P100", "--cuda", "13.0", "--json"],
        ["matrix", "check", "--profile", "modern", "--json"],
        ["matrix", "plan", "--gpu", "P100", "--json"],
        ["matrix", "gpus", "--json"],
        ["matrix", "show", "legacy-2018", "--json"],
    ],
)
def test_json_is_alone_on_stdout(argv, capsys):
    assert main(argv) in (0, 1)
    captured = capsys.readouterr()
    json.loads(captured.out)  # the whole of stdout is one JSON document
    assert captured.err == ""
