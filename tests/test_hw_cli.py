"""`gpulab info` through its own parser (independent of the other command groups)."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from capture_edits import P100_XML, with_versions, write
from gpulab.errors import GpulabError
from gpulab.hw import discover
from gpulab.hw.commands import add_commands
from gpulab.hw.discover import fingerprint
from gpulab.hw.host import host_info
from gpulab.hw.render import render
from gpulab.records import Fingerprint

FIX = Path(__file__).parent / "fixtures" / "h200x4-firecracker"
XML = FIX / "nvidia-smi-q-x.xml"
TOPO = FIX / "nvidia-smi-topo-m.txt"


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpulab")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


def test_info_json_from_capture_round_trips(capsys):
    assert run(["info", "--json", "--from", str(XML), "--topo", str(TOPO), "--no-frameworks"]) == 0
    data = json.loads(capsys.readouterr().out)
    fp = Fingerprint.from_dict(data)
    assert fp.to_dict() == data
    assert fp.gpu_source == f"nvidia-smi-xml:{XML}"
    assert len(fp.gpus) == 4
    assert fp.gpus[2].bus_id == "0000:00:08.0"
    assert fp.gpus[0].pcie.at_max is True
    assert fp.gpus[0].compute_capability == "9.0"
    assert fp.gpus[0].numa_node == 0  # from topo's NUMA affinity: no sysfs device here
    assert fp.software.driver_version == "580.159.04"
    assert fp.software.cuda_driver_version == "13.0"
    assert fp.topology[0] == ["X", "NV18", "NV18", "NV18"]
    assert fp.gpu_absent_reason is None
    assert fp.host is None and data["host"] is None
    assert fp.captured_from == [str(XML), str(TOPO)]


def test_info_missing_from_file(tmp_path):
    with pytest.raises(GpulabError) as err:
        run(["info", "--from", str(tmp_path / "gone.xml")])
    assert "gone.xml" in str(err.value) and "nvidia-smi -q -x" in str(err.value)


def test_info_bad_from_file(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("<nvidia_smi_log><gpu>")
    with pytest.raises(GpulabError, match=r"bad\.xml"):
        run(["info", "--from", str(bad), "--no-frameworks"])


def test_info_human_output_with_capture(capsys):
    assert run(["info", "--from", str(XML), "--topo", str(TOPO), "--no-frameworks"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "0000:00:09.0" in out and "NV18" in out and "gpu_idle" in out


def test_info_live_returns_zero_even_without_gpu(capsys):
    assert run(["info", "--no-frameworks"]) == 0
    assert capsys.readouterr().out


def test_render_marks_degraded_link_and_absent_reason():
    fp = fingerprint(smi_xml=XML, probe_frameworks=False)
    fp.gpus[1].pcie.width_current = 8
    console = Console(record=True, width=160)
    render(fp, console)
    assert "gen5 x8 (max gen5 x16) DEGRADED" in console.export_text()

    empty = Fingerprint(host=fp.host, gpu_absent_reason="no NVIDIA GPU/driver found: no NVIDIA GPU on the PCI bus")
    console = Console(record=True, width=160)
    render(empty, console)
    assert "no NVIDIA GPU/driver found: no NVIDIA GPU on the PCI bus" in console.export_text()


def strings(value: Any) -> set[str]:
    """Every string value in a JSON document."""
    if isinstance(value, dict):
        return set().union(*(strings(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(strings(v) for v in value)) if value else set()
    return {value} if isinstance(value, str) else set()


@pytest.fixture
def capture_2017(tmp_path):
    return write(tmp_path / "p100-375.xml", with_versions(P100_XML.read_text(), "375.66", "8.0"))


def test_info_json_from_capture_holds_nothing_of_this_machine(capsys, monkeypatch, capture_2017):
    here = host_info()
    mine = {here.hostname, socket.gethostname(), sys.version.split()[0]} | (
        {here.cpu.model} if here.cpu.model else set()
    )

    def this_machine(*args: object, **kwargs: object) -> None:
        raise AssertionError("a capture must not be described with this machine's facts")

    monkeypatch.setattr(discover, "host_info", this_machine)
    monkeypatch.setattr(discover, "software_info", this_machine)
    assert run(["info", "--json", "--from", str(capture_2017)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["host"] is None
    assert data["software"] == {
        "driver_version": "375.66",
        "cuda_driver_version": "8.0",
        "toolkits": None,
        "nvcc_version": None,
        "cudnn_version": None,
        "nccl_version": None,
        "python": None,
        "frameworks": None,
        "env": None,
    }
    assert data["captured_from"] == [str(capture_2017)]
    assert [g["numa_node"] for g in data["gpus"]] == [None, None]
    assert strings(data) & mine == set()
    assert not any("/usr/local/cuda" in s for s in strings(data))


def test_info_text_from_capture_says_not_captured(capture_2017):
    console = Console(record=True, width=200)
    render(fingerprint(smi_xml=capture_2017), console)
    out = console.export_text()
    assert f"Host (captured: {capture_2017})" in out
    rows = {" ".join(line.replace("│", " ").split()) for line in out.splitlines()}
    for row in ("Host", "CPU", "Memory", "CUDA toolkits", "cuDNN", "Python", "Frameworks", "Environment"):
        assert f"{row} not captured" in rows
    assert "375.66 (CUDA 8.0 supported)" in out
    assert "GPU topology: not captured" in out
