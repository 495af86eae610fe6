"""A run's settings checked without running it, for a study's pre-flight (gpulab.studies.preflight).

`check_run` asks the run's workload for its settings (the function both frameworks' builders call first) inside
`checking()`: the parameters and the files they name are checked as the run would check them, but nothing is built
or downloaded. A named download (`imagenet`, a URL) is checked where it would come from instead; where the runs go to
another host's workers (`--scheduler`), the files a parameter names are that host's and are not looked at here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from gpulab.records import RunConfig

_MODE: ContextVar[str | None] = ContextVar("gpulab_checking", default=None)  # None | "here" | "elsewhere"


@contextlib.contextmanager
def checking(files_here: bool = True) -> Iterator[None]:
    token = _MODE.set("here" if files_here else "elsewhere")
    try:
        yield
    finally:
        _MODE.reset(token)


def active() -> bool:
    """Whether settings are being checked, not used: downloads are checked, not fetched."""
    return _MODE.get() is not None


def files_here() -> bool:
    """Whether the files a parameter names are this host's to check (always, outside `checking`)."""
    return _MODE.get() != "elsewhere"


def check_run(cfg: RunConfig, *, files_here: bool = True) -> None:
    """The run's settings as its workload checks them before building (a GpulabError naming the parameter)."""
    from gpulab.workloads.registry import REGISTRY, load

    declared = REGISTRY.get(cfg.workload)
    if declared is None or declared.settings is None:
        return
    with checking(files_here):
        load(declared.settings, f"the settings of {cfg.workload}")(cfg)
