"""Scaling: one GPU against all selected GPUs with DDP, DataParallel and a sweep of independent runs.

Both sides of a comparison are measured in the same conditions: DDP's one-GPU and N-GPU windows alternate in one job
at the per-GPU batch the bound was measured at; the sweep's one-GPU and N-GPU sweeps alternate (ABBA) after one
unrecorded run per GPU has warmed the caches both would otherwise pay unequally. An efficiency is judged by its
interval: below the floor fails, above passes, straddling is measured again, then marginal.
"""

from dataclasses import replace

import pytest

from gpulab.launch import run_dataparallel, run_ddp_pair, run_sweep
from gpulab.report import spread
from gpulab.validation import remeasure, verdicts
from gpulab.validation.expectations import scaling_plans
from gpulab.workloads.base import RunConfig

pytest.importorskip("torch", reason="torch is not installed: install gpulab[torch] to run the workloads")


def plans(nvlink=True, precision_plan=None):
    return {f"{p.launcher}-{p.workload}": p for p in scaling_plans(nvlink, precision_plan)}


def _ddp(cfg, n, rounds):
    """DDP 1 vs n in one job: (one-GPU row, n-GPU row), `rounds` times the plan's steps and windows each."""
    return run_ddp_pair(replace(cfg, steps=cfg.steps * rounds if cfg.steps else None), n, windows=8 * rounds)


def _sweep_round(lab, cfg, n, k):
    """One round of the sweep's ABBA: (one-GPU sweep, n-GPU sweep) wall seconds, in the round's order."""
    where = lab.options.report_dir
    order = ("serial", "many") if k % 2 == 0 else ("many", "serial")
    rows = {}
    for side in order:
        gpus = 1 if side == "serial" else n
        rows[side] = run_sweep(cfg, gpus, where / f"sweep-{gpus}gpu", runs=n)
        lab.record_result(rows[side])
    return rows["serial"], rows["many"]


@pytest.mark.multi_gpu
@pytest.mark.live
@pytest.mark.parametrize("plan_id", list(plans()))
def test_scaling(lab, verdict, workload_size, one_gpu_baseline, plan_id):
    plan = plans(lab.nvlink, lab.precision_plan)[plan_id]
    cfg = RunConfig(plan.workload, precision=plan.precision, channels_last=plan.channels_last, size=workload_size)
    n = len(lab.gpus)
    name = f"scaling.{plan.launcher}[{plan.workload},{n}]"
    if plan.launcher == "sweep":
        # One unrecorded run per GPU first: compile and disk caches warm for both sides, so neither pays them alone.
        run_sweep(cfg, n, lab.options.report_dir / "sweep-warm-up", runs=n, telemetry=False)
        serial: list[float] = []
        many: list[float] = []

        def sweep_round():
            s, m = _sweep_round(lab, cfg, n, len(serial))
            serial.append(s.seconds)
            many.append(m.seconds)

        def judge():
            # efficiency = one-GPU seconds / (n x n-GPU seconds): the parallel side's time is the denominator
            eff = spread.of_ratio(serial, many, 1 / n, "fraction")
            text = (
                f"{n} {plan.workload} runs, one-GPU and {n}-GPU sweeps alternated: "
                f"{spread.text(spread.of_windows(serial), lambda v: f'{v:.1f}')} s on one GPU, "
                f"{spread.text(spread.of_windows(many), lambda v: f'{v:.1f}')} s on {n}"
            )
            return verdicts.efficiency(lab, name, text, eff, n, plan.threshold, None)

        for _ in range(2):
            sweep_round()
        verdict(remeasure.settle(judge, sweep_round))
        return
    if plan.launcher == "ddp":
        cfg = replace(cfg, batch=plan.batch or cfg.batch, steps=plan.steps or cfg.steps)
        base, many = _ddp(cfg, n, 1)
        for row in (base, many):
            lab.record_result(row)

        def judge():
            eff = spread.of_ratio(spread.windows_of(many), spread.windows_of(base), 1 / n, "fraction")
            text = (
                f"{plan.workload} DDP at {many.batch}/GPU, one-GPU and {n}-GPU windows interleaved: "
                f"{many.value:.4g} {many.unit} on {n} GPUs vs {base.value:.4g} on one"
            )
            return verdicts.efficiency(lab, name, text, eff, n, plan.threshold, many)

        def again():
            more_base, more_many = _ddp(cfg, n, remeasure.AGAIN_FACTOR)
            remeasure.merge_into(base, more_base)
            remeasure.merge_into(many, more_many)

        verdict(remeasure.settle(judge, again))
        return
    base = one_gpu_baseline(cfg)  # the speedup test's one-GPU row when it ran first, else measured now
    # DataParallel is ~10x slower than DDP (one process feeds every GPU): a few steps show it.
    many = run_dataparallel(replace(cfg, steps=10), n)
    lab.record_result(many)
    eff = spread.of_ratio(spread.windows_of(many), spread.windows_of(base), 1 / n, "fraction")
    text = f"{plan.workload} {plan.launcher}: {many.value:.4g} {many.unit} on {n} GPUs vs {base.value:.4g} on one"
    verdict(verdicts.efficiency(lab, name, text, eff, n, plan.threshold, many))
