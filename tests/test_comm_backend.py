"""DDP's process-group backend is one value type, gpulab.names.CommBackend: read by its one parser at the edges
(`--backend`, a worker's message) and chosen by one function when none is asked for."""

from __future__ import annotations

import json

import pytest

from gpulab.cli import build_parser
from gpulab.errors import GpulabError
from gpulab.launch.common import plan_batch
from gpulab.launch.spec import WorkerMessage
from gpulab.names import COMM_BACKENDS, CommBackend
from gpulab.records import RunConfig


@pytest.mark.parametrize("member", list(CommBackend))
def test_each_backend_is_read_from_its_value_and_written_as_it(member):
    assert CommBackend.parse(member.value) is member and CommBackend.parse(member) is member
    assert str(member) == f"{member}" == member.value and json.dumps(member) == json.dumps(member.value)
    assert member.value in COMM_BACKENDS


@pytest.mark.parametrize("bad", ["NCCL", "Gloo", " nccl", "gloo\n", "mpi", "", "nccl,gloo", None, 1, True])
def test_a_bad_spelling_is_named_with_the_choices(bad):
    with pytest.raises(GpulabError) as err:
        CommBackend.parse(bad, "--backend")
    assert str(err.value) == f"unknown --backend {bad!r}; choose one of: nccl (GPUs), gloo (CPU processes)"


def test_the_command_line_takes_exactly_the_backends(capsys):
    parser = build_parser()
    for member in CommBackend:
        args = parser.parse_args(["run", "mnist", "--launcher", "ddp", "--backend", member.value])
        assert args.comm_backend is member
    assert parser.parse_args(["run", "mnist"]).comm_backend is None
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["run", "mnist", "--launcher", "ddp", "--backend", "Nccl"])
    assert stop.value.code == 2
    assert "argument --backend: unknown DDP backend 'Nccl'; choose one of: nccl" in capsys.readouterr().err


@pytest.mark.parametrize("gpus", [True, False])
def test_one_function_chooses_when_none_is_asked(gpus):
    assert CommBackend.choose(None, gpus=gpus) is (CommBackend.NCCL if gpus else CommBackend.GLOO)
    for asked in CommBackend:
        assert CommBackend.choose(asked, gpus=gpus) is asked


def test_a_worker_message_carries_the_backend_as_its_type(tmp_path):
    cfg = RunConfig("mnist", batch=16)
    message = WorkerMessage(cfg, plan_batch(cfg, 2), "ddp", comm_backend=CommBackend.GLOO, threads=1)
    path = message.write(tmp_path / "m.json")
    assert json.loads(path.read_text())["comm_backend"] == "gloo"
    assert WorkerMessage.read(path).comm_backend is CommBackend.GLOO
    data = json.loads(path.read_text())
    data["comm_backend"] = "mpi"
    with pytest.raises(GpulabError, match="unknown worker message's comm_backend 'mpi'"):
        WorkerMessage.from_dict(data)
