"""Batched study runs (gpulab.studies.batching, gpulab.workloads.style_transfer.batch): which runs share a batch, how a
batch is sized, that a batch gives each run the result it gets alone, and that a failed batch fails no run by itself.
"""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import numpy as np
import pytest

from gpulab.errors import GpulabError
from gpulab.names import Precision
from gpulab.studies import arithmetic, batching
from gpulab.studies.spec import study_from_dict
from gpulab.workloads.style_transfer import BATCH_SHARED

torch = pytest.importorskip("torch")

BASE = {"study": "s", "workload": "style_transfer", "size": "tiny", "precision": "fp32", "launcher": "worker"}


def pset(k: int, **values):
    return {**BASE, "width": 32, "iterations": 2, "seed": k, "repeat": 0, "_pset_id": f"id{k}", **values}


def test_runs_that_differ_in_shared_numbers_and_seed_share_a_batch_in_order():
    runs = [pset(k, learning_rate=1 + k, tv_weight=10 * k, style_scales=0.5 + k) for k in range(7)]
    out = batching.batches(runs, 3, BATCH_SHARED)
    assert [[r["seed"] for r in b] for b in out] == [[0, 1, 2], [3, 4], [5, 6]]  # 7 in 3 batches of 3, 2, 2


def test_a_parameter_that_changes_the_work_splits_batches():
    runs = [pset(0), pset(1, width=64), pset(2), pset(3, pooling="avg"), pset(4, width=64), pset(5, loop="eager")]
    out = batching.batches(runs, 8, BATCH_SHARED)
    assert [[r["seed"] for r in b] for b in out] == [[0, 2], [1, 4], [3], [5]]
    assert batching.batches(runs, 1, BATCH_SHARED) == [[r] for r in [runs[0], runs[2], runs[1], runs[4], runs[3],
                                                                      runs[5]]]  # fmt: skip


def test_batch_sizes_differ_by_at_most_one():
    for total in range(1, 70):
        for size in (1, 4, 7, 32, 64):
            sizes = [len(b) for b in batching.batches([pset(k) for k in range(total)], size, BATCH_SHARED)]
            assert sum(sizes) == total and max(sizes) <= size and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "two", "", None])
def test_a_bad_batch_runs_is_refused_naming_the_fix(value):
    with pytest.raises(GpulabError, match=r"batch_runs: .* is not auto or a whole number ≥ 1; give auto"):
        batching.batch_runs_value(value)
    with pytest.raises(GpulabError, match="batch_runs"):
        study_from_dict({**BASE, "launcher": "worker", "batch_runs": value})


def test_batch_runs_in_a_study_file_and_on_the_command_line():
    assert study_from_dict({**BASE, "batch_runs": "auto"}).batch_runs == "auto"
    assert study_from_dict({**BASE, "batch_runs": 16}).batch_runs == 16
    assert study_from_dict(BASE).batch_runs == 1  # the default: one run at a time, as before
    from gpulab.cli import build_parser

    args = build_parser().parse_args(["study", "run", "neural-style", "--batch-runs", "auto"])
    assert args.batch_runs == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["study", "resume", "dir", "--batch-runs", "0"])


def test_studies_that_cannot_batch_say_why():
    assert batching.why_not(study_from_dict(BASE)) is None
    epochs = study_from_dict({**BASE, "workload": "mnist", "epochs": {"epochs": 1}})
    assert "no batched version" in str(batching.why_not(epochs))
    machine = study_from_dict({**BASE, "launcher": "gpu"})
    assert "whole machine" in str(batching.why_not(machine))


def _size(rows: list[dict], remaining: int, workers: int) -> tuple[int, str]:
    return batching.size_from_probe([batching.probe_from(r) for r in rows], remaining=remaining, workers=workers)


