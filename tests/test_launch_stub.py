"""A tiny stand-in workload for the launcher tests: nn.Linear(4, 2) trained with SGD on fixed random data.

Child processes (DDP ranks, sweep runs) import it as `test_launch_stub:build` (the tests put tests/ on
PYTHONPATH). Its data and initial weights follow from cfg.seed alone, so a test can rebuild exactly what each
rank trained on; finish() returns the weights after training.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpulab.records import RunConfig

torch = pytest.importorskip("torch")

BUILDER = "test_launch_stub:build"
DEFAULT_BATCH = 8
STEPS = {"tiny": 5, "quick": 10, "standard": 20, "full": 50}


def stub_data(seed: int, batch: int) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(1000 + seed)
    return torch.randn(batch, 4, generator=gen), torch.randn(batch, 2, generator=gen)


def stub_model(seed: int) -> Any:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 2)


class LinearSession:
    def __init__(self, cfg: RunConfig, device: str) -> None:
        self.batch = cfg.batch or DEFAULT_BATCH
        self.model: Any = stub_model(cfg.seed).to(device)
        x, y = stub_data(cfg.seed, self.batch)
        self.x, self.y = x.to(device), y.to(device)
        self.lr = float(cfg.params.get("learning_rate", 0.1))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=self.lr)
        self.samples_per_step = self.batch
        self.steps = cfg.steps or STEPS[cfg.size]
        self.info: dict[str, Any] = {"data": "synthetic", "model": "linear 4->2", "lr_used": self.lr}

    def wrap(self, wrapper: Any) -> None:
        self.model = wrapper(self.model)

    def step(self) -> Any:
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def finish(self) -> dict[str, Any]:
        module = getattr(self.model, "module", self.model)
        weights = torch.cat([p.detach().flatten().cpu() for p in module.parameters()])
        return {"weights": [float(v) for v in weights]}


class InputSession(LinearSession):
    """Optimises an input rather than a model (like style transfer): no model to wrap."""

    def __init__(self, cfg: RunConfig, device: str) -> None:
        super().__init__(cfg, device)
        self.model = None


def build(cfg: RunConfig, device: str) -> Any:
    if cfg.workload == "stub":
        return LinearSession(cfg, device)
    if cfg.workload == "stub_input":
        return InputSession(cfg, device)
    raise ValueError(f"unknown stub workload {cfg.workload!r}")


def test_stub_trains_and_reports_weights():
    s = build(RunConfig("stub", size="tiny"), "cpu")
    before = s.finish()["weights"]
    loss = [float(s.step()) for _ in range(5)]
    assert loss[-1] < loss[0] and s.finish()["weights"] != before
    assert s.samples_per_step == DEFAULT_BATCH and s.steps == STEPS["tiny"]
