"""The precisions the workload rows train in on these GPUs, recorded first so every row reads against it."""

import pytest

from gpulab.records import Check
from gpulab.validation.expectations import SPEEDUP_WORKLOADS


@pytest.mark.gpu
def test_precision_plan(lab, verdict):
    plan = lab.precision_plan
    if plan is None:
        verdict(Check("precision.plan", "skip", "no GPU to plan for"))
    choices = {w: plan.training(w) for w in SPEEDUP_WORKLOADS}
    shown = "; ".join(f"{w} {c.precision}" for w, c in choices.items())
    name = plan.architecture_name
    how = f"forced to {name} (--precision-plan)" if plan.forced else f"{name} ({plan.basis})"
    evidence = {
        "plan": plan.to_dict(),
        "torch": {w: vars(c) for w, c in choices.items()},
        "tensorflow": {w: vars(plan.training(w, "tensorflow")) for w in SPEEDUP_WORKLOADS},
    }
    verdict(Check("precision.plan", "pass", f"{how}: {shown}", evidence))
