"""One-GPU baseline rows for validate/: measured the first time a test asks, recorded in the report once.

The speedup rows (one GPU over the CPU) and the scaling rows (N GPUs over one) need the same one-GPU row. Each
test asks the `one_gpu_baseline` fixture for it with the run's config and framework, so a test finds its baseline
whatever ran before it (alone, `-k`, another order), and a row already measured is never measured again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict

import pytest

from gpulab.report.model import Result
from gpulab.validation.session import Lab
from gpulab.workloads.base import RunConfig

# (framework, the run's whole config as canonical JSON): rows are shared only between identical runs
BaselineKey = tuple[str, str]
Measure = Callable[[RunConfig, str], Result]


def baseline_key(cfg: RunConfig, framework: str) -> BaselineKey:
    return framework, json.dumps(asdict(cfg), sort_keys=True, default=str)


def measure_on_first_gpu(cfg: RunConfig, framework: str) -> Result:
    """The run on the first selected GPU (cuda:0), by the framework's one-GPU launcher."""
    if framework == "tensorflow":
        from gpulab.launch.tf_launch import run_tf_gpu

        return run_tf_gpu(cfg, 0)
    from gpulab.launch import run_gpu  # torch loads only when a baseline is measured

    return run_gpu(cfg, 0)


class OneGpuBaselines:
    """The one-GPU row per (framework, config) for one validation run: `baselines(cfg, framework)`."""

    def __init__(self, lab: Lab, measure: Measure = measure_on_first_gpu) -> None:
        self.lab = lab
        self.measure = measure
        self.rows: dict[BaselineKey, Result] = {}

    def __call__(self, cfg: RunConfig, framework: str = "torch") -> Result:
        key = baseline_key(cfg, framework)
        row = self.rows.get(key)
        if row is None:
            # A failed measurement raises and is not kept: the test that asked fails with its error.
            row = self.measure(cfg, framework)
            self.lab.record_result(row)
            self.rows[key] = row
        return row


@pytest.fixture(scope="session")
def one_gpu_baseline(lab: Lab) -> OneGpuBaselines:
    """The one-GPU row for a run config and framework, measured on first use and recorded in the report once."""
    return OneGpuBaselines(lab)
