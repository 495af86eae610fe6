"""Measured test durations: they decide the lanes and the order the workers take the tests in.

`tests/durations.json` holds the seconds each test took (setup, call and teardown together; module fixtures count
toward the first test that uses them) in a full run on two idle cores, for every test of a second or more. A test of
FAST_LIMIT_S or more is in the full lane only (marked `slow`, as whole modules of trainings and root tests are by
hand), and the slow tests go first, the heaviest files first (each file's tests in their own order): the two
workers then finish together instead of one starting a quarter-hour root test when the other is nearly done.
Refresh the file after a change of the suite's weight:

    ./bootstrap.sh test --record-durations tests/durations.json
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
FAST_LIMIT_S = 3.0  # a test this long or longer is in the full lane only
RECORD_FROM_S = 1.0  # shorter tests are left out of the file


def measured(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test id; {} when the file is absent (every test then counts as quick)."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {str(k): float(v) for k, v in data.items()}


def arrange(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Mark the measured slow tests, then order: slow before quick, the files with the most slow seconds first; the
    tests of a file keep their collection order (module fixtures and tests written in sequence rely on it)."""
    for item in items:
        if seconds.get(item.nodeid, 0.0) >= FAST_LIMIT_S and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
    weight: dict[str, float] = {}
    for item in items:
        if item.get_closest_marker("slow") is not None:
            path = item.nodeid.split("::", 1)[0]
            weight[path] = weight.get(path, 0.0) + seconds.get(item.nodeid, 0.0)

    def key(item: pytest.Item) -> tuple[bool, float]:
        slow = item.get_closest_marker("slow") is not None
        return not slow, -weight.get(item.nodeid.split("::", 1)[0], 0.0) if slow else 0.0

    items.sort(key=key)


class Recorder:
    """Adds up each test's phases as the reports arrive (on the xdist controller) and writes the file at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        kept = {k: round(v, 1) for k, v in sorted(self.seconds.items()) if v >= RECORD_FROM_S}
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")
        tmp.replace(self.path)
