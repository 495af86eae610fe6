"""The style-transfer step under torch.compile (`loop: compile`) follows the eager loss trajectory, and a study's
worker compiles it once whatever the run's weights. On the CPU the compiled graph runs through AOTAutograd's eager
backend (the graph dynamo captures and the backward it derives; inductor's code generation takes minutes on two
cores and is the GPU measurement's part: tests/device/study_packing.sh)."""

from __future__ import annotations

import pytest

from gpulab.errors import GpulabError
from gpulab.workloads import RunConfig, build

torch = pytest.importorskip("torch")


def _trajectory(loop: str, steps: int = 4, **params: float) -> list[float]:
    cfg = RunConfig(
        "style_transfer", size="tiny", seed=3, params={"width": 32, "iterations": steps, "loop": loop, **params}
    )
    session = build(cfg, "cpu")
    assert session.info["loop"] == loop
    return [float(session.step()) for _ in range(steps)]


@pytest.mark.slow  # about a minute: dynamo and AOTAutograd trace VGG19's forward and backward once
def test_a_compiled_step_follows_the_eager_trajectory_and_compiles_once_for_every_runs_weights(monkeypatch):
    from torch._dynamo.testing import CompileCounterWithBackend

    from gpulab.workloads.style_transfer import loops as style_loops

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setitem(
        style_loops._COMPILED, ("style_loss", "compile"), torch.compile(style_loops.style_loss, backend=counter)
    )
    for weights in ({}, {"style_weight": 7.0, "tv_weight": 3.0, "content_weight": 2.0, "learning_rate": 4.0}):
        eager, compiled = _trajectory("eager", **weights), _trajectory("compile", **weights)
        assert compiled == pytest.approx(eager, rel=1e-5) and compiled[-1] < compiled[0]
    assert counter.frame_count == 1  # the second run's other weights reused the first run's graph


def test_an_unknown_loop_is_one_line():
    with pytest.raises(GpulabError, match="loop='jit' is invalid; expected one of eager, compile, compile-graphs"):
        build(RunConfig("style_transfer", size="tiny", params={"loop": "jit"}), "cpu")


def test_auto_runs_the_eager_loop_on_a_cpu_and_compile_graphs_on_a_gpu():
    from gpulab.workloads.style_transfer.loops import effective_loop

    session = build(RunConfig("style_transfer", size="tiny", params={"width": 32, "loop": "auto"}), "cpu")
    assert session.info["loop"] == "eager"
    assert [effective_loop("auto", d) for d in ("cuda", "cuda:1", "cpu")] == [
        "compile-graphs",
        "compile-graphs",
        "eager",
    ]
    assert effective_loop("compile", "cpu") == "compile"


def test_a_step_whose_cuda_graph_fails_to_record_goes_on_compiled_without_graphs(monkeypatch):
    """torch's CUDA-graph trees can refuse to record a step (pytorch/pytorch#154306): the run goes on without
    graphs and its facts say so; any other error is the run's."""
    from gpulab.workloads.style_transfer import loops as style_loops

    monkeypatch.setitem(
        style_loops._COMPILED, ("style_loss", "compile"), style_loops.style_loss
    )  # no inductor build on a CPU
    session = build(RunConfig("style_transfer", size="tiny", seed=3, params={"width": 32, "iterations": 3}), "cpu")
    calls = []

    def refuses(*args):
        calls.append(1)
        raise RuntimeError("TODO: graph recording observed an input tensor deallocate during graph recording")

    session._graphs, session._loss = True, refuses
    first = float(session.step())
    assert len(calls) == 1 and session.info["loop"] == "compile" and "failed to record" in session.info["loop_note"]
    assert float(session.step()) < first and not session._graphs
    session._graphs, session._loss = True, lambda *a: (_ for _ in ()).throw(RuntimeError("CUDA out of memory"))
    with pytest.raises(RuntimeError, match="out of memory"):
        session.step()


@pytest.mark.slow  # about a minute: as above, for the batched loss
def test_a_workers_batches_of_every_size_share_one_compiled_loss(monkeypatch):
    from torch._dynamo.testing import CompileCounterWithBackend

    from gpulab.workloads.style_transfer import loops as style_loops
    from gpulab.workloads.style_transfer.batch import BatchedStyleSession

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    key = ("batched_style_loss", "compile")
    monkeypatch.setitem(style_loops._COMPILED, key, torch.compile(style_loops.batched_style_loss, backend=counter))

    def losses(loop: str, runs: int) -> list[float]:
        cfgs = [
            RunConfig("style_transfer", size="tiny", seed=k, params={"width": 32, "loop": loop, "tv_weight": 1.0 + k})
            for k in range(runs)
        ]
        session = BatchedStyleSession(cfgs, "cpu")
        for _ in range(3):
            session.step()
        return [loss for step in session.run_losses for loss in step.tolist()]

    for runs in (4, 7, 3):  # the probe's batch, a sized one, a shorter last
        assert losses("compile", runs) == pytest.approx(losses("eager", runs), rel=1e-5)
    assert counter.frame_count == 1  # one graph: the batch dimension is not specialised on
