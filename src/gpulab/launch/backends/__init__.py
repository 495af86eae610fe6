"""One backend per framework: how it checks a run, counts devices, pins a process to a GPU, and runs.

The launchers (gpulab.launch.sweep, `gpulab run`) never name a framework: they ask the backend. The built-in
backends are torch and tensorflow; a package adds its own by declaring an entry point in the group
`gpulab.backends` whose object is a `Backend`:

    [project.entry-points."gpulab.backends"]
    jax = "mypkg.gpulab_backend:BACKEND"
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from gpulab import names
from gpulab.errors import GpulabError, UnknownValue
from gpulab.hw import cuda_visible

if TYPE_CHECKING:
    from gpulab.launch.spec import Launch
    from gpulab.records import Result, RunConfig

ENTRY_POINT_GROUP = "gpulab.backends"
_BUILT_IN = {
    names.Framework.TORCH: "gpulab.launch.backends.torch_backend:BACKEND",
    names.Framework.TENSORFLOW: "gpulab.launch.backends.tensorflow_backend:BACKEND",
}


class Backend:
    """What the launch layer needs to know about a framework. Subclasses set the class attributes."""

    name: str = ""
    launchers: tuple[names.Launcher, ...] = ()  # what `gpulab run --launcher` runs with it (a sweep: every backend)
    sweep_worker: str = ""  # module started once per sweep run: --config MESSAGE --out RESULT --index ...
    takes_builder: bool = False  # accepts --builder MODULE:FUNCTION
    pins_by_uuid: bool = False  # names a sweep run's GPU by UUID (else by CUDA ordinal)
    epoch_launchers: tuple[names.Launcher, ...] = ()  # the launchers that train in epochs (`gpulab run --epochs`)

    def prepare(self) -> None:
        """Load what the parent process needs before the first step (once the command line is checked)."""

    def check(self, cfg: RunConfig, builder: str | None) -> None:
        """Refuse what cannot run, before any process starts."""

    def count_devices(self) -> int:
        """GPUs this framework sees here (0: none, so multi-device launchers run CPU processes)."""
        return 0

    def gpu_uuid(self, ordinal: int) -> str | None:
        """The UUID of GPU `ordinal` as this framework numbers them, when it can tell."""
        return None

    def pin(self, ordinal: int) -> str:
        """The CUDA_VISIBLE_DEVICES value that leaves a process only GPU `ordinal`."""
        return (self.gpu_uuid(ordinal) if self.pins_by_uuid else None) or str(ordinal)

    def nvml_indices(self, ordinals: Sequence[int]) -> list[int]:
        """NVML indices (telemetry) of GPUs `ordinals`: through a numeric CUDA_VISIBLE_DEVICES, else the same."""
        return cuda_visible.nvml_indices_by_number(ordinals) or list(ordinals)

    def run(self, launch: Launch) -> Result:
        """One `gpulab run` with one of `launchers`."""
        raise GpulabError(f"{self.name} runs no launcher in-process; use `gpulab sweep --framework {self.name}`")


def _load(spec: str, name: str) -> Backend:
    module_name, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise GpulabError(f"the {name} launch backend ({spec}) cannot be loaded: {err}; reinstall its package") from err
    backend = obj() if isinstance(obj, type) else obj
    if not isinstance(backend, Backend) or backend.name != name:
        raise GpulabError(f"{spec} is not a gpulab launch backend named {name!r} (gpulab.launch.backends.Backend)")
    return backend


def _declared() -> dict[names.Framework, str]:
    """Each framework's backend (MODULE:OBJECT): the built-in ones, then those packages declare, whose names are
    read here (a name a report could not hold is refused, naming the entry point)."""
    found = dict(_BUILT_IN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        what = f"the {ENTRY_POINT_GROUP} entry point of {ep.value}: its name"
        found.setdefault(names.Framework.parse(ep.name, what), ep.value)  # a package cannot replace a built-in one
    return found


def available() -> tuple[names.Framework, ...]:
    """Framework names `--framework` accepts: the built-in ones first, then those packages declare."""
    declared = _declared()
    return (*names.FRAMEWORKS, *sorted(set(declared) - set(names.FRAMEWORKS)))


def get(name: str) -> Backend:
    """The backend of framework `name`, or errors.UnknownValue with the frameworks offered."""
    declared = _declared()
    framework = next((f for f in declared if f == name), None)
    if framework is None:
        raise UnknownValue("framework", name, available())
    return _load(declared[framework], framework)
