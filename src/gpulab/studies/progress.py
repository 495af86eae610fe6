"""How many of a session's runs have finished, while psweep waits on them, for the study's progress line.

Each run saves its own row to `<run folder>/row.json` in the study directory the moment it finishes, on the workers
and in whole-machine runs alike (report.database), so the rows that appeared since the session began are its
finished runs. Remote workers save on their own hosts: there the count is what the Dask cluster holds results for.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpulab.report.database import ROW_JSON

POLL_S = 1.0

Progress = Callable[[int, int], None]  # (finished, planned) of this session's runs


def finished_counter(study_dir: Path, client: Any = None, already: int = 0) -> Callable[[], int]:
    """A function counting this session's finished runs: `already` (runs it finished before, e.g. the packing
    probe's) and the saved runs that were not there when it was made."""
    study_dir = Path(study_dir)

    def files() -> set[Path]:
        return set(study_dir.glob(f"*/{ROW_JSON}"))

    before = files()

    def count() -> int:
        done = len(files() - before)
        if client is not None:
            with contextlib.suppress(Exception):  # a cluster going down mid-poll is psweep's to report, not ours
                done = max(done, sum(1 for where in client.who_has().values() if where))
        return already + done

    return count


@contextlib.contextmanager
def watching(count: Callable[[], int], total: int, progress: Progress | None) -> Iterator[None]:
    """Call `progress(finished, total)` about every second while the block runs (also when nothing finished, so
    the elapsed time moves), and once at the end."""
    if progress is None:
        yield
        return
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(POLL_S):
            with contextlib.suppress(OSError):
                progress(min(count(), total), total)

    progress(0, total)
    thread = threading.Thread(target=poll, daemon=True, name="study-progress")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        with contextlib.suppress(OSError):
            progress(min(count(), total), total)
