"""Parsers for nvidia-smi captures, on the real 4x H200 Firecracker fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulab.errors import GpulabError
from gpulab.hw.smi.nvlink import parse_nvlink
from gpulab.hw.smi.topo import parse_topo, parse_topo_text
from gpulab.hw.smi.xml import normalise_bus_id, parse_capture_text, parse_smi_xml, parse_smi_xml_text, split_pci_id

FIX = Path(__file__).parent / "fixtures" / "h200x4-firecracker"
XML = FIX / "nvidia-smi-q-x.xml"


def test_xml_header_and_gpus():
    driver, cuda, gpus = parse_smi_xml(XML)
    assert driver == "580.159.04"
    assert cuda == "13.0"
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert {g.name for g in gpus} == {"NVIDIA H200"}
    assert [g.bus_id for g in gpus] == ["0000:00:06.0", "0000:00:07.0", "0000:00:08.0", "0000:00:09.0"]
    assert gpus[0].uuid == "GPU-80f06605-83de-40d0-a702-4d4f54437f6f"
    assert len({g.uuid for g in gpus}) == 4


def test_xml_every_field_of_gpu0():
    g = parse_smi_xml(XML)[2][0]
    assert g.pci_device_id == "10de:2335"
    assert g.pci_subsystem_id == "10de:18bf"
    assert g.architecture == "Hopper"
    assert (g.pcie.gen_current, g.pcie.gen_max, g.pcie.width_current, g.pcie.width_max) == (5, 5, 16, 16)
    assert g.pcie.at_max is True
    assert g.memory_total_mib == 143771
    assert g.memory_used_mib == 0
    assert g.ecc_enabled is True
    e = g.ecc_errors
    assert (e.volatile_corrected, e.volatile_uncorrected, e.aggregate_corrected, e.aggregate_uncorrected) == (
        0,
        0,
        0,
        0,
    )
    r = g.retirement
    assert r.retired_single_bit is None and r.retired_double_bit is None  # N/A on Hopper
    assert (r.remapped_correctable, r.remapped_uncorrectable, r.remap_pending, r.remap_failure) == (
        0,
        0,
        False,
        False,
    )
    assert g.persistence_mode is True
    assert g.virtualization_mode == "Pass-Through"
    assert g.vbios_version == "96.00.A5.00.1A"
    assert g.performance_state == "P0"
    assert (g.sm_clock_mhz, g.mem_clock_mhz, g.max_sm_clock_mhz, g.max_mem_clock_mhz) == (
        345,
        3201,
        1980,
        3201,
    )
    assert g.throttle_reasons == ["gpu_idle"]
    assert g.temperature_c == 38.0
    assert g.power_draw_w == 81.5
    assert g.power_limit_w == 700.0


def test_xml_all_gpus_healthy():
    for g in parse_smi_xml(XML)[2]:
        assert g.throttle_reasons == ["gpu_idle"]
        assert g.ecc_enabled and g.ecc_errors.aggregate_uncorrected == 0
        assert g.persistence_mode is True
        assert g.pcie.at_max is True


def test_bus_and_pci_id_helpers():
    assert normalise_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalise_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    assert normalise_bus_id("00000001:00:06.0") == "0001:00:06.0"
    assert split_pci_id("233510DE") == "10de:2335"
    assert split_pci_id(0x20B010DE) == "10de:20b0"
    assert split_pci_id("junk") is None


def test_truncated_xml_names_file_and_fix(tmp_path):
    cut = tmp_path / "cut.xml"
    cut.write_text(XML.read_text()[:5000])
    with pytest.raises(GpulabError) as err:
        parse_smi_xml(cut)
    msg = str(err.value)
    assert str(cut) in msg and "truncated" in msg and "nvidia-smi -q -x" in msg


def test_foreign_xml_names_file(tmp_path):
    other = tmp_path / "pom.xml"
    other.write_text("<?xml version='1.0'?><project><modelVersion>4.0.0</modelVersion></project>")
    with pytest.raises(GpulabError) as err:
        parse_smi_xml(other)
    assert str(other) in str(err.value) and "<project>" in str(err.value)


def test_not_xml_at_all(tmp_path):
    txt = tmp_path / "q.txt"
    txt.write_text((FIX / "nvidia-smi-q.txt").read_text())
    with pytest.raises(GpulabError, match="not valid nvidia-smi XML"):
        parse_smi_xml(txt)


def test_missing_file(tmp_path):
    with pytest.raises(GpulabError, match=r"nope\.xml does not exist; capture it with"):
        parse_smi_xml(tmp_path / "nope.xml")


def test_gpu_count_mismatch_is_caught():
    text = XML.read_text()
    # Fewer well-formed <gpu> blocks than attached is what `nvidia-smi -q -x -i 0,1,2` writes: accepted, and
    # the host's count kept. No <gpu> block at all is no capture nvidia-smi writes; more than attached (captures
    # joined, or a GPU that came up after the count) is read, the sections judged.
    fewer = text[: text.rindex("<gpu id=")] + "</nvidia_smi_log>\n"
    assert parse_capture_text(fewer, "x.xml").attached_gpus == 4
    assert len(parse_smi_xml_text(fewer, "x.xml")[2]) == 3
    none = text[: text.index("<gpu id=")] + "</nvidia_smi_log>\n"
    with pytest.raises(GpulabError, match="4 GPUs attached but holds 0"):
        parse_smi_xml_text(none, "x.xml")
    more = parse_capture_text(text.replace("<attached_gpus>4<", "<attached_gpus>3<"), "x.xml")
    assert len(more.gpus) == 4 and more.attached_gpus is None


# Older drivers (R470-era layout): <single_bit>/<double_bit><total>, clocks_throttle_reasons, power_readings.
LEGACY = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>470.223.02</driver_version>
  <cuda_version>11.4</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:3B:00.0">
    <product_name>Tesla V100-SXM2-32GB</product_name>
    <uuid>GPU-00000000-1111-2222-3333-444444444444</uuid>
    <persistence_mode>Disabled</persistence_mode>
    <pci>
      <pci_device_id>1DB510DE</pci_device_id>
      <pci_bus_id>00000000:3B:00.0</pci_bus_id>
      <pci_gpu_link_info>
        <pcie_gen><max_link_gen>3</max_link_gen><current_link_gen>1</current_link_gen></pcie_gen>
        <link_widths><max_link_width>16x</max_link_width><current_link_width>8x</current_link_width></link_widths>
      </pci_gpu_link_info>
    </pci>
    <clocks_throttle_reasons>
      <clocks_throttle_reason_gpu_idle>Not Active</clocks_throttle_reason_gpu_idle>
      <clocks_throttle_reason_applications_clocks_setting>Active</clocks_throttle_reason_applications_clocks_setting>
      <clocks_throttle_reason_sw_power_cap>Active</clocks_throttle_reason_sw_power_cap>
      <clocks_throttle_reason_hw_slowdown>Not Active</clocks_throttle_reason_hw_slowdown>
      <clocks_throttle_reason_unknown>Not Active</clocks_throttle_reason_unknown>
    </clocks_throttle_reasons>
    <ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode>
    <ecc_errors>
      <volatile>
        <single_bit><device_memory>2</device_memory><total>3</total></single_bit>
        <double_bit><device_memory>0</device_memory><total>1</total></double_bit>
      </volatile>
      <aggregate>
        <single_bit><total>N/A</total></single_bit>
        <double_bit><total>N/A</total></double_bit>
      </aggregate>
    </ecc_errors>
    <retired_pages>
      <multiple_single_bit_retirement><retired_count>2</retired_count></multiple_single_bit_retirement>
      <double_bit_retirement><retired_count>1</retired_count></double_bit_retirement>
      <pending_retirement>Yes</pending_retirement>
    </retired_pages>
    <remapped_rows>N/A</remapped_rows>
    <power_readings>
      <power_draw>55.10 W</power_draw>
      <enforced_power_limit>300.00 W</enforced_power_limit>
    </power_readings>
  </gpu>
</nvidia_smi_log>
"""


