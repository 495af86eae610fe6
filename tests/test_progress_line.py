"""The progress line of long work: a live line on a terminal, sparse plain lines elsewhere, with the time left."""

from __future__ import annotations

import io
import time

import pytest

from gpulab.progress_line import ProgressLine, clock
from gpulab.studies.progress import finished_counter, watching
from gpulab.validation.suite_progress import SuiteProgress


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_away_from_a_terminal_lines_are_sparse_and_say_the_time_left():
    out, now = io.StringIO(), Clock()
    with ProgressLine("study s", 252, unit="runs finished", stream=out, live=False, now=now) as line:
        for done in range(1, 253):
            now.t += 1.0  # a run a second: never a minute between two tenths
            line.update(done)
    lines = out.getvalue().splitlines()
    assert 9 <= len(lines) <= 12  # a line per tenth of the work (and none per run), the last at the end
    assert lines[0] == "study s: 26/252 runs finished (10 %) · 26 s elapsed · about 3:46 left"
    assert lines[-1] == "study s: 252/252 runs finished (100 %) · 4:12 elapsed"
    assert "left" not in lines[-1]


def test_a_slow_start_still_prints_a_line_a_minute_and_is_not_taken_for_the_pace():
    out, now = io.StringIO(), Clock()
    line = ProgressLine("study s", 1000, stream=out, live=False, now=now)
    now.t += 61  # the first run: workers starting, compiling
    line.update(1)
    now.t += 10
    line.update(2)  # not yet a minute since the last line: nothing
    now.t += 50
    line.update(7)  # 6 runs in the 60 s since the first: 10 s a run
    assert out.getvalue().splitlines() == [
        "study s: 1/1000 runs (0 %) · 1:01 elapsed",  # one run says nothing of the pace
        "study s: 7/1000 runs (0 %) · 2:01 elapsed · about 2:45:30 left",
    ]


def test_on_a_terminal_it_is_one_line_redrawn_in_place():
    out, now = io.StringIO(), Clock()
    with ProgressLine("suite", 40, unit="tests", stream=out, live=True, now=now) as line:
        for done in range(1, 41):
            now.t += 1
            line.update(done, detail=f"test_{done}")
    text = out.getvalue()
    assert "\x1b[" in text and "suite: 40/40 tests (100 %)" in text and "test_40" in text
    assert text.count("\n") <= 2  # redrawn in place, never a new line per update


def test_an_estimate_replaces_the_pace():
    out, now = io.StringIO(), Clock()
    line = ProgressLine("suite", 10, unit="tests", stream=out, live=False, now=now, estimate=lambda done: 90.0)
    now.t += 1
    assert "about 1:30 left" in line.text()
    assert clock(3725) == "1:02:05" and clock(42) == "42 s"


def test_the_study_counter_counts_runs_saved_this_session(tmp_path):
    old = tmp_path / "old-run"
    old.mkdir()
    (old / "row.json").write_text("{}")  # an earlier session's run: not this one's
    count = finished_counter(tmp_path)
    assert count() == 0
    for name in ("b", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "row.json").write_text("{}")
    (tmp_path / "d").mkdir()  # a run still going: its folder, no row yet
    assert count() == 2
    # The packing probe's 4 runs were this session's too: the count goes on from them, so it reads 6 of the
    # session's 252 planned runs (not 2 of the 248 left after the probe).
    assert finished_counter(tmp_path, already=4)() == 4
    assert finished_counter(tmp_path / "b", already=4)() == 4


def test_the_dashboard_address_comes_from_the_scheduler_or_is_left_out():
    from gpulab.studies.cluster import dashboard

    class Client:
        def __init__(self, info):
            self.info = info

        def scheduler_info(self):
            if isinstance(self.info, Exception):
                raise self.info
            return self.info

    served = {"address": "tcp://127.0.0.1:40321", "services": {"dashboard": 38787}}
    assert dashboard(Client(served)) == "http://127.0.0.1:38787/status"
    assert dashboard(Client({"address": "tcp://127.0.0.1:40321", "services": {}})) == ""  # no bokeh: no dashboard
    assert dashboard(Client(OSError("scheduler gone"))) == ""


def test_watching_reports_while_the_work_runs_and_at_the_end(tmp_path):
    seen: list[tuple[int, int]] = []
    done = [0]
    with watching(lambda: done[0], 3, lambda d, t: seen.append((d, t))):
        done[0] = 2
        time.sleep(1.3)
        done[0] = 3
    assert seen[0] == (0, 3) and (2, 3) in seen and seen[-1] == (3, 3)


def _suite(tty: bool, lines: list[str], now: Clock) -> SuiteProgress:
    tests = [
        ("validate/test_health.py::test_gpu_count", {}),
        ("validate/test_speedup.py::test_cpu[torch-style_transfer-1]", {"workload": "style_transfer"}),
        ("validate/test_speedup.py::test_cpu[torch-mnist-1]", {"workload": "mnist"}),
        ("validate/test_speedup.py::test_gpu_over_cpu[torch-chexnet]", {"workload": "chexnet"}),
    ]
    return SuiteProgress(tests, "standard", lines.append, tty=tty, now=now)


def test_the_suite_line_counts_tests_and_takes_the_time_left_from_known_durations():
    lines: list[str] = []
    now = Clock()
    suite = _suite(False, lines, now)
    assert suite.left_s() == pytest.approx(15.9 + 0.5 + 21.4)  # test_gpu_count has no known duration: ~0
    suite.start("validate/test_health.py::test_gpu_count")
    now.t += 0.5
    suite.finish("validate/test_health.py::test_gpu_count")
    suite.start("validate/test_speedup.py::test_cpu[torch-style_transfer-1]")
    now.t += 31.8  # this machine takes twice the known 15.9 s
    suite.finish("validate/test_speedup.py::test_cpu[torch-style_transfer-1]")
    assert suite.left_s() == pytest.approx(2 * (0.5 + 21.4))
    assert lines[-1].startswith("suite (standard): 2/4 tests · 32 s elapsed · about 44 s left")
    for nodeid in suite.order[2:]:
        suite.start(nodeid)
        suite.finish(nodeid)
    assert lines[-1].startswith("suite (standard): 4/4 tests") and "left" not in lines[-1]


def test_on_a_terminal_the_suite_line_names_a_long_test_as_it_starts():
    lines: list[str] = []
    now = Clock()
    suite = _suite(True, lines, now)
    suite.start("validate/test_health.py::test_gpu_count")
    suite.finish("validate/test_health.py::test_gpu_count")
    assert lines == []  # short tests pass silently
    suite.start("validate/test_speedup.py::test_cpu[torch-style_transfer-1]")
    assert lines == [
        "suite (standard): 1/4 tests · 0 s elapsed · about 38 s left · "
        "now validate/test_speedup.py::test_cpu[torch-style_transfer-1]"
    ]
