"""The verdict harness's tables and expectations (tests/device/verdict_harness.py), run on recorded reports, and its
fault loads' argument handling, CPU stand-in and clean-up (tests/device/fault_load.py)."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPORTS = HERE / "fixtures" / "reports"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, HERE / "device" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


vh = _load("verdict_harness")
fault_load = _load("fault_load")

# GPU 1 of the 2x H100 fixture: NVML's bus id spelling, as the harness reads it.
GPU1 = vh.GpuRef(index=1, position=1, uuid="GPU-aaaa-1111", bus_id="00000000:00:07.0", name="NVIDIA H100 80GB HBM3")


def report(name: str = "h100x2-standard.json") -> dict[str, Any]:
    return json.loads((REPORTS / name).read_text())


def with_status(rep: dict[str, Any], name: str, status: str, message: str | None = None) -> dict[str, Any]:
    rep = copy.deepcopy(rep)
    found = [c for c in rep["checks"] if c["name"] == name]
    assert found, name
    found[0]["status"] = status
    if message is not None:
        found[0]["message"] = message
    return rep


def run(rep: dict[str, Any] | None, exit_status: int | None = 0, name: str = "r", **kw: Any) -> dict[str, Any]:
    return vh.run_entry(name, rep, exit_status=exit_status, seconds=300.0, **kw)


def small(checks: list[tuple[str, str, str]], **extra: Any) -> dict[str, Any]:
    return {"checks": [{"name": n, "status": s, "message": m, "evidence": {}} for n, s, m in checks], **extra}


# --- the table over healthy runs ---------------------------------------------------------------------------------


def test_the_table_counts_each_status_per_check_over_the_real_reports():
    base = report()
    marginal = with_status(base, "probe.matmul.bf16[cuda:1]", "marginal", "bf16 68 %: interval 58-71 % holds 60 %")
    failed = with_status(base, "probe.matmul.bf16[cuda:1]", "fail", "bf16 matmul on cuda:1: 50 % of spec")
    dropped = copy.deepcopy(base)
    dropped["checks"] = [c for c in dropped["checks"] if c["name"] != "probe.p2p"]
    runs = [run(base), run(marginal), run(failed), run(dropped)]

    table = vh.check_table(runs)

    assert len(table) == len(base["checks"])
    row = table["probe.matmul.bf16[cuda:1]"]
    assert (row["pass"], row["marginal"], row["fail"], row["skip"], row["error"], row["missing"]) == (2, 1, 1, 0, 0, 0)
    assert row["repeats"] is False
    assert table["probe.p2p"]["pass"] == 3 and table["probe.p2p"]["missing"] == 1
    assert table["probe.p2p"]["repeats"] is False
    assert table["health.gpu_count"] == {
        "pass": 4,
        "fail": 0,
        "marginal": 0,
        "skip": 0,
        "error": 0,
        "missing": 0,
        "repeats": True,
    }
    assert table["dcgm.diag[r2]"]["skip"] == 4 and table["dcgm.diag[r2]"]["repeats"] is True


def test_an_unknown_status_is_counted_under_its_own_name():
    table = vh.check_table([run(small([("a", "pass", "")])), run(small([("a", "flaky", "")]))])
    assert table["a"]["pass"] == 1 and table["a"]["flaky"] == 1 and table["a"]["repeats"] is False
    md = vh.render_markdown(vh.summarize([run(small([("a", "flaky", "")]))], {}, None))
    assert "a (flaky 1)" in md


@pytest.mark.parametrize("fixture", ["h100x1-standard.json", "h100x2-standard.json", "h200x4-standard.json"])
def test_the_recorded_healthy_runs_pass(fixture):
    verdict = vh.healthy_verdict(run(report(fixture)))
    assert verdict == {"ok": True, "why": "PASS", "marginal": []}


def test_marginal_is_allowed_and_listed_with_its_reason():
    rep = with_status(report(), "scaling.ddp[resnet50,2]", "marginal", "efficiency 89-93 %: straddles 90 %")
    for code in (0, 1):  # 1: if marginal checks alone end the run with a failing exit status
        verdict = vh.healthy_verdict(run(rep, code))
        assert verdict["ok"], verdict
        assert verdict["why"] == "PASS with 1 marginal"
        assert verdict["marginal"] == [
            {"name": "scaling.ddp[resnet50,2]", "message": "efficiency 89-93 %: straddles 90 %"}
        ]
    summary = vh.summarize([run(rep)], {}, None)
    assert summary["ok"]
    assert "scaling.ddp[resnet50,2]: efficiency 89-93 %: straddles 90 %" in vh.render_markdown(summary)


@pytest.mark.parametrize(
    ("rep", "code", "why"),
    [
        (with_status(report(), "probe.p2p", "fail", "no peer access"), 1, "1 check failed: probe.p2p"),
        (with_status(report(), "probe.p2p", "error", "setup broke"), 1, "1 check failed: probe.p2p"),
        ({**report(), "interrupted": True}, 2, "the run was interrupted"),
        (report(), 6, "exit status 6 with no failing check (6: inconclusive)"),
        (report(), 4, "exit status 4 with no failing check"),
        (None, 4, "no report with checks was written (see its pytest.txt)"),
    ],
)
def test_a_healthy_run_that_did_not_pass(rep, code, why):
    verdict = vh.healthy_verdict(run(rep, code))
    assert verdict["ok"] is False
    assert verdict["why"] == why


def test_marginal_does_not_excuse_another_exit_status():
    rep = with_status(report(), "probe.p2p", "marginal", "close")
    assert vh.healthy_verdict(run(rep, 6))["ok"] is False


# --- naming a GPU ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("probe.matmul.bf16[cuda:1] bf16 matmul on cuda:1: 40 % of 989.4", True),
        ("probe.gpus_alike.bf16 cuda:1 at 61% of the median", True),
        ("health.idle_throttle[1] GPU 1 (NVIDIA H100 80GB HBM3, 0000:00:07.0): throttled", True),
        ("occupancy.gpus_free GPU 1 (NVIDIA H100) is in use by other work", True),
        ("scaling.sweep[style_transfer,2] gpu1 slow", True),
        ("something on 0000:00:07.0", True),
        ("something on GPU-AAAA-1111", True),
        ("probe.matmul.bf16[cuda:0] bf16 matmul on cuda:0", False),
        ("GPU 10 (NVIDIA H100) and cuda:11", False),
        ("GPUs 0, 1: no other process", False),
        ("scaling.ddp[resnet50,2] efficiency 61 %", False),
        ("speedup.cpu[torch,mnist,1] on 1 CPU thread(s)", False),
        ("bus 0000:00:17.0", False),
    ],
)
def test_a_gpu_is_named_by_index_position_bus_id_or_uuid(text, named):
    assert GPU1.named_in(text) is named


def test_bus_ids_of_nvml_and_reports_meet():
    assert vh.short_bus_id("00000000:07:00.0") == vh.short_bus_id("0000:07:00.0") == "07:00.0"
    assert vh.short_bus_id("") == ""


# --- the fault expectations --------------------------------------------------------------------------------------


def cotenant_report(failing_name: str, message: str) -> dict[str, Any]:
    rep = with_status(report(), "occupancy.gpus_free", "skip", "not enforced (--allow-busy): GPU 1 is busy")
    return with_status(rep, failing_name, "fail", message)


def test_cotenant_held_when_a_timing_check_names_its_gpu():
    rep = cotenant_report("probe.matmul.bf16[cuda:1]", "bf16 matmul on cuda:1: 301.0 TFLOP/s = 30 % of 989.4")
    rep = with_status(rep, "scaling.ddp[resnet50,2]", "fail", "efficiency 55 %")
    exp = vh.expect_cotenant(run(rep, 1), GPU1)
    assert exp["held"] is True
    assert exp["naming"] == ["probe.matmul.bf16[cuda:1]"]
    assert [c["name"] for c in exp["failing"]] == ["probe.matmul.bf16[cuda:1]", "scaling.ddp[resnet50,2]"]
    assert exp["occupancy"].startswith("skip: not enforced")
    assert exp["why"] == "1 failing check(s) name GPU 1 (NVIDIA H100 80GB HBM3): probe.matmul.bf16[cuda:1]"


def test_cotenant_not_held_when_only_another_gpu_or_no_gpu_is_named():
    rep = cotenant_report("probe.matmul.bf16[cuda:0]", "bf16 matmul on cuda:0: 30 % of 989.4")
    rep = with_status(rep, "scaling.sweep[style_transfer,2]", "fail", "efficiency 60 %")
    exp = vh.expect_cotenant(run(rep, 1), GPU1)
    assert exp["held"] is False
    assert exp["why"].startswith("2 failing check(s), none naming GPU 1")
    assert "probe.matmul.bf16[cuda:0], scaling.sweep[style_transfer,2]" in exp["why"]


def test_cotenant_caught_by_the_occupancy_check_alone_does_not_count():
    rep = with_status(report(), "occupancy.gpus_free", "fail", "GPU 1 (NVIDIA H100) is in use by other work")
    exp = vh.expect_cotenant(run(rep, 1), GPU1)
    assert exp["held"] is False and exp["naming"] == []


def test_cotenant_not_held_when_the_run_passed_or_wrote_nothing():
    exp = vh.expect_cotenant(run(report(), 0), GPU1)
    assert exp["held"] is False and "went unnoticed" in exp["why"]
    exp = vh.expect_cotenant(run(None, None, problem="cotenant load exited 1 before it was ready: OOM"), GPU1)
    assert exp["held"] is False and exp["why"].startswith("cotenant load exited 1")
    assert vh.expect_cotenant(run(report(), 1), None)["held"] is False


def speedup_only(host_load: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    rep = report()
    rep["checks"] = [c for c in rep["checks"] if c["name"].startswith(("speedup.", "known_good."))]
    return {**rep, "host_load": host_load, **extra}


PLAIN_LOAD = {
    "what": "validate",
    "seconds": 120.0,
    "cpus": 32,
    "loadavg_start": [0.3, 0.1, 0.0],
    "loadavg_end": [2.5, 1.3, 0.5],
    "steal_pct": 0.0,
    "busy_pct": 6.1,
}


def test_cpuhog_not_held_while_reports_name_no_contention():
    exp = vh.expect_cpuhog(run(speedup_only([PLAIN_LOAD])))
    assert exp["held"] is False
    assert exp["why"] == "host contention not named (no contention field, no host verdict; busy 6 % of CPU time)"
    assert exp["contention"]["busy_pct"] == [6.1]


def test_cpuhog_held_by_gpulabs_own_rule_on_cpus_filled_by_others():
    busy = {**PLAIN_LOAD, "busy_pct": 99.97, "loadavg_end": [25.06, 8.9, 3.35], "cpu_pressure_pct": 6.39}
    exp = vh.expect_cpuhog(run(speedup_only([busy])))
    assert exp["held"] is True and "gpulab contention rule" in exp["contention"]["where"]


@pytest.mark.parametrize(
    "fields",
    [
        {"contended": True, "cpu_pressure_pct": 81.0},
        {"reason": "contended: CPU pressure 81 % while the suite ran"},
        {"calibration": {"spin_ratio": 0.4, "verdict": "contended"}},
        {"host_verdict": "busy"},
    ],
)
def test_cpuhog_held_when_the_host_load_names_contention(fields):
    exp = vh.expect_cpuhog(run(speedup_only([{**PLAIN_LOAD, **fields}])))
    assert exp["held"] is True, exp["why"]
    assert exp["why"].startswith("no GPU-side check failed; contention named at host_load[0].")
    assert exp["contention"]["named"] and exp["contention"]["fields"]


def test_cpuhog_reads_a_top_level_host_verdict_and_host_checks():
    rep = speedup_only([PLAIN_LOAD], host_verdict={"status": "contended", "reason": "CPU pressure 80 %"})
    assert vh.expect_cpuhog(run(rep))["contention"]["where"] == ["report.host_verdict.status"]
    rep = speedup_only([PLAIN_LOAD])
    rep["checks"].append({"name": "host.contention", "status": "marginal", "message": "CPU pressure 40 %"})
    exp = vh.expect_cpuhog(run(rep, 1))
    assert exp["held"] is True and exp["contention"]["where"] == ["check host.contention"]


@pytest.mark.parametrize(
    "fields",
    [
        {"contended": False, "cpu_pressure_pct": 0.3},
        {"reason": "not contended"},
        {"host_verdict": "quiet"},
        {"calibration": {"spin_ratio": 0.99}},
    ],
)
def test_a_quiet_host_is_not_taken_for_a_contended_one(fields):
    contention = vh.host_contention(run(speedup_only([{**PLAIN_LOAD, **fields}])))
    assert contention["named"] is False
    assert contention["fields"]  # shown all the same


def test_cpuhog_not_held_when_a_gpu_side_check_fails_but_host_side_failures_are_allowed():
    named = [{**PLAIN_LOAD, "contended": True}]
    rep = with_status(speedup_only(named), "known_good.torch.mnist[gpu,1,bf16]", "fail", "mnist at 70 % of known-good")
    exp = vh.expect_cpuhog(run(rep, 1))
    assert exp["held"] is False
    assert exp["why"] == "GPU-side checks failed: known_good.torch.mnist[gpu,1,bf16]"
    rep = with_status(speedup_only(named), "speedup.cpu[torch,mnist,32]", "fail", "slow")
    exp = vh.expect_cpuhog(run(rep, 1))
    assert exp["held"] is True and exp["host_failing"] == ["speedup.cpu[torch,mnist,32]"]
    assert exp["why"].endswith("(host-side checks failed: speedup.cpu[torch,mnist,32])")


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("speedup.cpu[torch,mnist,32]", True),
        ("probe.matmul.fp32[cpu, 32 threads]", True),
        ("probe.copy_host.none[cpu, 32 threads]", True),
        ("host.contention", True),
        ("speedup.gpu_over_cpu[torch,mnist]", False),
        ("probe.matmul.fp32[cuda:0]", False),
        ("known_good.torch.mnist[gpu,1,bf16]", False),
    ],
)
def test_host_side_checks(name, host):
    assert vh.host_side(name) is host


def occupancy_only(status: str, message: str) -> dict[str, Any]:
    rep = report()
    rep["checks"] = [c for c in rep["checks"] if c["name"] in ("gpus.selected", "occupancy.gpus_free")]
    return with_status(rep, "occupancy.gpus_free", status, message)


HELD_MEMORY = (
    "GPU 1 (NVIDIA H100 80GB HBM3) is in use by other work: 1 compute process (python3, pid 4242, 54.3 GiB) "
    "(read from NVML). Timing tests are skipped, as they would measure the contention: stop that work, ..."
)


def test_gpumem_held_when_occupancy_fails_naming_the_gpu():
    exp = vh.expect_gpumem(run(occupancy_only("fail", HELD_MEMORY), 1), GPU1)
    assert exp["held"] is True and exp["why"] == "occupancy.gpus_free failed naming GPU 1 (NVIDIA H100 80GB HBM3)"


@pytest.mark.parametrize(
    ("rep", "code", "why"),
    [
        (occupancy_only("pass", "GPUs 0, 1: no other process"), 0, "occupancy.gpus_free pass: GPUs 0, 1: no other"),
        (occupancy_only("fail", HELD_MEMORY.replace("GPU 1", "GPU 0")), 1, "occupancy.gpus_free failed without"),
        (occupancy_only("fail", HELD_MEMORY), 0, "occupancy.gpus_free failed but the run exited 0"),
        (small([("gpus.selected", "pass", "all")]), 0, "occupancy.gpus_free did not run"),
    ],
)
def test_gpumem_not_held(rep, code, why):
    exp = vh.expect_gpumem(run(rep, code), GPU1)
    assert exp["held"] is False and exp["why"].startswith(why)


# --- the summary -------------------------------------------------------------------------------------------------


def test_summary_ok_only_when_every_healthy_run_passed_and_every_expectation_held(tmp_path):
    healthy = [run(report(), 0, "healthy-1"), run(report(), 0, "healthy-2")]
    cotenant = run(
        cotenant_report("probe.matmul.fp32[cuda:1]", "fp32 matmul on cuda:1: 20 % of 67"),
        1,
        "fault-cotenant",
        command=["-m", "pytest", "validate/", "-k", "occupancy or probes or scaling", "--allow-busy"],
    )
    gpumem = run(occupancy_only("fail", HELD_MEMORY), 1, "fault-gpumem")
    cpuhog = run(speedup_only([PLAIN_LOAD]), 0, "fault-cpuhog")
    good = vh.summarize(healthy, {"cotenant": cotenant, "gpumem": gpumem}, GPU1, {"host": "h", "tier": "standard"})
    assert good["ok"] is True and good["reasons"] == []
    assert good["table"]["health.gpu_count"]["pass"] == 2

    bad = vh.summarize(healthy, {"cotenant": cotenant, "cpuhog": cpuhog, "gpumem": gpumem}, GPU1, {"host": "h"})
    assert bad["ok"] is False
    assert bad["reasons"] == ["cpuhog: host contention not named (no contention field, no host verdict; busy 6 % "
                              "of CPU time)"]  # fmt: skip
    assert [n for n, f in bad["faults"].items() if f["expectation"]["held"]] == ["cotenant", "gpumem"]

    md = vh.write_outputs(tmp_path, bad)
    assert (tmp_path / "harness.md").read_text() == md
    back = json.loads((tmp_path / "harness.json").read_text())
    assert back["ok"] is False and back["faults"]["cpuhog"]["expectation"]["held"] is False
    assert "**NOT OK**:" in md
    assert "| healthy-1 | 0 | 300.0 | PASS | - | - |" in md
    assert "| fault-cpuhog | 0 | 300.0 | EXPECTATION NOT HELD |" in md
    assert "| cotenant | occupancy or probes or scaling |" in md
    assert "| health.gpu_count | 2 | 0 | 0 | 0 | 0 | 0 | yes |" in md


def test_summary_of_nothing_or_an_interrupted_harness_is_not_ok():
    assert vh.summarize([], {}, None)["reasons"] == ["nothing ran"]
    stopped = vh.summarize([run(report())], {}, None, {"interrupted": True})
    assert stopped["ok"] is False and stopped["reasons"] == ["the harness was interrupted"]


def test_markdown_cells_keep_the_table_whole():
    rep = with_status(report(), "probe.p2p", "fail", "a | b\nc")
    md = vh.render_markdown(vh.summarize([run(rep, 1)], {}, None))
    assert "- r · probe.p2p (fail): a \\| b c" in md


def test_a_run_is_read_through_its_record_or_else_the_newest_report(tmp_path):
    rep_path = tmp_path / "report-h-20260101T000000Z.json"
    rep_path.write_text(json.dumps(report()))
    record = tmp_path / "run.json"
    record.write_text(json.dumps({"exit_status": 1, "report": {"json": str(rep_path)}}))
    rep, path, code = vh.read_outcome(tmp_path, record)
    assert path == str(rep_path) and code == 1 and rep["tier"] == "standard"
    record.unlink()
    rep, path, code = vh.read_outcome(tmp_path, record)
    assert path == str(rep_path) and code is None and len(rep["checks"]) > 10
    assert vh.read_outcome(tmp_path, record, since=time.time() + 60) == (None, None, None)  # an older run's
    assert vh.read_outcome(tmp_path / "none", record) == (None, None, None)


def test_the_target_gpu_is_the_last_selected_one():
    found = [{"index": i, "name": "H100", "uuid": f"GPU-{i}", "bus_id": f"00000000:0{6 + i}:00.0"} for i in range(4)]
    assert vh.target_gpu(found, "all") == vh.GpuRef(3, 3, "GPU-3", "00000000:09:00.0", "H100")
    assert vh.target_gpu(found, "0,2") == vh.GpuRef(2, 1, "GPU-2", "00000000:08:00.0", "H100")
    assert vh.target_gpu(found, "2") == vh.GpuRef(1, 1, "GPU-1", "00000000:07:00.0", "H100")
    assert vh.target_gpu([], "all") is None


def test_harness_arguments():
    args = vh.parse_args([])
    assert (args.tier, args.healthy, args.fault_list) == ("standard", 3, ["cotenant", "cpuhog", "gpumem"])
    args = vh.parse_args(["--quick", "--faults", "gpumem"])
    assert (args.tier, args.healthy, args.fault_list) == ("quick", 1, ["gpumem"])
    assert vh.parse_args(["--quick", "--healthy", "0", "--faults", ""]).fault_list == []
    for bad in (["--faults", "cotenant,thermal"], ["--duty", "0"], ["--hold-fraction", "1"], ["--healthy", "-1"]):
        with pytest.raises(SystemExit) as stop:
            vh.parse_args(bad)
        assert stop.value.code == 2


# --- the fault loads ---------------------------------------------------------------------------------------------


def test_load_arguments_and_defaults():
    args = fault_load.parse_args(["gpu"])
    assert (args.duty, args.period_ms, args.hold_fraction, args.device, args.size) == (0.6, 50.0, None, "cuda", 8192)
    args = fault_load.parse_args(["--seconds", "2", "gpu", "--device", "cpu", "--duty", "0"])
    assert (args.seconds, args.duty, args.size) == (2.0, 0.0, 64)
    assert fault_load.parse_args(["gpu", "--duty", "0", "--hold-fraction", "0.7"]).hold_fraction == 0.7
    assert fault_load.parse_args(["cpu", "--procs", "3"]).procs == 3
    assert fault_load.parse_args(["cpu"]).procs == vh.cpus() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    "argv",
    [
        ["gpu", "--duty", "1.5"],
        ["gpu", "--duty", "x"],
        ["gpu", "--period-ms", "0"],
        ["gpu", "--hold-fraction", "1"],
        ["gpu", "--hold-fraction", "0"],
        ["gpu", "--device", "cpu", "--hold-fraction", "0.5"],
        ["gpu", "--size", "0"],
        ["cpu", "--procs", "0"],
        ["--seconds", "-1", "cpu"],
        [],
    ],
)
def test_load_refuses_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        fault_load.parse_args(argv)
    assert stop.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_the_duty_cycle_load_runs_on_the_cpu(tmp_path):
    ready = tmp_path / "ready"
    cmd = [sys.executable, str(HERE / "device" / "fault_load.py"), "--ready-file", str(ready), "--seconds", "1.5"]
    cmd += ["gpu", "--device", "cpu", "--duty", "0.5", "--period-ms", "20"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ready.read_text().startswith("gpu load on cpu: duty 0.5 of 20 ms")
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith("done: seconds ")
    share = float(line.rsplit("busy_share ", 1)[1])
    assert 0.2 < share < 0.9  # about half: the busy part is measured, the rest slept


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")


def _pids_in_group(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def test_a_load_and_every_process_it_forked_are_stopped_with_its_group(tmp_path):
    h = vh.Harness(tmp_path, "quick", "all", 60)
    proc = h.load(tmp_path, "cpuhog", ["cpu", "--procs", "2"])
    try:
        assert "cpu load: 2 busy loops" in (tmp_path / "cpuhog.ready").read_text()
        members = _pids_in_group(proc.pid)
        assert proc.pid in members and len(members) == 3  # the parent and its two loops
    finally:
        h.children.stop_all(grace_s=5)
    time.sleep(0.2)
    assert _pids_in_group(proc.pid) == []
    assert not any(_alive(p) for p in members)
    assert h.children.procs == []


def test_a_load_that_dies_before_it_is_ready_is_reported(tmp_path):
    h = vh.Harness(tmp_path, "quick", "all", 60)
    with pytest.raises(vh.LoadFailed, match="exited 2 before it was ready"):
        h.load(tmp_path, "broken", ["gpu", "--duty", "7"])
    assert h.children.procs == []


def test_survivors_of_a_dead_leader_are_stopped(tmp_path):
    """A group whose leader has exited still has its members stopped (SIGKILL to the group)."""
    script = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\nelse:\n    print(os.getpid(), flush=True)\n"
    children = vh.Children()
    proc = children.start([sys.executable, "-c", script], dict(os.environ), tmp_path / "log")
    proc.wait(30)
    deadline = time.monotonic() + 10
    while not _pids_in_group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _pids_in_group(proc.pid)
    assert left, "the forked child should still be running"
    children.stop(proc)
    time.sleep(0.2)
    assert _pids_in_group(proc.pid) == []
