"""gpulab.checks.occupancy: other work on the selected GPUs is named, and GPUs hidden from the run are counted.

No GPU here: NVML is a small stand-in binding (the boundary gpulab.hw.nvml reads through); captures are real files.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from capture_edits import H200_XML, P100_XML, write
from gpulab.checks import occupancy
from gpulab.hw.discover import fingerprint
from gpulab.records import GpuInfo

GIB = 1024**3
MIB = 1024**2


class NVMLError(Exception):
    pass


class NVMLError_NoPermission(NVMLError):
    pass


def refused(*_args):
    raise NVMLError_NoPermission("Insufficient Permissions")


def proc(pid, used_bytes):
    return SimpleNamespace(pid=pid, usedGpuMemory=used_bytes)


def binding(used=0, total=80 * GIB, compute=(), graphics=(), util=(0,), names=None, **overrides):
    """One GPU (NVML index 0, and 1 with the same readings); `util` is read in turn, one value per sample."""
    readings = iter(util)
    last = [0]

    def rates(handle):
        last[0] = next(readings, last[0])
        return SimpleNamespace(gpu=last[0], memory=0)

    nv = SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlMemory_v2=0x02000028,
        nvmlDeviceGetMemoryInfo=lambda h, v=None: SimpleNamespace(total=total, used=used),
        nvmlDeviceGetComputeRunningProcesses=lambda h: list(compute),
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: list(graphics),
        nvmlSystemGetProcessName=lambda pid: (names or {}).get(pid, b"/usr/bin/python3"),
        nvmlDeviceGetUtilizationRates=rates,
    )
    for name, value in overrides.items():
        setattr(nv, name, value)
    return nv


def h100(index=0):
    return GpuInfo(index=index, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{index}", bus_id="", pci_device_id="10de:2330")


def fake_proc(root: Path, tree: dict[int, tuple[int, str]]) -> Path:
    """A /proc holding `tree`: pid -> (parent pid, comm)."""
    for pid, (ppid, comm) in tree.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1\n")
        (root / str(pid) / "comm").write_text(comm + "\n")
    (root / "self").mkdir()
    return root


def live(nv, gpus=None, ours=(), proc=Path("/nonexistent"), samples=4):
    pauses: list[float] = []
    seen = occupancy.look(
        gpus or [h100()], nv=nv, ours=ours, samples=samples, interval_s=0.1, proc=proc, sleep=pauses.append
    )
    return seen, pauses


def test_a_foreign_process_is_named_with_its_memory_and_the_utilisation(tmp_path):
    procfs = fake_proc(tmp_path, {4242: (1, "python3")})
    nv = binding(used=42_800 * MIB, compute=[proc(4242, 42_700 * MIB)], util=(100, 100, 99, 100))
    seen, pauses = live(nv, proc=procfs)
    assert pauses == [0.1, 0.1, 0.1]  # 4 samples, 3 pauses between them
    (gpu,) = seen.gpus
    assert [(p.pid, p.name, p.used_mib, p.kinds) for p in gpu.foreign] == [(4242, "python3", 42_700, ("compute",))]
    assert gpu.unexplained_mib == 100 and gpu.utilisation_pct == [100, 100, 99, 100]
    assert gpu.busy_reasons() == ["pid 4242 python3 holds 41.7 GiB", "99.8 % utilised"]
    check = occupancy.gpus_free(seen, [h100()])
    assert check.name == "occupancy.gpus_free" and check.status == "fail"
    assert check.message.startswith(
        "GPU 0 (NVIDIA H100 80GB HBM3) is in use by other work: pid 4242 python3 holds 41.7 GiB, 99.8 % utilised"
    )
    assert "stop that work, select other GPUs with --gpus, or pass --allow-busy" in check.message
    assert "cannot see" not in check.message  # every byte in use is explained by the listed process
    assert check.evidence["gpus"][0]["processes"][0]["pid"] == 4242
    line = occupancy.busy_line(seen.busy, "timing would measure the contention; --allow-busy runs them anyway")
    assert line == (
        "GPU 0 is busy (pid 4242 python3 holds 41.7 GiB, 99.8 % utilised): timing would measure the contention; "
        "--allow-busy runs them anyway"
    )


def test_allow_busy_records_the_contention_as_a_skip():
    seen, _ = live(binding(used=42 * GIB, compute=[proc(7, 42 * GIB)], util=(100,)))
    check = occupancy.gpus_free(seen, [h100()], allow_busy=True)
    assert check.status == "skip" and check.evidence["allowed_busy"] is True
    assert check.message.startswith("not enforced (--allow-busy): GPU 0 is busy (pid 7 python3 holds 42.0 GiB")
    assert check.message.endswith("timings in this report include the contention")


def test_the_runs_own_process_tree_never_counts(tmp_path):
    procfs = fake_proc(tmp_path, {100: (1, "pytest"), 101: (100, "python"), 102: (101, "worker"), 200: (1, "other")})
    ours = occupancy.own_pids(100, procfs)
    assert ours == {100, 101, 102}
    nv = binding(used=3 * GIB, compute=[proc(101, 2 * GIB), proc(102, 1 * GIB)])
    seen, _ = live(nv, ours=ours, proc=procfs)
    (gpu,) = seen.gpus
    assert [p.ours for p in gpu.processes] == [True, True] and gpu.foreign == []
    assert gpu.unexplained_mib == 0 and not gpu.busy  # its memory is explained by the listed processes
    assert occupancy.gpus_free(seen, [h100()]).status == "pass"


def test_own_pids_defaults_to_this_process():
    import os

    assert os.getpid() in occupancy.own_pids()


def test_memory_no_listed_process_explains_is_held_by_something_not_visible():
    seen, _ = live(binding(used=20 * GIB, util=(0, 0, 0, 0)))
    (gpu,) = seen.gpus
    assert gpu.unexplained_mib == 20 * 1024
    assert gpu.busy_reasons() == ["20.0 GiB of 80.0 GiB held by something not visible (no listed process)"]
    check = occupancy.gpus_free(seen, [h100()])
    assert check.status == "fail" and "another container or PID namespace, or a VM" in check.message


def test_an_idle_gpu_is_free_and_small_use_stays_below_the_thresholds():
    # The driver's reservation counted as used (NVML memory v1): 616 MiB on a 141 GiB board; utilisation blips.
    seen, _ = live(binding(used=616 * MIB, util=(0, 3, 0, 0)))
    assert not seen.gpus[0].busy
    check = occupancy.gpus_free(seen, [h100()])
    assert (check.status, check.message) == ("pass", "GPU 0: no other process, memory or utilisation in use")
    assert check.evidence["thresholds"]["utilisation_pct"] == occupancy.UTILISATION_PCT


def test_memory_limit_grows_with_large_boards():
    assert occupancy.GpuLook(0, "x", "u", total_mib=12 * 1024).memory_limit_mib == 1024
    assert occupancy.GpuLook(0, "x", "u", total_mib=288 * 1024).memory_limit_mib == pytest.approx(0.01 * 288 * 1024)
    assert occupancy.GpuLook(0, "x", "u").memory_limit_mib == 1024


def test_a_display_server_is_no_contention_but_any_foreign_compute_context_is(tmp_path):
    procfs = fake_proc(tmp_path, {900: (1, "Xorg"), 901: (1, "sleeper")})
    nv = binding(used=60 * MIB, graphics=[proc(900, 40 * MIB)], compute=[proc(901, 20 * MIB)])
    seen, _ = live(nv, proc=procfs)
    assert seen.gpus[0].busy_reasons() == ["pid 901 sleeper holds 20 MiB"]
    seen, _ = live(binding(used=40 * MIB, graphics=[proc(900, 40 * MIB)]), proc=procfs)
    assert not seen.gpus[0].busy


def test_a_process_in_two_lists_is_counted_once():
    nv = binding(used=2 * GIB, compute=[proc(5, 2 * GIB)], graphics=[proc(5, 2 * GIB)])
    seen, _ = live(nv)
    (only,) = seen.gpus[0].processes
    assert only.kinds == ("compute", "graphics") and seen.gpus[0].unexplained_mib == 0


def test_unreported_process_memory_leaves_the_hidden_part_unknown():
    seen, _ = live(binding(used=30 * GIB, compute=[proc(5, None)]))
    gpu = seen.gpus[0]
    assert gpu.unexplained_mib is None
    assert gpu.busy_reasons() == ["pid 5 python3 memory not reported"]


def test_process_names_come_from_proc_then_nvml(tmp_path):
    procfs = fake_proc(tmp_path, {10: (1, "trainer")})
    assert occupancy.process_name(10, "/opt/x/bin/other", procfs) == "trainer"
    assert occupancy.process_name(11, "/opt/x/bin/other", procfs) == "other"
    assert occupancy.process_name(12, None, procfs) == "(not visible here)"


def test_a_refused_process_list_leaves_all_memory_unexplained():
    nv = binding(
        used=5 * GIB, nvmlDeviceGetComputeRunningProcesses=refused, nvmlDeviceGetGraphicsRunningProcesses=refused
    )
    seen, _ = live(nv)
    gpu = seen.gpus[0]
    assert gpu.processes_listed is False
    assert gpu.busy_reasons() == ["5.0 GiB of 80.0 GiB held by something not visible (no process list given)"]


def test_utilisation_not_supported_is_not_busy():
    seen, _ = live(binding(nvmlDeviceGetUtilizationRates=refused))
    assert seen.gpus[0].utilisation_pct == [] and not seen.gpus[0].busy


def test_nvml_unusable_is_a_skip_not_a_verdict():
    def no_driver():
        raise NVMLError("Driver Not Loaded")

    seen, _ = live(binding(nvmlInit=no_driver))
    assert seen.problem and "NVML init failed" in seen.problem
    check = occupancy.gpus_free(seen, [h100()])
    assert check.status == "skip" and "could not see what else runs on the GPUs" in check.message


def test_each_gpu_is_judged_on_its_own():
    gpus = [h100(0), h100(1)]
    used = {0: 0, 1: 30 * GIB}
    nv = binding(nvmlDeviceGetMemoryInfo=lambda h, v=None: SimpleNamespace(total=80 * GIB, used=used[h]))
    seen, _ = live(nv, gpus=gpus)
    assert [g.index for g in seen.busy] == [1]
    check = occupancy.gpus_free(seen, gpus)
    assert check.status == "fail" and check.message.startswith("GPU 1 (NVIDIA H100 80GB HBM3) is in use")


def test_no_gpu_and_unread_gpus_are_skips():
    assert occupancy.gpus_free(None, []).status == "skip"
    check = occupancy.gpus_free(occupancy.Occupancy("NVML"), [h100()])
    assert check.status == "skip" and "GPU 0: not read when the run started" in check.message
    assert occupancy.look([], nv=binding()).gpus == []


# Captures: the same look from `nvidia-smi -q -x`.


def capture(path: Path) -> tuple[list[GpuInfo], occupancy.Occupancy]:
    gpus = fingerprint(smi_xml=path, probe_frameworks=False).gpus
    return gpus, occupancy.look(gpus, path)


def test_the_2017_p100_capture_holds_memory_no_process_explains():
    gpus, seen = capture(P100_XML)
    assert seen.source == f"the capture {P100_XML}"
    first, second = seen.gpus
    assert (first.used_mib, first.total_mib, first.processes, first.utilisation_pct) == (11400, 11567, [], [33.4])
    assert first.busy_reasons() == [
        "11.1 GiB of 11.3 GiB held by something not visible (no listed process)",
        "33.4 % utilised",
    ]
    assert second.busy_reasons()[0] == "11.5 GiB of 12.0 GiB held by something not visible (no listed process)"
    check = occupancy.gpus_free(seen, gpus)
    assert check.status == "fail"
    assert "GPU 0 (Tesla P100-PCIE-12GB) is in use by other work: 11.1 GiB of 11.3 GiB" in check.message
    assert "GPU 1 (Tesla P100-PCIE-12GB_2)" in check.message
    assert "belongs to work this view cannot see" in check.message


def test_the_idle_h200_capture_is_free():
    gpus, seen = capture(H200_XML)
    assert [g.used_mib for g in seen.gpus] == [0, 0, 0, 0] and seen.busy == []
    check = occupancy.gpus_free(seen, gpus)
    assert (check.status, check.message) == ("pass", "GPUs 0, 1, 2, 3: no other process, memory or utilisation in use")


def with_process(xml: str, processes: str, used: str = "42700 MiB") -> str:
    """The H200 capture with GPU 0 using `used` and listing `processes`."""
    xml = xml.replace("<used>0 MiB</used>", f"<used>{used}</used>", 1)
    return xml.replace("<processes>\n\t\t</processes>", f"<processes>{processes}</processes>", 1)


def test_a_captured_process_is_named(tmp_path):
    info = (
        "<process_info><gpu_instance_id>N/A</gpu_instance_id><pid>3171</pid><type>C</type>"
        "<process_name>/usr/bin/python3.12</process_name><used_memory>42700 MiB</used_memory></process_info>"
    )
    xml = write(tmp_path / "busy.xml", with_process(H200_XML.read_text(), info))
    _, seen = capture(xml)
    assert [g.index for g in seen.busy] == [0]
    assert seen.gpus[0].busy_reasons() == ["pid 3171 python3.12 holds 41.7 GiB"]


def test_a_capture_without_a_process_list_says_so(tmp_path):
    xml = write(tmp_path / "na.xml", with_process(H200_XML.read_text(), "N/A", used="8000 MiB"))
    _, seen = capture(xml)
    assert seen.gpus[0].processes_listed is False
    assert seen.gpus[0].busy_reasons() == ["7.8 GiB of 140.4 GiB held by something not visible (no process list given)"]


# gpus.selected: GPUs the driver shows that the environment or --gpus leave out.


@pytest.fixture(scope="module")
def h200s() -> list[GpuInfo]:
    return fingerprint(smi_xml=H200_XML, probe_frameworks=False).gpus


def test_an_empty_cuda_visible_devices_hiding_every_gpu_fails(h200s):
    check = occupancy.gpus_selected(h200s[:1], [], env_value="", spec="all", expect=None)
    assert check.name == "gpus.selected" and check.status == "fail"
    assert check.message == (
        "NVML shows GPU 0 but none is tested: CUDA_VISIBLE_DEVICES='' hides GPU 0; a run that tests no GPU proves "
        "nothing: unset CUDA_VISIBLE_DEVICES (or list every GPU to test in it)"
    )
    assert check.evidence["cuda_visible_devices"] == ""


def test_cuda_visible_devices_leaving_fewer_than_expected_fails(h200s):
    from gpulab.hw.cuda_visible import visible_to_cuda
    from gpulab.validation.session import gpus_for_option

    env = "1,9,2"  # CUDA stops at the 9
    selected = gpus_for_option(visible_to_cuda(h200s, env), "all")
    check = occupancy.gpus_selected(h200s, selected, env_value=env, spec="all", expect=4)
    assert check.status == "fail"
    assert "only 1 of the --expect-gpus 4 are tested: CUDA_VISIBLE_DEVICES='1,9,2' hides GPUs 0, 2, 3" in check.message
    # Without --expect-gpus it is a choice: said, not failed.
    check = occupancy.gpus_selected(h200s, selected, env_value=env, spec="all", expect=None)
    assert check.status == "pass" and check.message.startswith("testing GPU 1 of the 4 NVML shows")


def test_gpus_option_leaving_fewer_than_expected_fails(h200s):
    check = occupancy.gpus_selected(h200s, h200s[:2], env_value=None, spec="2", expect=4)
    assert check.status == "fail" and "--gpus 2 leaves out GPUs 2, 3: select them with --gpus all" in check.message


def test_a_host_short_of_gpus_is_left_to_gpu_count(h200s):
    check = occupancy.gpus_selected(h200s, h200s, env_value=None, spec="all", expect=8)
    assert (check.status, check.message) == ("pass", "testing all 4 GPUs NVML shows")


def test_no_gpu_seen_is_a_skip():
    assert occupancy.gpus_selected([], [], env_value=None, spec="all", expect=None).status == "skip"