def test_auto_sizes_from_the_probe_memory_and_an_even_share():
    gpu = {"status_": "ok", "batch_memory_mib_": 4 * 464.0, "batch_runs_": 4, "gpu_total_mib_": 143771.0,
           "gpu_context_mib_": 1456.0, "timed_s_": 9.3}  # fmt: skip
    size, why = _size([gpu, gpu], remaining=244, workers=2)
    assert size == 64 and "memory holds 245 (464 MiB per run" in why and "MAX_AUTO" in why
    assert _size([gpu], remaining=45, workers=2)[0] == 23  # 45 runs on two workers
    big = {**gpu, "batch_memory_mib_": 4 * 20000.0}
    assert _size([big], remaining=244, workers=1)[0] == 5  # 80 % of 139 GiB at 20 GB a run
    cpu = {"status_": "ok", "batch_runs_": 4, "timed_s_": 0.4}
    assert _size([cpu], remaining=100, workers=2) == (
        batching.CPU_AUTO,
        f"CPU workers: {batching.CPU_AUTO} (CPU_AUTO; host memory per run is not measured)",
    )
    assert _size([{"status_": "failed"}], remaining=100, workers=2)[0] == 1
    assert batching.recorded([{"batching": {"asked": "auto", "batch_runs": 23}}, {"batching": {}}]) == 23


# ---- the batched session against the same runs one by one (CPU, tiny, fixed seeds) ----

RUNS = [
    {"learning_rate": 10, "style_weight": 10},
    {"learning_rate": 2, "tv_weight": 1, "style_scales": 1.6},
    {"content_weight_blend": 0.3, "style_layer_weight_exp": 2.5, "content_weight": 0},
    {"style_weight": 0, "tv_weight": 3000, "learning_rate": 50},
]


def _configs(channels_last: bool):
    from gpulab.records import RunConfig

    base = {"width": 32, "iterations": 4}
    return [
        RunConfig(
            workload="style_transfer",
            precision=Precision.FP32,
            size="tiny",
            seed=k,
            channels_last=channels_last,
            params={**base, **p},
        )
        for k, p in enumerate(RUNS)
    ]


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_batch_gives_each_run_its_own_loss_and_image(channels_last):
    from gpulab.workloads.style_transfer.batch import BatchedStyleSession
    from gpulab.workloads.style_transfer.session import StyleTransferSession

    torch.set_num_threads(1)
    alone = []
    for cfg in _configs(channels_last):
        session = StyleTransferSession(cfg, "cpu")
        curve = [float(session.step()) for _ in range(session.steps)]
        alone.append((curve, session.image(), session.flops_per_step()))
        session.finish()
    batch = BatchedStyleSession(_configs(channels_last), "cpu")
    for _ in range(batch.steps):
        batch.step()
    curves = torch.stack(batch.run_losses).t().tolist()
    assert batch.flops_per_step() == pytest.approx(len(RUNS) * alone[0][2], rel=0.02)
    for k, (curve, image, _) in enumerate(alone):
        assert curves[k] == pytest.approx(curve, rel=1e-5)  # every step, not only the last
        assert np.abs(batch.image_of(k).astype(int) - image.astype(int)).max() <= 1
    finished = batch.finish_runs()
    assert [f["final_loss"] for f in finished] == pytest.approx([c[-1] for c, _, _ in alone], rel=1e-5)
    assert {f["learning_rate"] for f in finished} == {10, 2, 50} and "3 learning rate(s)" in batch.info["optimizer"]


def test_runs_that_differ_in_the_work_are_refused_as_one_batch():
    from gpulab.records import RunConfig
    from gpulab.workloads.style_transfer.batch import BatchedStyleSession

    cfgs = [
        RunConfig(
            workload="style_transfer", precision=Precision.FP32, size="tiny", seed=0, steps=2, params={"width": w}
        )
        for w in (32, 48)
    ]
    with pytest.raises(GpulabError, match=r"runs of one batch differ in width .*only content_weight"):
        BatchedStyleSession(cfgs, "cpu")


