"""Preloaded into every study worker (Dask's `preload`): a Ctrl-C at the terminal reaches the whole process group,
and it is the study's to handle, not each worker's (a worker process would print its KeyboardInterrupt traceback).
The nanny stops its worker when the study ends, interrupted or not."""

from __future__ import annotations

import signal
import threading
from typing import Any


def dask_setup(worker: Any) -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
