"""Progress of a run while it trains: steps done, rate, time left, for whoever listens (the command's status line).

The timed loop reports each step as the host issues it; on a GPU the host runs a few steps ahead of the device,
so the rate is the host's view and settles within a few steps. A listener never slows the loop: it is called at
most every `INTERVAL_S`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

INTERVAL_S = 0.5


@dataclass(frozen=True)
class Progress:
    phase: str  # "warm-up" | "timed"
    done: int
    total: int
    samples_per_step: int
    elapsed_s: float  # in this phase

    @property
    def rate(self) -> float | None:
        """Samples per second so far in this phase."""
        return self.done * self.samples_per_step / self.elapsed_s if self.done and self.elapsed_s > 0 else None

    @property
    def left_s(self) -> float | None:
        if not self.done or self.elapsed_s <= 0:
            return None
        return (self.total - self.done) * self.elapsed_s / self.done

    def text(self) -> str:
        parts = [f"{self.phase} {self.done}/{self.total}"]
        if self.rate is not None and self.phase == "timed":
            parts.append(f"{self.rate:,.0f} samples/s")
        if self.left_s is not None:
            parts.append(f"{_clock(self.left_s)} left")
        return " · ".join(parts)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}:{secs:02d}" if minutes else f"{secs} s"


Listener = Callable[[Progress], None]
_listener: ContextVar[Listener | None] = ContextVar("gpulab_progress", default=None)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


class Tracker:
    """Counts one phase's steps and tells the listener, throttled."""

    def __init__(self, phase: str, total: int, samples_per_step: int) -> None:
        self.listener = _listener.get()
        self.phase, self.total, self.samples_per_step = phase, total, samples_per_step
        self.start = self.last = time.perf_counter()

    def step(self, done: int) -> None:
        if self.listener is None:
            return
        now = time.perf_counter()
        if now - self.last >= INTERVAL_S or done == self.total:
            self.last = now
            self.listener(Progress(self.phase, done, self.total, self.samples_per_step, now - self.start))