def test_the_gram_split_over_pixels_is_the_plain_product():
    from gpulab.workloads.style_transfer.loops import batched_gram

    x = torch.randn(3, 8, 16, 12, dtype=torch.float64)
    plain = torch.bmm(x.reshape(3, 8, -1), x.reshape(3, 8, -1).transpose(1, 2))
    assert torch.allclose(batched_gram(x), plain)
    assert torch.allclose(batched_gram(x.contiguous(memory_format=torch.channels_last)), plain)
    odd = torch.randn(2, 4, 7, 7, dtype=torch.float64).contiguous(memory_format=torch.channels_last)  # 49 pixels
    assert torch.allclose(batched_gram(odd), torch.bmm(odd.reshape(2, 4, -1), odd.reshape(2, 4, -1).mT))


# ---- on a worker: a batch computed at once, recorded run by run; a failed batch's runs go alone ----


def _worker_psets(tmp_path, count: int):
    return [
        {**pset(k, learning_rate=1.0 + k), "_calc_dir": str(tmp_path), "_run_id": "r", "_pset_hash": f"h{k}"}
        for k in range(count)
    ]


def test_a_batch_on_a_worker_leaves_every_run_its_own_row(tmp_path, monkeypatch):
    from gpulab.studies import task

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    psets = _worker_psets(tmp_path, 3)
    rows = task.run_batch(task.run_pset, psets)
    assert [r["status_"] for r in rows] == ["ok"] * 3
    assert {r["batch_runs_"] for r in rows} == {3} and len({r["batch_"] for r in rows}) == 1
    assert len({r["final_loss_"] for r in rows}) == 3 and all(len(r["loss_curve_"]) == 2 for r in rows)
    for p, r in zip(psets, rows, strict=True):
        assert (tmp_path / p["_pset_id"] / "output.png").is_file() and r["output_"] == f"{p['_pset_id']}/output.png"
        assert r["timed_s_"] == pytest.approx(r["batch_timed_s_"] / 3, abs=1e-3) and r["wall_s_"] >= r["timed_s_"]
        assert (tmp_path / p["_pset_id"] / "row.json").is_file()  # resume reads it run by run
    assert not task._BATCHED and not task._BATCH_NOTES


def test_a_failed_batch_runs_its_runs_alone(tmp_path, monkeypatch):
    from gpulab.studies import task

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")

    def broken(psets, device):
        raise RuntimeError("out of memory in the batch")

    monkeypatch.setattr(task, "_batch_here", broken)
    psets = _worker_psets(tmp_path, 2)
    rows = task.run_batch(task.run_pset, psets)
    assert [r["status_"] for r in rows] == ["ok", "ok"]  # each run went alone and finished
    assert all("its batch of 2 failed (RuntimeError: out of memory in the batch); run alone" in r["batch_note_"]
               for r in rows)  # fmt: skip
    assert all("batch_runs_" not in r for r in rows)
    assert "out of memory" in (tmp_path / psets[0]["_pset_id"] / "batch-error.txt").read_text()


# ---- the report's line on the GPU's arithmetic limit ----


def _run(**values):
    fields = {"status": "ok", "device": "gpu0 GPU-1", "gpu_name": "NVIDIA H200", "precision": Precision.TF32,
              "flops_per_iteration": 430.7e9, "steps_run": 1000, "timed_s": 2.1, "batch_runs": 32}  # fmt: skip
    return SimpleNamespace(**{**fields, **values})


def test_the_work_line_sets_the_rate_against_the_datasheet():
    line = arithmetic.work_line([_run(), _run(timed_s=2.2), _run(batch_runs=1, timed_s=2.8)])
    assert line is not None and line.startswith("Work per run 431 TFLOP (430.7 GFLOP per iteration")
    assert "196 TFLOP/s per GPU (median run), 40 % of the NVIDIA H200's dense TF32 rate (494.7 TFLOP/s)" in line
    assert "batched 32 per batch: 2.15 s per run; one at a time: 2.8 s per run" in line
    unknown = arithmetic.work_line([_run(gpu_name="Mystery GPU")])
    assert "(no datasheet rate for the Mystery GPU at tf32)" in str(unknown)
    assert arithmetic.work_line([_run(device="cpu0")]) is None  # CPU runs: no GPU limit to compare with
    assert arithmetic.work_line([_run(flops_per_iteration=None)]) is None


