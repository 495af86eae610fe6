"""The workloads gpulab knows, each declared once in its own folder: `WORKLOAD = Workload(...)` in its __init__.

The registry is found, not listed: every sub-package (or module) of this package that declares a `WORKLOAD`, then
every entry point of the group `gpulab.workloads` whose object is a `Workload` (a package adds its own that way):

    [project.entry-points."gpulab.workloads"]
    mlp = "mypkg.mlp:WORKLOAD"

Launchers, the epoch trainer, studies, the precision plan and the suite ask it what they need to know about a
workload instead of naming workloads. Reading it imports the workloads' declarations, never torch or TensorFlow.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from gpulab.errors import GpulabError, UnknownValue

ENTRY_POINT_GROUP = "gpulab.workloads"
PACKAGE = "gpulab.workloads"


@dataclass(frozen=True)
class Workload:
    """What the rest of gpulab asks about one workload. "MODULE:FUNCTION" texts are imported on first use, so
    declaring a workload costs no framework import."""

    name: str
    sizes: Mapping[str, tuple[int, int]]  # per gpulab.names.SIZES: (batch, steps); an optimised input's (width, steps)
    torch: str  # build(cfg: RunConfig, device: str) -> Session
    params: Mapping[str, Any]  # the parameters it takes (--param, a study's params) and their defaults
    tensorflow: str | None = None  # build(cfg, strategy) -> a session; None: torch only
    order: int = 100  # where it comes in listings and the suite's rows (the seeds' experiments first)
    # Epoch training: the validation metric and the recipe (cfg, val_fraction) -> gpulab.workloads.recipes.Recipe.
    metric: str = "accuracy"
    recipe: str | None = None  # None: no epochs
    # --framework tensorflow --epochs: (cfg, recipe) -> (keras model, its own optimiser's factory); None: torch only
    tf_epochs: str | None = None
    # It optimises an input (an image), not a model over a data set: no epochs, no MirroredStrategy, its own
    # optimiser, and a study writes the input it produced into the run's folder.
    optimises_input: bool = False
    speedup: bool = True  # the suite's CPU-vs-GPU speedup rows run it
    cpu_batch: int | None = None  # the batch of those CPU rows where the size's batch is too slow on a CPU
    autocast: bool = True  # trains in bf16/fp16 autocast where the GPU has it (else TF32 or fp32)
    channels_last_gains: bool = True  # NHWC feeds tensor cores (a single small channel never gains)
    data_set: str | None = None  # the published data set its runs train on (what synthetic data stands in for)
    imagenet_start: str | None = None  # the network whose ImageNet weights the published setup starts from
    start_param: str | None = None  # the parameter choosing those weights, where a run may record only it
    generated_data: str | None = None  # write(folder) -> None: a small stand-in data set for studies
    references: str | None = None  # (fixed, varied params) -> [(label, source, image)]: a study report's inputs
    # (cfg) -> its settings: the parameters and the files they name checked as both frameworks' builders check them
    # first, nothing built; a study checks every run with it before starting (gpulab.workloads.checking)
    settings: str | None = None
    # Runs that differ only in `batch_shared` parameters (and seed) optimised as one batch: (cfgs, device) -> a
    # session whose step() runs them all (a study's batch_runs); None: one run at a time
    batch: str | None = None
    batch_shared: frozenset[str] = frozenset()

    def builder(self, framework: str = "torch") -> Callable[..., Any]:
        spec = self.torch if framework == "torch" else self.tensorflow
        if spec is None:
            raise GpulabError(f"{self.name} has no {framework} version; use --framework torch")
        return load(spec, f"the {framework} builder of {self.name}")

    @property
    def epochs(self) -> bool:
        return self.recipe is not None


def load(spec: str, what: str) -> Any:
    """The object named by "MODULE:ATTRIBUTE"."""
    module_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise GpulabError(f"{what} ({spec}) cannot be loaded: {err}") from err


def _built_in() -> list[Workload]:
    """The `WORKLOAD` of every module and sub-package of this package: a workload is a folder whose __init__
    declares it (its modules are imported only when a builder, recipe or check is asked for)."""
    package = importlib.import_module(PACKAGE)
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        declared = getattr(importlib.import_module(f"{PACKAGE}.{info.name}"), "WORKLOAD", None)
        if isinstance(declared, Workload):
            found.append(declared)
    return found


def _declared(taken: set[str]) -> list[Workload]:
    found = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in taken:  # a package cannot replace a built-in workload
            continue
        declared = load(ep.value, f"the workload {ep.name!r}")
        if not isinstance(declared, Workload) or declared.name != ep.name:
            raise GpulabError(f"{ep.value} is not a gpulab workload named {ep.name!r} (gpulab.workloads.Workload)")
        found.append(declared)
    return found


class Registry(Mapping[str, Workload]):
    """Workload name -> Workload, read on first use, in `order` then by name."""

    def __init__(self) -> None:
        self._found: dict[str, Workload] | None = None

    def _all(self) -> dict[str, Workload]:
        if self._found is None:
            built_in = _built_in()
            every = built_in + _declared({w.name for w in built_in})
            self._found = {w.name: w for w in sorted(every, key=lambda w: (w.order, w.name))}
        return self._found

    def __getitem__(self, name: str) -> Workload:
        found = self._all().get(name)
        if found is None:
            raise UnknownValue("workload", name, self._all())
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def get(self, name: str, default: Any = None) -> Any:
        return self._all().get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def names(self, *having: str, **asked: Any) -> tuple[str, ...]:
        """The workloads that have the fields named (`names("tf_epochs")`) and the values asked
        (`names(speedup=True)`), in order."""
        return tuple(
            n
            for n, w in self._all().items()
            if all(getattr(w, k) for k in having) and all(getattr(w, k) == v for k, v in asked.items())
        )

    def with_framework(self, framework: str) -> tuple[str, ...]:
        return tuple(n for n, w in self._all().items() if framework == "torch" or w.tensorflow is not None)

    def forget(self) -> None:
        """Read the modules and entry points again on next use (a test that installs a workload)."""
        self._found = None


REGISTRY = Registry()
