"""From a `Launch` to a Result: the framework's backend runs it, or the sweep runs it on the backend's workers."""

from __future__ import annotations

from gpulab.errors import GpulabError
from gpulab.launch import backends
from gpulab.launch.spec import Launch
from gpulab.names import Framework, Launcher
from gpulab.records import Result


def check_launch(launch: Launch) -> backends.Backend:
    """The backend for `launch`, once the launcher and the batch options make sense for it."""
    backend = backends.get(launch.framework)
    if launch.builder is not None and not backend.takes_builder:
        raise GpulabError(f"--builder builds torch workloads; {backend.name} takes none: drop --builder")
    if launch.epochs is not None and launch.launcher not in backend.epoch_launchers:
        launchers = ", ".join(backend.epoch_launchers) or "none yet"
        raise GpulabError(
            f"--epochs trains with --framework {backend.name} --launcher {launchers}, not --launcher {launch.launcher}"
        )
    if launch.launcher == Launcher.SWEEP:
        return backend
    if launch.launcher not in backend.launchers:
        offered = [f for f in backends.available() if launch.launcher in _launchers(f)]
        hint = f" (--launcher {launch.launcher} is offered by --framework {' or '.join(offered)})" if offered else ""
        raise GpulabError(
            f"--framework {backend.name} runs --launcher {', '.join(backend.launchers)}, not {launch.launcher}{hint}"
        )
    if launch.launcher.one_device:
        if launch.batch_policy != "per_device" or launch.scale_lr:
            raise GpulabError(
                f"--batch-policy/--scale-lr split a batch over devices; --launcher {launch.launcher} has one"
            )
        if launch.gpus != 1:
            raise GpulabError(f"--launcher {launch.launcher} runs on one device; drop --gpus or use --launcher ddp")
    return backend


def _launchers(framework: Framework) -> tuple[Launcher, ...]:
    try:
        return backends.get(framework).launchers
    except GpulabError:
        return ()


def start(launch: Launch) -> Result:
    backend = check_launch(launch)
    if launch.launcher != Launcher.SWEEP:
        return backend.run(launch)
    from gpulab.launch.sweep import run_sweep

    return run_sweep(launch)
