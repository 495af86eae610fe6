"""The validation suite's own progress line: tests done of those collected, the current test, the time left.

The time left is the known duration of every test still to run (durations.json: measured per tier on a real
machine, keyed by test and workload), scaled by how this machine's finished tests compared with their known
durations; a test with none known counts the mean of the finished ones. Printed through pytest's terminal reporter
(so it never tears pytest's own output): when a test known to take 5 s or more starts, and at most every 30 s
otherwise, on a terminal; away from one (CI) a line per tenth of the suite or per minute.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from typing import Any

from gpulab.progress_line import PLAIN_EVERY_FRACTION, PLAIN_EVERY_S, clock

LONG_TEST_S = 5.0  # on a terminal, a test expected to take this long is announced when it starts
TTY_EVERY_S = 30.0


@cache
def known_durations() -> dict[str, dict[str, float]]:
    text = resources.files("gpulab.validation").joinpath("durations.json").read_text(encoding="utf-8")
    tiers: dict[str, dict[str, float]] = json.loads(text)["tiers"]
    return tiers


def test_key(nodeid: str, params: dict[str, Any]) -> tuple[str, str]:
    """("test_speedup.py::test_cpu", "test_speedup.py::test_cpu[mnist]"): the test, and the test on its workload."""
    path, _, rest = nodeid.partition("::")
    func = rest.split("[", 1)[0]
    base = f"{path.rsplit('/', 1)[-1]}::{func}"
    workload = params.get("workload")
    return base, f"{base}[{workload}]" if workload is not None else base


class SuiteProgress:
    """Fed by the plugin's hooks: `start(nodeid)` when a test begins, `finish(nodeid)` when it ends."""

    def __init__(
        self,
        tests: Sequence[tuple[str, dict[str, Any]]],  # (node id, its parameters) in run order
        tier: str,
        write_line: Callable[[str], None],
        tty: bool,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        table = known_durations().get(tier, {})
        self.known: dict[str, float | None] = {}
        for nodeid, params in tests:
            base, specific = test_key(nodeid, params)
            self.known[nodeid] = table.get(specific, table.get(base))
        self.order = [nodeid for nodeid, _ in tests]
        self.tier, self.write_line, self.tty, self.now = tier, write_line, tty, now
        self.started = self.last_line = now()
        self.finished: dict[str, float] = {}
        self.current: str | None = None
        self.current_since = self.started
        self.printed_done = 0

    @property
    def total(self) -> int:
        return len(self.order)

    def left_s(self) -> float | None:
        """Seconds the tests not yet finished should take on this machine (None before anything is known)."""
        done_known = [(self.known[n], s) for n, s in self.finished.items() if self.known.get(n)]
        scale = 1.0
        if done_known and sum(k for k, _ in done_known if k) > 0:
            scale = sum(s for _, s in done_known) / sum(k for k, _ in done_known if k)
            scale = min(4.0, max(0.25, scale))
        mean = statistics.mean(self.finished.values()) if self.finished else None
        left = 0.0
        for nodeid in self.order:
            if nodeid in self.finished:
                continue
            known = self.known.get(nodeid)
            if known is not None:
                left += known * scale
            elif mean is not None:
                left += mean
            elif not any(self.known.values()):
                return None
        return left

    def text(self) -> str:
        done = len(self.finished)
        parts = [f"suite ({self.tier}): {done}/{self.total} tests", f"{clock(self.now() - self.started)} elapsed"]
        left = self.left_s()
        if left is not None and done < self.total:
            parts.append(f"about {clock(left)} left")
        if self.current:
            parts.append(f"now {self.current}")
        return " · ".join(parts)

    def start(self, nodeid: str) -> None:
        now = self.now()
        self.current, self.current_since = nodeid, now
        if self.tty:
            long = (self.known.get(nodeid) or 0) >= LONG_TEST_S
            if long or now - self.last_line >= TTY_EVERY_S:
                self._line()
        elif now - self.last_line >= PLAIN_EVERY_S:
            self._line()

    def finish(self, nodeid: str) -> None:
        """The test ended (setup, call and teardown: fixtures measure rows in setup too)."""
        self.finished[nodeid] = self.now() - self.current_since if self.current == nodeid else 0.0
        if self.current == nodeid:
            self.current = None
        moved = len(self.finished) - self.printed_done
        last = len(self.finished) == self.total
        if not self.tty and (last or moved >= max(1, self.total * PLAIN_EVERY_FRACTION)):
            self._line()

    def _line(self) -> None:
        self.write_line(self.text())
        self.last_line, self.printed_done = self.now(), len(self.finished)