def test_legacy_xml_layout():
    driver, cuda, (g,) = parse_smi_xml_text(LEGACY, "legacy.xml")
    assert (driver, cuda) == ("470.223.02", "11.4")
    assert g.bus_id == "0000:3b:00.0"
    assert g.pci_device_id == "10de:1db5"
    assert g.pcie.at_max is False
    assert g.persistence_mode is False
    assert g.throttle_reasons == ["applications_clocks_setting", "sw_power_cap"]
    e = g.ecc_errors
    assert (e.volatile_corrected, e.volatile_uncorrected) == (3, 1)
    assert (e.aggregate_corrected, e.aggregate_uncorrected) == (None, None)
    r = g.retirement
    assert (r.retired_single_bit, r.retired_double_bit, r.retired_pending) == (2, 1, True)
    assert r.remapped_correctable is None
    assert (g.power_draw_w, g.power_limit_w) == (55.1, 300.0)
    assert g.architecture is None and g.memory_total_mib is None


def test_throttle_reasons_all_na_or_absent_are_not_reported():
    all_na = LEGACY.replace(">Active<", ">N/A<").replace(">Not Active<", ">N/A<")
    assert parse_smi_xml_text(all_na)[2][0].throttle_reasons is None
    absent = LEGACY.split("<clocks_throttle_reasons>")[0] + LEGACY.split("</clocks_throttle_reasons>")[1]
    assert parse_smi_xml_text(absent)[2][0].throttle_reasons is None
    # All stated and none active is a real "none", which the idle check may pass.
    quiet = LEGACY.replace(">Active<", ">Not Active<")
    assert parse_smi_xml_text(quiet)[2][0].throttle_reasons == []


