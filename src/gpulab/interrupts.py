"""Ctrl-C and SIGTERM: one way to stop, two exit codes.

SIGTERM (a scheduler's, systemd's or `timeout`'s stop) raises `Terminated`, a KeyboardInterrupt: every cleanup
written for Ctrl-C (children stopped, records saved, temporary files removed) runs for it too, and the command ends
with `gpulab: terminated` and 143 instead of `gpulab: interrupted` and 130.

No child outlives a stopped command: one that stops its own children is told to stop and given a few seconds
(`stop_child`), then it and whatever it started are killed; a child that must end with its parent however the
parent ends (killed outright too) asks the kernel for a signal when it does (`stop_with_parent`).

torch's import loses a KeyboardInterrupt raised at some moments of its initialisation (the import completes and the
Ctrl-C is gone: the command runs on) and aborts the process at others (a C++ exception, SIGABRT). Held back, a
Ctrl-C (or SIGTERM) during the import ends the command right after it, with the one line every command ends on.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

STOP_SIGNALS: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)
PARENT_ENV = "GPULAB_STOP_WITH_PARENT"  # set by a parent for a child that must end when it does: the parent's pid
_PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be."""


def raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"stopped by signal {signum}")


def stop_on_signals() -> None:
    """In the main thread: Ctrl-C raises KeyboardInterrupt, SIGTERM raises Terminated. A SIGINT ignored by the shell
    that started this process in the background (`cmd &`) is taken back: `kill -INT` still stops it."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, raise_terminated)


def stopped(err: KeyboardInterrupt) -> tuple[str, int]:
    """How a command stopped by `err` ends: its word (interrupted, terminated) and exit code (130, 143)."""
    return ("terminated", 143) if isinstance(err, Terminated) else ("interrupted", 130)


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Keep SIGINT and SIGTERM from interrupting the block; after it, raise what the first of them would have
    raised (Terminated before KeyboardInterrupt when both came), even when the block raised something else.

    Only the main thread can set handlers; a signal ignored (a background job's SIGINT) or left to its default
    action (SIGTERM outside a gpulab command) keeps it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: dict[int, Callable[[int, FrameType | None], object]] = {}
    for stop in STOP_SIGNALS:
        handler = signal.getsignal(stop)
        if callable(handler):
            held[stop] = handler
    pending: list[int] = []
    for stop in held:
        signal.signal(stop, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for stop, handler in held.items():
            signal.signal(stop, handler)
        # As it would have run in the block: raising, as gpulab's handlers do, over whatever the block raised (what
        # the stop itself caused, such as a child it killed)
        for came in sorted(set(pending), key=lambda s: s != signal.SIGTERM):
            held[came](came, None)


def import_torch() -> ModuleType:
    """`import torch`, with Ctrl-C held back until it is done."""
    with ctrl_c_held():
        import torch
    return torch


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child that calls `stop_with_parent`: this process's pid as the parent it must outlive
    by no more than a signal."""
    return {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}


def stop_with_parent(signum: int = signal.SIGTERM) -> None:
    """In a child started with `child_env`: the kernel sends `signum` to this process when its parent ends (killed
    too, by whatever signal), so a child never trains on alone. The variable is not passed on to this process's
    own children, whose parent is this one."""
    expected = os.environ.pop(PARENT_ENV, "")
    if not expected.isdigit() or not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    if os.getppid() != int(expected):  # the parent ended before the kernel was told: as if it had just now
        os.kill(os.getpid(), signum)


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time) of every process /proc shows (none off Linux)."""
    table: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        table[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every process below `pid`: its children, theirs, and so on."""
    table = _processes()
    below: list[tuple[int, int]] = []
    parents = {pid}
    while parents:
        found = [(p, start) for p, (ppid, start) in table.items() if ppid in parents]
        below += found
        parents = {p for p, _ in found}
    return below


def _kill_left(processes: list[tuple[int, int]]) -> None:
    table = _processes()
    for pid, start in processes:
        if pid in table and table[pid][1] == start:  # still that process, not a new one under a reused pid
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def stop_child(proc: subprocess.Popen[Any], grace_s: float, signum: int = signal.SIGTERM) -> None:
    """Stop a child and everything it started: `signum` to the child (it stops its own children as it does on that
    signal), up to `grace_s` for it to exit, then SIGKILL for it and for any process of its tree still there (its
    children in sessions of their own too). A second Ctrl-C or SIGTERM meanwhile waits for this to finish."""
    with ctrl_c_held():
        below = descendants(proc.pid)
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError, OSError):
                proc.communicate(timeout=grace_s)  # reads its pipes meanwhile, so a full one cannot hold it
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        _kill_left(below)
