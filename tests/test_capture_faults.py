"""Faults no public capture shows, judged on real captures edited into that form (each edit named here):
an x1 riser under load, a saturated PCIe replay counter, an idle power limit below the default, impossible
readings, more <gpu> sections than attached, and a vGPU host's VMs seen by the occupancy check."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulab.checks import health, occupancy
from gpulab.errors import GpulabError
from gpulab.hw.smi.xml import parse_capture_text

CAPTURES = Path(__file__).parent / "fixtures" / "captures"


def _edit(name: str, *swaps: tuple[str, str]) -> str:
    text = (CAPTURES / name).read_text()
    for old, new in swaps:
        assert old in text, old
        text = text.replace(old, new)
    return text


def _gpu(text: str, index: int = 0):
    return parse_capture_text(text).gpus[index]


def test_x1_riser_under_load_fails_naming_the_riser():
    # t4-passthrough.xml: busy in P0 with a process; its x8 link edited to x1.
    gpu = _gpu(_edit("t4-passthrough.xml", ("<current_link_width>8x", "<current_link_width>1x")))
    check = health.pcie_link(gpu, None, source="the capture")
    assert check.status == "fail"
    assert "width x1 of x16: the card sits on an x1 riser" in check.message


def test_saturated_replay_counter_fails_with_bound_and_cause():
    # rtx-3090-passthrough.xml: replay counter edited to the 16-bit limit, and then to one rollover.
    text = _edit(
        "rtx-3090-passthrough.xml", ("<replay_counter>0</replay_counter>", "<replay_counter>65535</replay_counter>")
    )
    check = health.pcie_replays(_gpu(text), "the capture")
    assert check.status == "fail" and "65535 PCIe replays" in check.message and "(saturated)" in check.message
    assert check.evidence["bound"] == health.REPLAY_BOUND and "riser" in check.message
    rolled = text.replace("<replay_rollover_counter>0<", "<replay_rollover_counter>3<")
    assert "rolled over 3 times" in health.pcie_replays(_gpu(rolled), "the capture").message
    # The M10 host's 15 replays are a handful: within the bound.
    m10 = parse_capture_text((CAPTURES / "tesla-m10-vgpu-host.xml").read_text()).gpus[1]
    assert m10.pcie_replays == 15 and health.pcie_replays(m10).status == "pass"


def test_idle_power_limit_below_default_fails_naming_both_numbers():
    # rtx-3090-idle-sw-power-cap.xml: SW power cap at P8 idle; its 350 W limit edited down to 200 W.
    harmless = _gpu((CAPTURES / "rtx-3090-idle-sw-power-cap.xml").read_text())
    ok = health.idle_throttle(harmless, "the capture")
    assert ok.status == "pass" and "with the default limit 350 W: harmless" in ok.message
    text = _edit(
        "rtx-3090-idle-sw-power-cap.xml",
        ("<current_power_limit>350.00 W</current_power_limit>", "<current_power_limit>200.00 W</current_power_limit>"),
    )
    check = health.idle_throttle(_gpu(text), "the capture")
    assert check.status == "fail"
    assert "the power limit is 200 W, below the board's default 350 W" in check.message


def test_temperature_above_slowdown_fails_against_the_gpus_own_threshold():
    # a10g-passthrough.xml: 17 C edited to 97 C, above its own 95 C slowdown threshold.
    gpu = _gpu(_edit("a10g-passthrough.xml", ("<gpu_temp>17 C</gpu_temp>", "<gpu_temp>97 C</gpu_temp>")))
    check = health.thermal(gpu, "the capture")
    assert check.status == "fail" and "97 C, at or above its slowdown threshold 95 C" in check.message


def test_t_limit_margins_are_thresholds_too():
    # rtx-4090-tlimit.xml reports margins to its T.Limit only: 40 C now, 43 C left, slowdown 2 C and shutdown
    # 7 C beyond it. The margin edited to -3 C puts it past the slowdown point.
    gpu = _gpu((CAPTURES / "rtx-4090-tlimit.xml").read_text())
    assert (gpu.temperature_c, gpu.temp_slowdown_c, gpu.temp_shutdown_c) == (40, 85, 90)
    assert health.thermal(gpu).message.endswith("40 C, 45 C below its slowdown threshold 85 C")
    hot = _gpu(_edit("rtx-4090-tlimit.xml", ("<gpu_temp_tlimit>43 C<", "<gpu_temp_tlimit>-3 C<")))
    check = health.thermal(hot, "the capture")
    assert check.status == "fail" and "40 C, at or above its slowdown threshold 39 C" in check.message


@pytest.mark.parametrize(
    "old, new, words",
    [
        ("<gpu_temp>17 C</gpu_temp>", "<gpu_temp>255 C</gpu_temp>", "a temperature of 255 C (above 150 C)"),
        ("<gpu_util>0 %</gpu_util>", "<gpu_util>4095 %</gpu_util>", "4095 % utilisation (above 100 %)"),
    ],
)
def test_impossible_readings_are_a_corrupt_capture_error(old, new, words):
    with pytest.raises(GpulabError, match="corrupt capture") as err:
        parse_capture_text(_edit("a10g-passthrough.xml", (old, new)), "x.xml")
    assert words in str(err.value) and "\n" not in str(err.value)


def test_more_gpu_sections_than_attached_is_read_not_refused():
    # rtx-2070-x2.xml: two <gpu> sections; attached_gpus edited to 1.
    cap = parse_capture_text(_edit("rtx-2070-x2.xml", ("<attached_gpus>2<", "<attached_gpus>1<")))
    assert len(cap.gpus) == 2 and cap.attached_gpus is None


def test_vgpu_host_vms_are_not_foreign_work():
    from gpulab.hw.discover import fingerprint

    path = CAPTURES / "tesla-m10-vgpu-host.xml"
    gpus = fingerprint(smi_xml=path, probe_frameworks=False).gpus
    seen = occupancy.from_capture(gpus, path)
    assert all(look.processes for look in seen.gpus)  # two VMs on each GPU
    check = occupancy.gpus_free(seen, gpus)
    assert check.status == "skip" and "serving 8 VM processes (the host's purpose, not foreign work)" in check.message
    assert all(health.mode(g) == "vGPU host" for g in gpus)
    assert "a vGPU host's GPU" in (health.whole_gpu_notice(gpus[0]) or "")


def test_windows_desktop_programs_are_graphics_clients_not_foreign_work(tmp_path):
    # tesla-t4-windows-wddm.xml: WDDM lists the desktop's 15 DirectX programs (explorer.exe, ...) as C+G with
    # memory N/A. A CUDA program there is listed C: explorer.exe's entry edited to that type is foreign work.
    from gpulab.hw.discover import fingerprint

    path = CAPTURES / "tesla-t4-windows-wddm.xml"
    gpus = fingerprint(smi_xml=path, probe_frameworks=False).gpus
    assert gpus[0].compute_processes == 0
    seen = occupancy.from_capture(gpus, path)
    assert len(seen.gpus[0].processes) == 15 and {p.kinds for p in seen.gpus[0].processes} == {("graphics",)}
    assert occupancy.gpus_free(seen, gpus).status == "pass"
    cuda = tmp_path / "t4-cuda.xml"
    cuda.write_text(_edit(path.name, ("<pid>15604</pid>\n\t\t\t\t<type>C+G<", "<pid>15604</pid>\n\t\t\t\t<type>C<")))
    check = occupancy.gpus_free(occupancy.from_capture(gpus, cuda), gpus)
    assert check.status == "fail" and "pid 15604 C:\\Windows\\explorer.exe memory not reported" in check.message


def test_old_schema_busy_gpu_is_busy():
    # Fermi, driver 285: <compute_processes> and <memory_usage> in MB, read as today's fields.
    from gpulab.hw.discover import fingerprint

    path = CAPTURES / "tesla-m2090-fermi-driver285.xml"
    gpus = fingerprint(smi_xml=path, probe_frameworks=False).gpus
    assert [(g.memory_total_mib, g.memory_used_mib, g.compute_processes) for g in gpus] == [
        (5375, 2594, 2),
        (5375, 10, 0),
    ]
    check = occupancy.gpus_free(occupancy.from_capture(gpus, path), gpus)
    assert check.status == "fail" and "pid 26931 python holds 2.5 GiB" in check.message


def test_obsolete_driver_fails_with_the_newest_stack_for_the_gpu():
    from gpulab.hw.discover import fingerprint

    fp = fingerprint(smi_xml=CAPTURES / "tesla-k20m-kepler-driver340-busy.xml", probe_frameworks=False)
    check = health.stack_supports_arch(fp)
    assert check.status == "fail"
    assert (
        "Tesla K20m (PCI id 10de:1028, Kepler): driver 340.24 predates every branch the matrix lists" in check.message
    )
    assert "the newest stack for this GPU is driver R470 (470.256.02), CUDA 11.8" in check.message
    assert "PyTorch release the matrix lists (1.13 and later), TensorFlow 2.14" in check.message
    fermi = fingerprint(smi_xml=CAPTURES / "tesla-m2090-fermi-driver285.xml", probe_frameworks=False)
    assert "newest stack for this GPU is driver R390 (390.157), CUDA 8.0" in health.stack_supports_arch(fermi).message


def test_link_is_judged_against_what_the_slot_carries(tmp_path):
    # A real sysfs layout: the GPU's directory sits inside its bridge's, and /sys/bus/pci/devices links to it.
    from gpulab.hw.discover import upstream_port

    bridge = tmp_path / "sys/devices/pci0000:00/0000:00:01.0"
    gpu_dir = bridge / "0000:01:00.0"
    gpu_dir.mkdir(parents=True)
    (bridge / "max_link_width").write_text("8\n")
    (bridge / "max_link_speed").write_text("8.0 GT/s PCIe\n")
    links = tmp_path / "sys/bus/pci/devices"
    links.mkdir(parents=True)
    (links / "0000:01:00.0").symlink_to(gpu_dir)
    assert upstream_port(tmp_path, "0000:01:00.0") == (3, 8)
    assert upstream_port(tmp_path, "0000:02:00.0") == (None, None)
    # t4-passthrough.xml: x8 of x16 under load fails; behind an x8 bridge it is all the slot carries.
    gpu = _gpu((CAPTURES / "t4-passthrough.xml").read_text())
    assert health.pcie_link(gpu, None, "the capture").status == "fail"
    gpu.pcie.width_host_max = 8
    check = health.pcie_link(gpu, None, "the capture")
    assert check.status == "pass" and "the upstream port carries x8: the slot's limit" in check.message


def test_capture_reports_the_hosts_link_generation():
    gpu = _gpu((CAPTURES / "rtx-a5000-laptop.xml").read_text())
    assert (gpu.pcie.gen_max, gpu.pcie.gen_host_max) == (4, 4)
