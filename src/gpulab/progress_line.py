"""One progress line for long work (a study's runs, a validation suite's tests): done of total, elapsed, time left.

On a terminal it is a single live line (rich), redrawn in place. Elsewhere (CI logs, pipes) it prints a plain line
only when the work has moved on by a tenth or a minute has passed since the last, and a last line at the end, so a
log stays short. The time left is the pace since the first unit finished (so a start-up, workers starting and
compiling, is not taken for the pace: a study's first run took 85 s of which 80 were compiling) times the work still
to do, or what `estimate` says (a suite's known test durations).

    with ProgressLine("study neural-style", total=252, unit="runs") as line:
        line.update(done, detail="gpu0: learning_rate=10")
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

PLAIN_EVERY_S = 60.0  # away from a terminal: at most one line a minute...
PLAIN_EVERY_FRACTION = 0.1  # ...unless the work moved on by a tenth


def clock(seconds: float) -> str:
    """3:05, 1:02:03 or 45 s."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}" if minutes else f"{secs} s"


class ProgressLine:
    """Done of total with the time left; `live` None: a live line exactly when `stream` is a terminal."""

    def __init__(
        self,
        what: str,
        total: int,
        *,
        unit: str = "runs",
        stream: IO[str] | None = None,
        live: bool | None = None,
        estimate: Callable[[int], float | None] | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.total, self.unit = what, max(0, total), unit
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.estimate = estimate
        self.now = now
        self.started = now()
        self.done, self.detail = 0, ""
        self._first: tuple[float, int] | None = None  # (when, done) at the first update with work done
        self._printed_at = self.started
        self._printed_done = 0
        self._rich: Any = None
        self._task: Any = None

    # -- the text both forms share -------------------------------------------------------------------------
    def left_s(self) -> float | None:
        """Seconds still to go: `estimate(done)` when given, else the pace since the first unit finished; None
        until a second one has."""
        if self.estimate is not None:
            found = self.estimate(self.done)
            if found is not None:
                return found
        if self._first is None or self.done <= self._first[1]:
            return None
        since, done_then = self._first
        return (self.total - self.done) * (self.now() - since) / (self.done - done_then)

    def text(self) -> str:
        elapsed = self.now() - self.started
        parts = [f"{self.what}: {self.done}/{self.total} {self.unit}"]
        if self.total:
            parts[0] += f" ({self.done * 100 // self.total} %)"
        parts.append(f"{clock(elapsed)} elapsed")
        left = self.left_s()
        if left is not None and self.done < self.total:
            parts.append(f"about {clock(left)} left")
        if self.detail:
            parts.append(self.detail)
        return " · ".join(parts)

    # -- updates -------------------------------------------------------------------------------------------
    def update(self, done: int, detail: str | None = None, total: int | None = None) -> None:
        if total is not None:
            self.total = max(0, total)
        self.done = min(max(0, done), self.total) if self.total else max(0, done)
        if detail is not None:
            self.detail = detail
        if self._first is None and self.done:
            self._first = (self.now(), self.done)
        if self.live:
            self._draw()
            return
        moved = self.done - self._printed_done
        due = self.now() - self._printed_at >= PLAIN_EVERY_S and moved > 0
        if due or (self.total and moved >= max(1, self.total * PLAIN_EVERY_FRACTION)):
            self._print()

    def _print(self) -> None:
        print(self.text(), file=self.stream, flush=True)
        self._printed_at, self._printed_done = self.now(), self.done

    def _draw(self) -> None:
        if self._rich is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            console = Console(file=self.stream, force_terminal=True)
            self._rich = Progress(
                BarColumn(bar_width=24), TextColumn("{task.description}"), console=console, transient=False
            )
            self._rich.start()
            self._task = self._rich.add_task(self.text(), total=self.total or None)
        self._rich.update(self._task, completed=self.done, total=self.total or None, description=self.text())

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """The last state: the live line is left standing; away from a terminal one line unless nothing changed."""
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, description=self.text())
            self._rich.stop()
            self._rich = None
        elif not self.live and self.done != self._printed_done:
            self._print()
