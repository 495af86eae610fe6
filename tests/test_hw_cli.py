"""`gpulab info` through its own parser (independent of the other command groups)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from rich.console import Console

from gpulab.errors import GpulabError
from gpulab.hw.commands import add_commands
from gpulab.hw.discover import fingerprint
from gpulab.hw.model import Fingerprint
from gpulab.hw.render import render

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
