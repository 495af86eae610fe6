"""Where a sweep's runs go: one thread per device, each starting a run's process and waiting for it.

psweep hands the runs to the `map` and `gather` of the client it is given (its Dask path); this pool is that
client. A run is a process of its own, so a thread only starts it and waits: nothing is forked from the sweep's
(multi-threaded) process, and no pool process can be lost. A process pool was not: a stop to the whole group ended
its workers, its maintenance thread forked replacements meanwhile, and a replacement that the pool's own SIGTERM
reached before its signal handling was set up lost that signal and waited for work forever, holding the command.

Leaving the pool on an exception (Ctrl-C, SIGTERM, a failure) stops every run under way (`stop_child`: SIGTERM,
a grace period, then SIGKILL for the run and all it started) and starts no more; on success it waits for its
threads.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import IO, Any

from gpulab.interrupts import stop_child

STOP_GRACE_S = 5.0  # for a run told to stop before it and its children are killed


class SweepStopped(Exception):
    """A run asked for after the sweep began to stop: it is not started."""


class SweepPool:
    """`workers` threads; `run` starts one run's process and waits, `map`/`gather` are what psweep calls."""

    def __init__(self, workers: int, grace_s: float = STOP_GRACE_S) -> None:
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpulab-sweep")
        self._grace_s = grace_s
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen[bytes]] = set()
        self._stopping = False

    def __enter__(self) -> SweepPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.stop()
        self._executor.shutdown(wait=True, cancel_futures=kind is not None)

    def map(self, func: Callable[[Any], Any], items: Iterable[Any]) -> list[Future[Any]]:
        return [self._executor.submit(func, item) for item in items]

    def gather(self, futures: list[Future[Any]]) -> list[Any]:
        return [future.result() for future in futures]

    def run(self, cmd: list[str], *, env: dict[str, str], log: IO[bytes] | None, timeout_s: float) -> int | None:
        """Start `cmd` (output to `log`) and wait: its exit code, or None when it ran past `timeout_s` (it and its
        children are then stopped). SweepStopped once the pool is stopping."""
        with self._lock:  # a stop either sees this run or keeps it from starting
            if self._stopping:
                raise SweepStopped("the sweep is stopping")
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            self._running.add(proc)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_child(proc, self._grace_s)
            return None
        finally:
            with self._lock:
                self._running.discard(proc)

    def stop(self) -> None:
        """No run starts from now on; every run under way is stopped, with all it started."""
        with self._lock:
            self._stopping = True
            running = list(self._running)
        for proc in running:
            stop_child(proc, self._grace_s)
