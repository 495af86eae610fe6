"""The measured durations that decide the lanes and the run order (tests/timings.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import timings

REPO = Path(__file__).resolve().parents[1]


class Item:
    """What timings.arrange reads and writes of a pytest item."""

    def __init__(self, nodeid: str, slow: bool = False) -> None:
        self.nodeid = nodeid
        self.marks = ["slow"] if slow else []

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None

    def add_marker(self, mark: pytest.MarkDecorator) -> None:
        self.marks.append(mark.name)


def test_measured_slow_tests_join_the_full_lane_and_the_heaviest_files_go_first_in_their_own_order() -> None:
    items = [Item("f::a"), Item("f::b", slow=True), Item("g::c"), Item("g::d"), Item("h::e"), Item("f::z")]
    seconds = {"f::a": 0.2, "f::b": 1.0, "g::c": 40.0, "g::d": 3.0, "h::e": 2.9, "f::z": 5.0}
    timings.arrange(items, seconds)  # type: ignore[arg-type]
    # g (43 s of slow tests) before f (6 s), each file's slow tests in collection order; then the quick ones.
    assert [i.nodeid for i in items] == ["g::c", "g::d", "f::b", "f::z", "f::a", "h::e"]
    assert {i.nodeid for i in items if i.get_closest_marker("slow")} == {"f::b", "g::c", "g::d", "f::z"}


def test_the_recorder_adds_each_tests_phases_and_writes_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    recorder = timings.Recorder(path)
    for nodeid, seconds in [("t::a", 0.5), ("t::a", 0.7), ("t::b", 0.3), ("t::c", 12.34)]:
        recorder.pytest_runtest_logreport(type("Report", (), {"nodeid": nodeid, "duration": seconds})())  # type: ignore[arg-type]
    recorder.pytest_sessionfinish(None)  # type: ignore[arg-type]
    assert json.loads(path.read_text()) == {"t::a": 1.2, "t::c": 12.3}
    assert timings.measured(path) == {"t::a": 1.2, "t::c": 12.3}
    assert timings.measured(tmp_path / "absent.json") == {}


def test_the_recorded_durations_name_test_files_that_exist() -> None:
    seconds = timings.measured()
    assert seconds, "tests/durations.json is missing or empty: record it (tests/timings.py says how)"
    files = {nodeid.split("::", 1)[0] for nodeid in seconds}
    assert all((REPO / f).is_file() for f in files), sorted(f for f in files if not (REPO / f).is_file())
