"""Ctrl-C held back while torch imports.

torch's import loses a KeyboardInterrupt raised at some moments of its initialisation (the import completes and the
Ctrl-C is gone: the command runs on) and aborts the process at others (a C++ exception, SIGABRT). Held back, a
Ctrl-C during the import ends the command right after it, with the one line every command ends on.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import ModuleType


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """Keep SIGINT from interrupting the block; raise KeyboardInterrupt after it if one came.

    Only the main thread can set handlers, and an ignored SIGINT (a background job) stays ignored."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) in (
        signal.SIG_IGN,
        None,
    ):
        yield
        return
    pending: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pending:
        raise KeyboardInterrupt


def import_torch() -> ModuleType:
    """`import torch`, with Ctrl-C held back until it is done."""
    with ctrl_c_held():
        import torch
    return torch
