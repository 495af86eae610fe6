"""Where a study's runs execute: Dask workers, one per GPU, each pinned before anything imports a framework.

Locally `gpulab study run` starts a Dask `SpecCluster` of `Nanny` processes, one per selected GPU with
CUDA_VISIBLE_DEVICES set to that GPU's UUID (read through NVML, so the parent never opens a CUDA context), each
with one thread: a worker runs one study run at a time and Dask's scheduler hands it the next. Without GPUs the
workers are CPU processes of `threads` threads each. Across hosts, a Dask scheduler runs somewhere
(`dask scheduler`), `gpulab study worker tcp://HOST:8786` starts the same pinned workers on every GPU host, and
`gpulab study run --scheduler tcp://HOST:8786` sends the runs there. Scheduling is Dask's; gpulab only pins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gpulab.errors import GpulabError
from gpulab.hw import cuda_visible
from gpulab.interrupts import ctrl_c_held
from gpulab.records import GpuInfo

# The environment of a worker's slot, read by the task that runs there.
DEVICE_ENV = "GPULAB_STUDY_DEVICE"  # the worker's device: cuda:0 (its one visible GPU) or cpu
LABEL_ENV = "GPULAB_STUDY_LABEL"  # how the study names that device (GPU index and UUID, or cpu)
THREADS_ENV = "GPULAB_STUDY_THREADS"  # CPU threads of a CPU worker
QUIET = {"DASK_LOGGING__DISTRIBUTED": "error"}  # a worker's own start/stop lines are noise next to the study's
# This machine's workers report nothing of their own: a run's failure is the study's row, a worker that cannot start
# fails the cluster's start here, and a worker busy with a run while a stopped study closes its scheduler would log
# its lost heartbeat as a traceback.
LOCAL_QUIET = {"DASK_LOGGING__DISTRIBUTED": "critical"}


@dataclass(frozen=True)
class Slot:
    """One worker: its name, the device it owns as the study names it, and the environment that pins it."""

    name: str
    label: str
    env: dict[str, str]

    @property
    def gpu(self) -> bool:
        return self.env.get(DEVICE_ENV, "cpu").startswith("cuda")


def visible_gpu_infos() -> list[GpuInfo]:
    """NVML's view of the GPUs this process may use, filtered and ordered by CUDA_VISIBLE_DEVICES."""
    from gpulab.hw import nvml

    if nvml.load_nvml()[0] is None:
        return []
    gpus = [g for g in nvml.query().gpus if g.uuid]
    visible = cuda_visible.entries()
    if visible is None:
        return gpus
    chosen = []
    for entry in visible:
        match = [g for g in gpus if (entry.isdigit() and g.index == int(entry)) or g.uuid.startswith(entry)]
        if not match:
            break  # CUDA stops at the first entry it cannot resolve; so do we
        chosen.append(match[0])
    return chosen


def visible_gpus() -> list[tuple[int, str, str]]:
    """(NVML index, UUID, name) of the GPUs this process may use: NVML's, filtered by CUDA_VISIBLE_DEVICES."""
    return [(g.index, g.uuid, g.name or "GPU") for g in visible_gpu_infos()]


