"""Host contention measured while a run measures: CPU pressure (PSI), steal, a CPU calibration at the start and end,
and the rule that calls the host contended."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpulab.names import ValidationTier
from gpulab.records import Report
from gpulab.report import contention
from gpulab.report.contention import calibrate, contended, figures, pressure_pct, read_pressure, report_contention
from gpulab.report.hostload import LoadWatch
from gpulab.report.io import load_report, write_report
from gpulab.validation.session import Lab, Options
from report_builders import full_fingerprint, quiet_proc

# /proc/pressure/cpu as Linux 6.x writes it (`full` from 5.13 on; system-wide it stays 0)
PSI = "some avg10=4.72 avg60=1.88 avg300=0.77 total={some}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={full}\n"
PSI_NO_FULL = "some avg10=0.12 avg60=0.30 avg300=0.25 total={some}\n"  # kernels 4.20 to 5.12
QUIET_CAL = {"one_thread": 84.0, "all_threads": 1790.0, "threads": 16}


def _psi(path: Path, some: int, full: int | None = 0) -> Path:
    path.write_text(PSI.format(some=some, full=full) if full is not None else PSI_NO_FULL.format(some=some))
    return path


def test_pressure_is_read_from_the_kernels_format(tmp_path):
    assert read_pressure(_psi(tmp_path / "cpu", 3478857)) == {"some": 3478857, "full": 0}
    assert read_pressure(_psi(tmp_path / "old", 120, full=None)) == {"some": 120}  # a kernel without `full`
    assert read_pressure(tmp_path / "absent") is None  # no PSI: kernels before 4.20, psi=0, not Linux
    (tmp_path / "odd").write_text("some avg10=1.0 total=many\n")
    assert read_pressure(tmp_path / "odd") is None


@pytest.mark.skipif(not Path("/proc/pressure/cpu").exists(), reason="this kernel has no /proc/pressure/cpu")
def test_this_machines_pressure_file_reads():
    found = read_pressure()
    assert found is not None and found["some"] >= 0


def test_pressure_is_the_share_of_the_wall_time():
    assert pressure_pct({"some": 1_000_000}, {"some": 1_430_000}, 1.0, "some") == 43.0
    assert pressure_pct({"some": 0}, {"some": 5_000_000}, 1.0, "some") == 100.0  # bounded
    assert pressure_pct({"some": 0}, {"some": 10}, 1.0, "full") is None  # not written by this kernel
    assert pressure_pct(None, {"some": 10}, 1.0, "some") is None


def _entry(**extra):
    return {"what": "validation, tier standard", "cpus": 16, "loadavg_start": [0.4], "steal_pct": 0.39, **extra}


def test_the_rule_names_the_figures_that_crossed_a_threshold():
    quiet = _entry(cpu_pressure_pct=0.8, calibration_start=QUIET_CAL, calibration_end=dict(QUIET_CAL, all_threads=1760))
    assert contended(quiet) is None
    assert figures(quiet) == "CPUs 0.8 % of the run under pressure, calibration steady (within 5 %), steal 0.4 %"
    busy = _entry(cpu_pressure_pct=43.2, calibration_start=QUIET_CAL, calibration_end=dict(QUIET_CAL, all_threads=850))
    assert contended(busy) == (
        "CPUs 43 % of the run under pressure, calibration on 16 threads 2.11× slower at the end, steal 0.4 %"
    )
    assert contended(_entry(cpu_pressure_pct=contention.PRESSURE_PCT)) is not None
    assert contended(_entry(cpu_pressure_pct=4.9)) is None
    assert contended(_entry(steal_pct=6.0)) == "steal 6.0 %"
    # A calibration slower at one end is named among the figures, never judged alone: a quiet 2x H200 guest's read
    # 1,506 then 572 M values/s over one healthy run.
    slow_start = _entry(calibration_start=dict(QUIET_CAL, all_threads=1000), calibration_end=QUIET_CAL)
    assert contended(slow_start) is None and "1.79× slower at the start" in figures(slow_start)


def test_cpus_filled_by_others_are_contention_without_pressure():
    """Beside 32 busy loops on 32 CPUs (recorded on a 2x H200 guest): 6.4 % pressure, 99.97 % busy, load 25."""
    hog = _entry(cpus=32, cpu_pressure_pct=6.39, busy_pct=99.97, loadavg_end=[25.06, 8.9, 3.35])
    assert contended(hog).startswith("CPUs 100 % busy, load 25.1 on 32 CPUs at the end")
    quiet = _entry(cpus=32, cpu_pressure_pct=0.08, busy_pct=6.12, loadavg_end=[2.46, 1.25, 0.52])
    assert contended(quiet) is None
    busy_own = _entry(cpus=32, cpu_pressure_pct=0.1, busy_pct=80.0, loadavg_end=[8.0])  # its own all-thread rows
    assert contended(busy_own) is None
    # a 2-CPU host: the run's own rows filled it (not contention); beside another job filling it, contention
    own = _entry(cpus=2, cpu_pressure_pct=1.0, busy_pct=100.0, own_busy_pct=61.0, loadavg_end=[2.2])
    assert contended(own) is None
    shared = _entry(cpus=2, cpu_pressure_pct=1.0, busy_pct=100.0, own_busy_pct=12.0, loadavg_end=[2.2])
    assert contended(shared).startswith("CPUs 100 % busy (this run 12 %), load 2.2 on 2 CPUs at the end")
    # the one-thread figure is recorded, not judged: it moves 1.7× on a quiet VM
    assert contended(_entry(calibration_start=QUIET_CAL, calibration_end=dict(QUIET_CAL, one_thread=40.0))) is None


def test_an_old_entry_is_judged_on_what_it_recorded():
    assert contended(_entry()) is None  # the run 3 recorded load and steal only: it looked idle
    assert report_contention([]) is None
    two = [_entry(what="gpulab run mnist"), _entry(what="gpulab run cifar10", cpu_pressure_pct=60.0)]
    assert report_contention(two) == "gpulab run cifar10: CPUs 60 % of the run under pressure, steal 0.4 %"


def test_the_calibration_really_runs():
    started = time.monotonic()
    found = calibrate(seconds=0.05)
    assert time.monotonic() - started < 3
    assert found["one_thread"] > 0 and found["all_threads"] > 0 and found["threads"] == contention.usable_cpus()


def test_a_run_entry_records_pressure_and_loads_back(tmp_path):
    psi = _psi(tmp_path / "cpu", 1_000_000, full=None)
    watch = LoadWatch("gpulab run mnist", pressure=psi, calibrate_cpu=False)
    time.sleep(0.2)
    _psi(psi, 1_000_000 + 100_000, full=None)  # 0.1 s of waiting in about 0.2 s
    assert "under pressure" in (watch.contention_so_far() or "")
    entry = watch.finish()
    assert 10 <= entry["cpu_pressure_pct"] <= 50 and entry["cpu_pressure_full_pct"] is None
    assert entry["calibration_start"] is None and entry["calibration_end"] is None
    report = Report(fingerprint=full_fingerprint().to_dict(), host_load=[entry])
    assert load_report(write_report(report, tmp_path / "r.json")).host_load == [entry]  # the schema takes it
    entry["calibration_start"] = entry["calibration_end"] = QUIET_CAL
    assert load_report(write_report(report, tmp_path / "r.json")).host_load[0]["calibration_end"] == QUIET_CAL


def test_the_lab_says_whether_the_host_is_contended_so_far(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULAB_PROC", str(quiet_proc(tmp_path / "proc")))  # whatever else this machine runs now
    fp = full_fingerprint(n_gpus=2)
    lab = Lab(options=Options(tier=ValidationTier.STANDARD), fingerprint=fp, gpus=fp.gpus, calibrate_cpu=False)
    psi = tmp_path / "proc" / "pressure" / "cpu"
    assert lab.host_contention() is None
    _psi(psi, 5_000 + 10_000_000)  # every task waited: 10 s of pressure
    assert (lab.host_contention() or "").startswith("CPUs 100 % of the run under pressure")


def test_the_runs_own_cpu_time_is_recorded_apart():
    """This process's CPU time and its finished children's count as the run's own, within the busy figure."""
    watch = LoadWatch("own", calibrate_cpu=False)
    subprocess.run(
        [sys.executable, "-c", "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"],
        check=True,
    )
    entry = watch.finish()
    if entry["busy_pct"] is None:
        pytest.skip("this machine has no /proc/stat")
    assert 0 < entry["own_busy_pct"] <= entry["busy_pct"]
    assert entry["own_busy_pct"] >= 0.3 / (entry["seconds"] * entry["cpus"]) * 100 * 0.5  # 0.4 s of a child's CPU


def _beside_hogs() -> dict:
    watch = LoadWatch("hog", calibrate_cpu=True)
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(max(8, 4 * contention.usable_cpus()))
    ]
    try:
        time.sleep(1.5)
        return watch.finish()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_a_cpu_hog_shows_in_the_measured_figures():
    """Busy processes beside the run, more than this machine has CPUs: the pressure rises where the kernel counts it,
    and the all-threads calibration at the end is slower than at the start. On a machine already busy with other
    work the start can read as slow as the end (0.15 s each): measured up to three times, as a check would be."""
    for _ in range(3):
        entry = _beside_hogs()
        if entry["calibration_end"]["all_threads"] < entry["calibration_start"]["all_threads"]:
            break
    assert entry["calibration_end"]["all_threads"] < entry["calibration_start"]["all_threads"]
    if read_pressure() is not None:
        assert entry["cpu_pressure_pct"] >= contention.PRESSURE_PCT
        assert contended(entry) is not None
    else:  # the calibration alone tells
        assert "slower at the end" in figures(entry)
