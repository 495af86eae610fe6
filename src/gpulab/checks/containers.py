"""A GPU from inside a container: the NVIDIA container toolkit gives a container the host's GPUs.

`docker run --gpus all IMAGE nvidia-smi ...` (or Podman with the CDI device `nvidia.com/gpu=all`) lists the GPUs the
container sees; they must be the host's, by UUID. nvidia-smi itself comes from the host's driver, which the toolkit
mounts into the container, so any small glibc image will do.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpulab.records import Check, GpuInfo

RUNTIMES = ("auto", "docker", "podman", "none")
# Small, with glibc for the injected nvidia-smi; named in full so Podman needs no short-name resolution.
DEFAULT_IMAGE = "docker.io/library/debian:12-slim"
# The first run may pull the image.
DEFAULT_TIMEOUT_S = 300.0
CHECK_NAME = "containers.gpu_in_container"
QUERY = ("nvidia-smi", "--query-gpu=uuid,name", "--format=csv,noheader")
TURN_ON = "set gpulab_containers: true in the inventory and provision (ansible-playbook site.yml)"

Which = Callable[[str], str | None]


@dataclass(frozen=True)
class Engine:
    """The container engine to run the check with, or why there is none (`runtime` None)."""

    runtime: str | None
    missing: str = ""  # what is absent, in one line, when runtime is None
    explicit: bool = False  # asked for by name, so its absence is a failure, not a skip


def detect(requested: str, which: Which = shutil.which) -> Engine:
    """Resolve --container-runtime: auto runs only where the NVIDIA container toolkit (nvidia-ctk) and docker or
    podman are on PATH (docker first); docker/podman must be there; none turns the check off."""
    if requested not in RUNTIMES:
        raise ValueError(f"--container-runtime {requested!r}: use one of {', '.join(RUNTIMES)}")
    if requested == "none":
        return Engine(None, "the container check is off (--container-runtime none)")
    if requested != "auto":
        if which(requested) is None:
            return Engine(None, f"{requested} is not on PATH (--container-runtime {requested})", explicit=True)
        return Engine(requested, explicit=True)
    engines = [tool for tool in ("docker", "podman") if which(tool) is not None]
    absent = ([] if which("nvidia-ctk") else ["the NVIDIA container toolkit (nvidia-ctk)"]) + (
        [] if engines else ["docker or podman"]
    )
    if absent:
        return Engine(None, f"{' and '.join(absent)} not on PATH")
    return Engine(engines[0])


def command(runtime: str, image: str) -> list[str]:
    if runtime == "docker":
        return ["docker", "run", "--rm", "--gpus", "all", image, *QUERY]
    # Podman reaches the GPUs through the CDI spec (/etc/cdi/nvidia.yaml); SELinux labels would hide the devices.
    return ["podman", "run", "--rm", "--device", "nvidia.com/gpu=all", "--security-opt=label=disable", image, *QUERY]


def parse(stdout: str) -> list[tuple[str, str]]:
    """(uuid, name) per line of `nvidia-smi --query-gpu=uuid,name --format=csv,noheader`."""
    gpus = []
    for line in stdout.splitlines():
        uuid, sep, name = line.strip().partition(",")
        if sep and uuid.strip().startswith(("GPU-", "MIG-")):
            gpus.append((uuid.strip(), name.strip()))
    return gpus


def _tail(text: str, lines: int = 5) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(nothing on stderr)"


def _fix(runtime: str) -> str:
    if runtime == "docker":
        return (
            f"check that Docker knows the nvidia runtime (`docker info | grep -i runtimes`; {TURN_ON} adds it to "
            "/etc/docker/daemon.json) and that the host's `nvidia-smi` works"
        )
    return (
        f"check the CDI spec (`nvidia-ctk cdi list` must list nvidia.com/gpu=all; {TURN_ON}, or run "
        "`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` with the driver loaded) and the host's `nvidia-smi`"
    )


def gpu_in_container(
    host_gpus: Sequence[GpuInfo],
    requested: str = "auto",
    image: str = DEFAULT_IMAGE,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    which: Which = shutil.which,
) -> Check:
    """Run nvidia-smi in a container and compare the GPUs it lists with the host's, by UUID."""
    engine = detect(requested, which)
    if engine.runtime is None:
        if engine.explicit:
            return Check(CHECK_NAME, "fail", f"{engine.missing}: install it, or choose another --container-runtime")
        hint = "" if requested == "none" else f": {TURN_ON}, or pass --container-runtime none"
        return Check(CHECK_NAME, "skip", f"no GPU-in-container check: {engine.missing}{hint}")
    cmd = command(engine.runtime, image)
    shown = " ".join(cmd)
    host = {g.uuid: g.name for g in host_gpus}
    evidence: dict[str, object] = {"runtime": engine.runtime, "image": image, "command": shown, "host": host}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Check(
            CHECK_NAME,
            "fail",
            f"`{shown}` did not finish in {timeout_s:g} s: pull the image beforehand (`{engine.runtime} pull "
            f"{image}`) or give a local one with --container-image",
            evidence,
        )
    except OSError as err:
        return Check(CHECK_NAME, "fail", f"`{shown}` could not start: {err}", evidence)
    if proc.returncode != 0:
        return Check(
            CHECK_NAME,
            "fail",
            f"`{shown}` exited {proc.returncode}: {_tail(proc.stderr)}; {_fix(engine.runtime)}",
            {**evidence, "stderr": proc.stderr[-4000:]},
        )
    seen = dict(parse(proc.stdout))
    evidence["container"] = seen
    missing = [f"{uuid} ({name})" for uuid, name in host.items() if uuid not in seen]
    foreign = [f"{uuid} ({name})" for uuid, name in seen.items() if uuid not in host]
    if missing or foreign:
        parts = []
        if missing:
            parts.append(f"missing inside the container: {', '.join(missing)}")
        if foreign:
            parts.append(f"not GPUs of this host: {', '.join(foreign)}")
        return Check(
            CHECK_NAME,
            "fail",
            f"a {engine.runtime} container sees {len(seen)} of the host's {len(host)} GPUs; {'; '.join(parts)}. "
            f"{_fix(engine.runtime)[0].upper()}{_fix(engine.runtime)[1:]}",
            evidence,
        )
    return Check(
        CHECK_NAME,
        "pass",
        f"a {engine.runtime} container ({image}) sees all {len(host)} GPUs of the host, same UUIDs",
        evidence,
    )