def slots(
    workers: int | str, threads: int, *, host: str = "", gpus: list[tuple[int, str, str]] | None = None
) -> list[Slot]:
    """The workers to start here: one per GPU (all, or the first `workers`), else `workers` CPU processes."""
    gpus = visible_gpus() if gpus is None else gpus
    prefix = f"{host}-" if host else ""
    if gpus:
        if workers != "all" and int(workers) > len(gpus):
            raise GpulabError(f"workers: {workers} asked for, but {len(gpus)} GPU(s) are visible; ask for {len(gpus)}")
        chosen = gpus if workers == "all" else gpus[: int(workers)]
        return [
            Slot(
                f"{prefix}gpu{index}",
                f"gpu{index} {name} {uuid}",
                {**QUIET, "CUDA_VISIBLE_DEVICES": uuid, DEVICE_ENV: "cuda:0", LABEL_ENV: f"gpu{index} {uuid}"},
            )
            for index, uuid, name in chosen
        ]
    cores = os.cpu_count() or 1
    count = max(1, cores // threads) if workers == "all" else int(workers)
    if count * threads > cores:
        raise GpulabError(
            f"{count} CPU workers × {threads} threads exceed the {cores} CPU cores; lower workers or threads"
        )
    env = {**QUIET, "CUDA_VISIBLE_DEVICES": "", DEVICE_ENV: "cpu", THREADS_ENV: str(threads)}
    env.update(OMP_NUM_THREADS=str(threads), TF_NUM_INTRAOP_THREADS=str(threads))
    return [Slot(f"{prefix}cpu{k}", f"cpu{k}", {**env, LABEL_ENV: f"cpu{k}"}) for k in range(count)]


def _worker_options(slot: Slot, quiet: dict[str, str] | None = None) -> dict[str, Any]:
    # One thread: one run at a time per device. No memory limit: a GPU run's host memory is not Dask's to police.
    # Ctrl-C and SIGTERM are the study's (the parent's) to handle: the workers ignore them, the nanny stops them.
    preload = ["gpulab.studies.worker_signals"]
    env = {**slot.env, **(quiet or {})}
    return {"nthreads": 1, "env": env, "memory_limit": 0, "name": slot.name, "preload": preload}


@contextlib.contextmanager
def local_client(chosen: list[Slot]) -> Iterator[Any]:
    """A Dask client on a cluster of `chosen` workers on this machine, torn down on the way out."""
    for key, value in QUIET.items():  # read when `distributed` is first imported, here and in the workers
        os.environ.setdefault(key, value)
    from distributed import Client, Nanny, Scheduler, SpecCluster

    spec = {slot.name: {"cls": Nanny, "options": _worker_options(slot, LOCAL_QUIET)} for slot in chosen}
    scheduler = {"cls": Scheduler, "options": {"dashboard_address": "127.0.0.1:0", "host": "127.0.0.1"}}
    with contextlib.ExitStack() as stack:
        # Started whole, then closed as at any other moment: a cluster stopped halfway through its start leaves
        # workers that Dask closes at exit with tracebacks (a worker still in Status.init, a scheduler gone from
        # under a worker's heartbeat). A Ctrl-C or SIGTERM meanwhile waits the seconds the start takes.
        with ctrl_c_held():
            cluster = stack.enter_context(SpecCluster(workers=spec, scheduler=scheduler, silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
        client.wait_for_workers(len(chosen), timeout=300)
        yield client


def dashboard(client: Any) -> str:
    """The address of the scheduler's Dask dashboard (its port is chosen at start), or '' where it has none."""
    try:
        info = client.scheduler_info()
        port = info.get("services", {}).get("dashboard")
        host = urlsplit(str(info.get("address", ""))).hostname
    except Exception:  # a scheduler going away is the study's to report, not this line's
        return ""
    return f"http://{host}:{port}/status" if port and host else ""


@contextlib.contextmanager
def remote_client(address: str, timeout_s: float = 30.0) -> Iterator[Any]:
    """A Dask client on a running cluster; refused with the fix when it cannot be reached or has no workers."""
    from distributed import Client

    reachable(address)
    try:
        client = Client(address, timeout=timeout_s)
    except (OSError, TimeoutError) as err:
        raise GpulabError(
            f"--scheduler {address}: no Dask scheduler answers ({err}); start one with `dask scheduler` on that "
            "host and `gpulab study worker ADDRESS` on each GPU host, or leave --scheduler out to run here"
        ) from None
    with client:
        if not client.scheduler_info().get("workers"):
            raise GpulabError(
                f"--scheduler {address}: the scheduler has no workers; start `gpulab study worker {address}` on each "
                "GPU host (one worker per GPU), then run the study again"
            )
        yield client


def reachable(address: str, what: str = "--scheduler") -> None:
    """A tcp://HOST:PORT address where a Dask scheduler answers, checked at once (Dask would retry for its timeout,
    and a worker would wait without end). `what` names the argument in the message: `--scheduler` of
    `study run`, or the ADDRESS of `study worker`."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if what == "--scheduler":
        fix = "start one with `dask scheduler` there, or leave --scheduler out to run here"
        port_fix = "give the scheduler's port (8786 by default), or leave --scheduler out"
    else:
        fix = "start `dask scheduler` on that host first, then give its address (tcp://HOST:8786)"
        port_fix = "give the scheduler's port (8786 by default)"
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = port = None
    if parts.scheme != "tcp" or not host or not port:
        raise GpulabError(f"{what} {address!r} is not tcp://HOST:PORT (a Dask scheduler, e.g. tcp://gpu1:8786)")
    try:
        with socket.create_connection((host, port), timeout=CONNECT_S) as sock:
            first = _first_bytes(sock)
    except OSError as err:
        raise GpulabError(
            f"{what} {address}: nothing answers at {host}:{port} ({err.strerror or err}); {fix}"
        ) from None
    # A Dask server speaks first: its handshake, framed by an 8-byte little-endian frame count. Anything else (an
    # HTTP server waits for a request; an SSH server greets in text) would leave Dask's client retrying.
    if not first:
        raise GpulabError(
            f"{what} {address}: {host}:{port} accepts connections but says nothing within {CONNECT_S:g} s (a Dask "
            f"scheduler greets at once: is it another service, or a firewall?); {port_fix}"
        )
    if len(first) < 8 or not 0 < int.from_bytes(first[:8], "little") < 1024:
        raise GpulabError(
            f"{what} {address}: {host}:{port} answers, but not as a Dask scheduler (is it the dashboard's "
            f"port, or another service?); {port_fix}"
        )


CONNECT_S = 5.0  # a black hole (no answer at all) is refused after this long


def _first_bytes(sock: socket.socket) -> bytes:
    """Up to 8 bytes the server sends unasked within CONNECT_S (none: b"")."""
    sock.settimeout(CONNECT_S)
    data = b""
    try:
        while len(data) < 8:
            chunk = sock.recv(8 - len(data))
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        pass
    return data


def worker_labels(client: Any) -> list[str]:
    """The cluster's workers by name (what each run's `worker` column holds)."""
    return sorted(str(w.get("name")) for w in client.scheduler_info().get("workers", {}).values())


def serve(address: str, chosen: list[Slot]) -> None:
    """Run `chosen` pinned workers for the scheduler at `address` until they are stopped (Ctrl-C, or the cluster)."""
    from distributed import Nanny

    async def main() -> None:
        nannies = [Nanny(address, **_worker_options(slot)) for slot in chosen]
        try:
            await asyncio.gather(*nannies)
            await asyncio.gather(*(n.finished() for n in nannies))
        finally:
            await asyncio.gather(*(n.close() for n in nannies), return_exceptions=True)

    try:
        asyncio.run(main())
    except (OSError, TimeoutError) as err:
        raise GpulabError(f"cannot join the Dask scheduler at {address}: {err}; check the address and port") from None


def this_host() -> str:
    return socket.gethostname().split(".")[0]
