"""Preloaded into every study worker (Dask's `preload`): a Ctrl-C at the terminal, or a SIGTERM, reaches the whole
process group, and it is the study's to handle, not each worker's (a worker process would print its
KeyboardInterrupt traceback, or die under the run it holds, its row unsaved). The nanny stops its worker when the
study ends, interrupted or not, and a worker whose study process is gone exits (Dask watches its parent).

The worker's log level is its slot's (studies.cluster): the process imported Dask, which reads the level, before
the nanny set the slot's environment."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

LOG_LEVEL_ENV = "DASK_LOGGING__DISTRIBUTED"


def dask_setup(worker: Any) -> None:
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    level = os.environ.get(LOG_LEVEL_ENV, "").upper()
    if level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        logging.getLogger("distributed").setLevel(level)
