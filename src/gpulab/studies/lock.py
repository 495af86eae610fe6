"""One process at a time owns a study directory: `study run` and `study resume` hold `study.lock` while they work.

The lock is an flock on the file, so an owner that dies (killed, a lost machine's process) releases it with its
last open descriptor; the file holds the owner's host, pid and start time for the message a second process gets.
The file is never removed (a removed lock file lets two processes lock two different files): a clean owner empties
it, and a file that still names an owner when the lock is free was left by one that is gone, and is taken over.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

LOCK_FILE = "study.lock"
MAX_LOCK_BYTES = 4096


def _owner_text(owner: dict[str, Any]) -> str:
    since = owner.get("since")
    when = (
        datetime.datetime.fromtimestamp(since).astimezone().isoformat(timespec="seconds")
        if isinstance(since, (int, float))
        else "an unknown time"
    )
    return f"pid {owner.get('pid', '?')} on {owner.get('host', '?')} since {when}"


def _read_owner(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, MAX_LOCK_BYTES).decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        owner = json.loads(text)
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


@contextlib.contextmanager
def owning(study_dir: Path, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the study directory's lock for the block; refused (GpulabError, exit 2) while another process holds it."""
    path = Path(study_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as err:
        raise GpulabError(f"cannot open the study's lock file {path}: {err.strerror}; check the directory") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = _read_owner(fd) or {}
            raise GpulabError(
                f"{study_dir} is in use by another gpulab study run/resume ({_owner_text(owner)}); wait for it to "
                f"finish (or stop it), then run `gpulab study resume {study_dir}`"
            ) from None
        stale = _read_owner(fd)
        if stale is not None:
            say(f"took over the lock of {study_dir} from {_owner_text(stale)}: that process is gone")
        me = {"host": socket.gethostname(), "pid": os.getpid(), "since": round(time.time(), 3)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # a clean end: no owner named (the lock itself goes with the descriptor)
    finally:
        os.close(fd)