def test_driver_375_capture():
    """A real 2017 capture (driver 375.66): no <cuda_version>, pre-R450 layouts throughout."""
    driver, cuda, gpus = parse_smi_xml(FIX.parent / "p100x2-driver375" / "nvidia-smi-q-x.xml")
    assert (driver, cuda) == ("375.66", None)
    assert [g.bus_id for g in gpus] == ["0000:04:00.0", "0000:82:00.0"]
    g = gpus[0]
    assert g.pci_device_id == "10de:15f7" and g.architecture is None
    assert g.throttle_reasons == ["gpu_idle"]
    assert (g.ecc_enabled, g.ecc_errors.volatile_uncorrected, g.ecc_errors.aggregate_corrected) == (True, 0, 0)
    r = g.retirement
    assert (r.retired_double_bit, r.retired_pending, r.remap_pending) == (0, False, None)
    assert (g.power_draw_w, g.power_limit_w, g.temperature_c) == (24.84, 250.0, 31.0)
    assert g.persistence_mode is False and g.pcie.at_max is True


def test_topo_matrix_all_nv18():
    topo = parse_topo(FIX / "nvidia-smi-topo-m.txt")
    assert len(topo.matrix) == 4
    for i, row in enumerate(topo.matrix):
        assert len(row) == 4
        for j, cell in enumerate(row):
            assert cell == ("X" if i == j else "NV18")
    assert [a.cpus for a in topo.affinity] == ["0-63"] * 4
    assert [a.numa for a in topo.affinity] == ["0"] * 4


def test_topo_with_nic_rows_and_pcie_links():
    text = (
        "\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
        "GPU0\t X \tSYS\tPIX\t0-31\t0\t\tN/A\n"
        "GPU1\tSYS\t X \tSYS\t32-63\t1\t\tN/A\n"
        "NIC0\tPIX\tSYS\t X \n"
        "\nLegend:\n"
    )
    topo = parse_topo_text(text)
    assert topo.matrix == [["X", "SYS"], ["SYS", "X"]]
    assert [a.numa for a in topo.affinity] == ["0", "1"]


def test_topo_rejects_other_text(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("hello\n")
    with pytest.raises(GpulabError, match="topo -m"):
        parse_topo(f)


def test_nvlink_status():
    links = parse_nvlink(FIX / "nvidia-smi-nvlink-s.txt")
    assert sorted(links) == [0, 1, 2, 3]
    for per_gpu in links.values():
        assert len(per_gpu) == 18
        assert all(link.active and link.bandwidth_gbps == 26.562 for link in per_gpu)
