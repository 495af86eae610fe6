"""Adding results to a report file that several processes may append to at once.

`gpulab run ... --report same.json` reads the report, adds its result, recomputes speedups and scaling and
writes it back. Without a lock two such processes read the same old report and the last writer drops the
other's result, so the read-modify-write holds an exclusive `flock` on `.<name>.lock` beside the report.
The lock file is left in place: deleting it would let a waiting process lock a file nobody else sees.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.names import RUN_REPORT_TIER
from gpulab.records import Report, Result, Scaling
from gpulab.report.io import load_report, write_report
from gpulab.report.scaling import scaling, speedups


def lock_path(path: Path) -> Path:
    """The lock file that serialises updates of the report at `path`: `.<name>.lock` in the same directory."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def report_lock(path: Path) -> Iterator[Path]:
    """Hold an exclusive lock for updating the report at `path` (blocks until other holders finish)."""
    lock = lock_path(path)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except (FileExistsError, NotADirectoryError):
        raise GpulabError(
            f"cannot lock report {path}: a part of {lock.parent} is a file, not a directory; pass another --report path"
        ) from None
    except OSError as err:
        raise GpulabError(
            f"cannot lock report {path}: {lock}: {err.strerror or err}; "
            "make its directory writable or pass another --report path"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes, also if the process dies
        yield lock
    finally:
        os.close(fd)


def merge_results(report: Report, results: Sequence[Result]) -> Report:
    """Add `results` to `report` and recompute its speedups and scaling; expected efficiencies already
    recorded for a scaling row are kept when the fresh row has none. Everything else is left as it was."""
    report.results.extend(results)
    report.speedups = speedups(report.results)
    known = {_scaling_key(s): s for s in report.scaling}
    fresh = scaling(report.results)
    for row in fresh:
        old = known.get(_scaling_key(row))
        if old is not None and row.expected is None:
            row.expected, row.expected_source = old.expected, old.expected_source
    report.scaling = fresh
    return report


def _scaling_key(s: Scaling) -> tuple[str, str, str, str, int]:
    return (s.workload, s.framework, s.launcher, s.precision, s.n)


def this_host() -> dict[str, Any]:
    """This machine's fingerprint for a report of runs (frameworks not probed: the runs say their own versions)."""
    from gpulab.hw.discover import fingerprint

    return fingerprint(probe_frameworks=False).to_dict()


def append_results(
    path: Path,
    results: Sequence[Result],
    command: str | None = None,
    *,
    fingerprint: Callable[[], dict[str, Any]] = this_host,
    host_load: dict[str, Any] | None = None,
) -> Report:
    """Add `results` to the report at `path` under its lock and write it atomically; returns the new report.

    A missing report is created with `fingerprint()` (this host's) and tier "run". An existing one must load
    (a corrupt file is an error, never silently replaced); its fingerprint, checks, thresholds and the rest
    are kept. `host_load` (gpulab.report.hostload) is how busy the host was while `results` were measured.
    """
    # The file, not the name: writers through a symbolic link and through the real path take one lock, and the
    # link stays a link (the new report replaces the file it points to).
    path = Path(os.path.realpath(path))
    with report_lock(path):
        # Read under the lock: a report another process wrote while this one waited is appended to.
        report = (
            load_report(path)
            if path.exists()
            else Report(fingerprint=fingerprint(), tier=RUN_REPORT_TIER, command=command)
        )
        merge_results(report, results)
        if host_load is not None:
            report.host_load.append(host_load)
        write_report(report, path)
    return report
