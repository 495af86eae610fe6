"""Scaling: one GPU against all selected GPUs with DDP, DataParallel and a sweep of independent runs."""

from dataclasses import replace

import pytest

from gpulab.launch import run_dataparallel, run_ddp, run_sweep
from gpulab.validation import verdicts
from gpulab.validation.expectations import scaling_plans
from gpulab.workloads.base import RunConfig

pytest.importorskip("torch", reason="torch is not installed: install gpulab[torch] to run the workloads")

LAUNCH = {"ddp": run_ddp, "dataparallel": run_dataparallel}


def plans(nvlink=True, precision_plan=None):
    return {f"{p.launcher}-{p.workload}": p for p in scaling_plans(nvlink, precision_plan)}


@pytest.mark.multi_gpu
@pytest.mark.live
@pytest.mark.parametrize("plan_id", list(plans()))
def test_scaling(lab, verdict, workload_size, one_gpu_baseline, plan_id):
    plan = plans(lab.nvlink, lab.precision_plan)[plan_id]
    cfg = RunConfig(plan.workload, precision=plan.precision, channels_last=plan.channels_last, size=workload_size)
    n = len(lab.gpus)
    if plan.launcher == "sweep":
        # The baseline of a sweep is the same N runs on one GPU, one after another, process start included.
        serial = run_sweep(cfg, 1, lab.options.report_dir / "sweep-1gpu", runs=n)
        many = run_sweep(cfg, n, lab.options.report_dir / f"sweep-{n}gpu", runs=n)
        for r in (serial, many):
            lab.record_result(r)
        speedup = serial.seconds / many.seconds
        label = f"{n} {plan.workload} runs: {serial.seconds:.1f} s on one GPU, {many.seconds:.1f} s on {n}"
    else:
        if plan.launcher == "ddp":
            base = run_ddp(cfg, 1)  # DDP on one GPU: efficiency then measures scaling, not DDP's own overhead
            lab.record_result(base)
        else:
            base = one_gpu_baseline(cfg)  # the speedup test's one-GPU row when it ran first, else measured now
        # DataParallel is ~10x slower than DDP (one process feeds every GPU): a few steps show it.
        many = LAUNCH[plan.launcher](replace(cfg, steps=10) if plan.launcher == "dataparallel" else cfg, n)
        lab.record_result(many)
        speedup = many.value / base.value
        label = f"{plan.workload} {plan.launcher}: {many.value:.4g} {many.unit} on {n} GPUs vs {base.value:.4g} on one"
    name = f"scaling.{plan.launcher}[{plan.workload},{n}]"
    verdict(verdicts.efficiency(lab, name, label, speedup, n, plan.threshold))