def test_parsers_of_the_command_line_say_the_fix():
    from gpulab.studies.commands import _auto_or_count

    with pytest.raises(argparse.ArgumentTypeError, match="'0' is not auto or a whole number ≥ 1"):
        _auto_or_count("0")


def test_a_second_psweep_call_keeps_the_first_runs_vary_label(tmp_path, monkeypatch):
    """A probe (batching's or packing's) and the rest are two psweep calls in one session; the first call's rows
    keep their _vary label (psweep would blank it), which the report's per-parameter grids group by."""
    import pandas as pd

    from gpulab.studies import runner

    monkeypatch.setattr(runner, "run_pset", lambda p: {"status_": "ok"})
    psets = [{**pset(k, learning_rate=k), "_vary": "learning_rate" if k < 2 else "tv_weight"} for k in range(4)]
    df = runner._psweep_run(psets[:2], tmp_path, pd.DataFrame(dtype=object))
    df = runner._psweep_run(psets[2:], tmp_path, df)
    assert list(df["_vary"]) == ["learning_rate", "learning_rate", "tv_weight", "tv_weight"]


def test_a_sizing_record_round_trips_through_sessions_json():
    from gpulab.records import Sizing

    sizing = Sizing("batch_runs", "auto", 23, "memory holds 245", probe_runs=8)
    assert sizing.to_json() == {"asked": "auto", "batch_runs": 23, "why": "memory holds 245", "probe_runs": 8}
    assert Sizing.from_json("batch_runs", sizing.to_json()) == sizing
    assert Sizing.from_json("batch_runs", {}) is None and Sizing.from_json("per_gpu", {"per_gpu": True}) is None


def test_a_probe_is_a_typed_record_and_sessions_json_keeps_its_shape():
    """A packing probe is written as the mapping sessions.json always held (four figures, in that order), and a
    session an older gpulab wrote reads back into the records; a figure it lacks or cannot read is None."""
    from gpulab.records import BatchProbe, PackingProbe, Sizing

    figures = {"footprint_mib": 20000.0, "total_mib": 81559.0, "busy": 0.6, "run_s": 1.0}
    held = {"asked": "auto", "per_gpu": 3, "why": "memory holds 3", "probe": [figures], "probe_runs": 2}
    sizing = Sizing.from_json("per_gpu", held)
    assert sizing is not None and sizing.probe == (PackingProbe(20000.0, 81559.0, 0.6, 1.0),)
    assert json.dumps(sizing.to_json()) == json.dumps(held)
    odd = Sizing.from_json("per_gpu", {**held, "probe": [{"footprint_mib": "big", "busy": 0.5}, "junk"]})
    assert odd is not None and odd.probe == (PackingProbe(None, None, 0.5, None),)
    run = batching.probe_from({"status_": "ok", "batch_memory_mib_": 800.0, "batch_runs_": 4, "gpu_total_mib_": 1000.0,
                               "gpu_context_mib_": 200.0, "timed_s_": float("nan")})  # fmt: skip
    assert run == BatchProbe(True, None, 800.0, 4.0, 1000.0, 200.0) and run.memory == (200.0, 800.0)
    assert BatchProbe.from_json(run.to_json()) == run and batching.probe_from({}).memory is None


def test_per_gpu_has_one_grammar_for_run_and_worker():
    from gpulab.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["study", "worker", "tcp://h:8786", "--per-gpu", "3"]).runs_per_gpu == 3
    assert parser.parse_args(["study", "run", "neural-style", "--per-gpu", "auto"]).runs_per_gpu == "auto"
    from gpulab.studies.commands import _worker_runs_per_gpu

    with pytest.raises(argparse.ArgumentTypeError, match="auto is sized by `gpulab study run`"):
        _worker_runs_per_gpu("auto")
    with pytest.raises(argparse.ArgumentTypeError, match="'0' is not auto or a whole number ≥ 1"):
        _worker_runs_per_gpu("0")
