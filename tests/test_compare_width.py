"""`gpulab compare` fits its table to the terminal it prints to, and keeps the whole width into a pipe or a file."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

REPORTS = Path(__file__).parent / "fixtures" / "reports"


BOX = set("┃│┏┡└━─")


def _table(lines: list[str]) -> list[str]:
    """The table's lines (the verdict and notes are single long lines the terminal wraps)."""
    return [line for line in lines if line[:1] in BOX]


def _compare(env_extra: dict[str, str], tty: bool) -> list[str]:
    """stdout of `gpulab compare` on two reports, into a pipe or a pseudo-terminal."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | env_extra
    argv = [sys.executable, "-m", "gpulab", "compare", *(str(REPORTS / f"h200x2-repeat-{k}.json") for k in (1, 2))]
    if not tty:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
        assert proc.returncode in (0, 1), proc.stderr
        return proc.stdout.splitlines()
    main, child = pty.openpty()
    with subprocess.Popen(argv, stdout=child, stderr=subprocess.DEVNULL, env=env) as proc:
        os.close(child)
        chunks = []
        while True:
            try:
                data = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=120)
    os.close(main)
    return b"".join(chunks).decode().replace("\r\n", "\n").splitlines()


def test_the_table_fits_a_narrow_terminal_and_a_pipe_keeps_it_whole() -> None:
    narrow = _compare({"COLUMNS": "100"}, tty=True)
    assert _table(narrow) and max(len(line) for line in _table(narrow)) <= 100
    piped = _compare({"COLUMNS": "80"}, tty=False)  # COLUMNS without a terminal (as pytest-xdist sets it) is no width
    assert max(len(line) for line in _table(piped)) > 100  # no terminal: the 160-column table
    assert [line for line in narrow if line.startswith("verdict")] == [
        line for line in piped if line.startswith("verdict")
    ]
