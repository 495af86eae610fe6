"""Rows several validate/ tests judge: measured the first time a test asks, recorded in the report once.

The speedup rows (one GPU over the CPU) need the CPU rows and the one-GPU row; the scaling rows (N GPUs over one)
need the same one-GPU row; "GPUs perform alike" needs every GPU's matmul row. Each test asks a fixture for the rows
it judges, so it finds them whatever ran before it (alone, `-k`, another order), and a row already measured is
never measured again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable
from dataclasses import asdict
from functools import partial

import pytest

from gpulab.launch.spec import Launch
from gpulab.names import Framework, Launcher
from gpulab.records import Result, RunConfig
from gpulab.validation.session import Lab

# (framework, the run's whole config as canonical JSON): rows are shared only between identical runs
BaselineKey = tuple[Framework, str]
Measure = Callable[[RunConfig, Framework], Result]


def baseline_key(cfg: RunConfig, framework: Framework) -> BaselineKey:
    return framework, json.dumps(asdict(cfg), sort_keys=True, default=str)


def start(launch: Launch) -> Result:
    from gpulab.launch.dispatch import start as dispatch  # the frameworks load only when a row is measured

    return dispatch(launch)


def measure_on_first_gpu(cfg: RunConfig, framework: Framework) -> Result:
    """The run on the first selected GPU (cuda:0), by the framework's one-GPU launcher."""
    return start(Launch(cfg, framework=framework, launcher=Launcher.GPU, index=0))


class MeasuredRows:
    """Rows measured once per validation run, by key; a failed measurement raises and is not kept."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.rows: dict[Hashable, Result] = {}

    def get(self, key: Hashable, measure: Callable[[], Result]) -> Result:
        row = self.rows.get(key)
        if row is None:
            row = measure()
            self.lab.record_result(row)
            self.rows[key] = row
        return row


class OneGpuBaselines:
    """The one-GPU row per (framework, config) for one validation run: `baselines(cfg, framework)`."""

    def __init__(self, lab: Lab, measure: Measure = measure_on_first_gpu, rows: MeasuredRows | None = None) -> None:
        self.measure = measure
        self.rows = rows or MeasuredRows(lab)

    def __call__(self, cfg: RunConfig, framework: Framework = Framework.TORCH) -> Result:
        return self.rows.get(("gpu", *baseline_key(cfg, framework)), lambda: self.measure(cfg, framework))


class CpuRows:
    """The CPU rows of a config: one thread and all threads (`rows(cfg, framework)` -> [one, all])."""

    def __init__(self, rows: MeasuredRows) -> None:
        self.rows = rows

    def __call__(
        self, cfg: RunConfig, framework: Framework = Framework.TORCH, threads: int | None = None
    ) -> list[Result]:
        counts = [threads] if threads is not None else sorted({1, os.cpu_count() or 1})
        launches = [Launch(cfg, framework=framework, launcher=Launcher.CPU, threads=n) for n in counts]
        return [
            self.rows.get(("cpu", launch.threads, *baseline_key(cfg, framework)), partial(start, launch))
            for launch in launches
        ]


@pytest.fixture(scope="session")
def measured_rows(lab: Lab) -> MeasuredRows:
    """Every shared row of this validation run, by key."""
    return MeasuredRows(lab)


@pytest.fixture(scope="session")
def one_gpu_baseline(lab: Lab, measured_rows: MeasuredRows) -> OneGpuBaselines:
    """The one-GPU row for a run config and framework, measured on first use and recorded in the report once."""
    return OneGpuBaselines(lab, rows=measured_rows)


@pytest.fixture(scope="session")
def cpu_rows(measured_rows: MeasuredRows) -> CpuRows:
    """The CPU rows (one thread, all threads) for a run config and framework, measured on first use."""
    return CpuRows(measured_rows)
