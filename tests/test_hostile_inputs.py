"""The hostile-input probe's fast subset (tests/probes/hostile_inputs.py --quick): a FIFO, deep JSON, an absurd
figure, a YAML alias bomb, a study directory's deep record, an output that is a link and an output that is its
input, each through the real `gpulab` command; none may be serious (a traceback, a hang, exit 0 on bad input, a
write through a link). The whole probe runs apart: `python tests/probes/hostile_inputs.py`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PROBE = Path(__file__).parent / "probes" / "hostile_inputs.py"


def _probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hostile_inputs", PROBE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def test_the_quick_subset_has_no_serious_or_minor_finding() -> None:
    probe = _probe()
    outcomes = probe.probe(quick=True, jobs=3, timeout=45)
    assert len(outcomes) == len(probe.QUICK)  # every case of the subset still exists
    assert all(o.verdict == probe.GOOD for o in outcomes), probe.report(outcomes)


def test_the_judge_calls_a_hang_a_traceback_and_a_write_through_a_link_serious(tmp_path: Path) -> None:
    probe = _probe()
    case = probe.Case("report FILE", "FIFO", [], tmp_path / "r.json")
    assert probe.classify(probe.Outcome(case, None, "", 45.0)).why.startswith("hang")
    traceback = "Traceback (most recent call last):\n  ...\nValueError: x\n"
    assert probe.classify(probe.Outcome(case, 1, traceback, 1.0)).verdict == probe.SERIOUS
    assert probe.classify(probe.Outcome(case, 0, "", 1.0)).why == "exit 0 on bad input"
    victim = tmp_path / "victim.txt"
    victim.write_text("before")
    linked = probe.Case("report --md", "output is a symbolic link", [], tmp_path / "out", watch=[victim])
    linked.before = {str(victim): probe._digest(victim)}
    victim.write_text("after")
    assert "wrote over victim.txt" in probe.classify(probe.Outcome(linked, 0, "", 1.0)).why
    refused = probe.Outcome(case, 2, f"gpulab: error: report {case.bad} is a named pipe, not a file; ...\n", 1.0)
    assert probe.classify(refused).verdict == probe.GOOD
    unclear = probe.Outcome(case, 1, "usage: gpulab ...\ngpulab: error: bad\n", 1.0)
    assert probe.classify(unclear).verdict == probe.MINOR
