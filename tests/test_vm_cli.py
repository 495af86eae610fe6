"""`gpulab vm ...` on fake hosts: output people read, JSON automation reads, and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import vm_fakehost as fake
from gpulab.cli import main

LAB_SPEC = """\
name: p100-lab
vcpus: 20
memory_mib: 20480
gpus: 4x10de:15f8
hugepages: true
p2p_clique: 0
network: default
"""


@pytest.fixture
def lab_spec(tmp_path):
    fake.require_libvirt()
    path = tmp_path / "lab.yml"
    path.write_text(LAB_SPEC)
    return path


def p100_args(*args):
    return [*args, "--connect", fake.uri("p100x4")]


def p100_facts():
    return ["--root", str(fake.sysfs("p100x4"))]


def test_vm_host_lists_gpus_groups_numa_and_facts(capsys):
    fake.require_libvirt()
    assert main(p100_args("vm", "host") + p100_facts()) == 0
    out = capsys.readouterr().out
    assert "IOMMU:    on" in out and "vfio_pci loaded" in out
    assert "node 1: CPUs 10-19,30-39; hugepages 2M 512/512 free, 1G 16/16 free" in out
    assert "0000:86:00.0  Tesla P100-PCIE-16GB (10de:15f8)  NUMA 1  PCIe gen3/3 x16/16" in out
    assert "IOMMU group 60: 0000:85:00.0 PCI bridge, 0000:86:00.0 3D controller" in out


def test_vm_host_json(capsys):
    fake.require_libvirt()
    assert main(["vm", "host", "--json", "--connect", fake.uri("shared-groups")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vfio_modules"] is None and data["numa_nodes"] == []
    gtx = next(g for g in data["gpus"] if g["pci_id"] == "10de:1b06")
    assert gtx["companions"] == ["0000:01:00.1"] and gtx["iommu_group"] == 1 and gtx["bar_source"] == "estimate"


def test_vm_plan_prints_xml_and_checks_and_matches_the_golden(lab_spec, capsys):
    assert main(p100_args("vm", "plan", str(lab_spec)) + p100_facts()) == 0
    out = capsys.readouterr().out
    xml, _, checks = out.partition("\nchecks for VM p100-lab on test://")
    golden = (fake.GOLDEN / "p100-4gpu-two-nodes-lab.xml").read_text()
    # The spec here has no disk; otherwise it is the golden lab case.
    assert xml.replace("p100-lab", "X").count("<hostdev ") == golden.count("<hostdev ") == 4
    assert "[ok  ] iommu_groups: IOMMU group(s) 30, 31, 60, 61 can go to the VM whole" in checks
    assert "[ok  ] hugepages: 1G hugepages free (node 0: 10, node 1: 10)" in checks
    assert "[ok  ] schema:" in checks


def test_vm_plan_xml_only_and_gpus_override(lab_spec, capsys):
    assert main(p100_args("vm", "plan", str(lab_spec), "--xml", "--gpus", "86:00.0,3b:00.0") + p100_facts()) == 0
    out = capsys.readouterr().out
    assert out.startswith("<domain type='kvm'") and out.count("<hostdev ") == 2
    assert out.index("bus='0x86'") < out.index("bus='0x3b'")  # in the order given
    assert "checks for" not in out
    # One of them alone puts all 20 GiB on its node, which has 16 free 1G pages: refused, exit 2.
    assert main(p100_args("vm", "plan", str(lab_spec), "--xml", "--gpus", "86:00.0") + p100_facts()) == 2
    assert "NUMA node 1 has 16 free 1G pages, the VM needs 20" in capsys.readouterr().err


def test_vm_plan_refusal_prints_the_plan_then_exits_2(tmp_path, capsys):
    fake.require_libvirt()
    spec = tmp_path / "bad.yml"
    spec.write_text("name: bad\nvcpus: 4\nmemory_mib: 4096\ngpus: '0000:06:00.0'\n")
    assert main(["vm", "plan", str(spec), "--connect", fake.uri("shared-groups")]) == 2
    captured = capsys.readouterr()
    assert "[FAIL] iommu_groups: GPU 0000:06:00.0 (Tesla P100-PCIE-16GB) is in IOMMU group 12" in captured.out
    assert "gpulab: error: VM bad cannot be defined" in captured.err


def test_vm_plan_bad_selector_and_bad_spec_exit_2(lab_spec, tmp_path, capsys):
    assert main(p100_args("vm", "plan", str(lab_spec), "--gpus", "8xP100")) == 2
    assert "asks for 8 x Tesla P100-PCIE-16GB, but this host has 4" in capsys.readouterr().err
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "name: x\nvcpus: many\nmemory_mib: 4096\ncpu_mode: host-passthrough\ndomain_type: qemu\ngpu: all\n"
    )
    assert main(p100_args("vm", "plan", str(broken))) == 2
    err = capsys.readouterr().err
    assert "has 3 problem(s)" in err and "vcpus: 'many' is not a whole number" in err
    assert "gpu: unknown key" in err and "with domain_type qemu (TCG) use 'maximum'" in err


def test_vm_define_json_reports_changed(lab_spec, capsys):
    assert main(p100_args("vm", "define", str(lab_spec), "--json") + p100_facts()) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changed"] is True and data["action"] == "define" and data["state"] == "shut off"
    assert data["diff"].startswith("--- /dev/null")


def test_vm_lifecycle_commands_on_the_resident_vm(capsys):
    """The fake host file carries a running VM, `resident`; each command opens its own connection."""
    fake.require_libvirt()
    assert main(p100_args("vm", "start", "resident", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is False  # already running
    assert main(p100_args("vm", "destroy", "resident", "--json")) == 0
    assert json.loads(capsys.readouterr().out) | {"messages": []} == {
        "name": "resident",
        "action": "destroy",
        "changed": True,
        "state": "shut off",
        "diff": "",
        "ip": None,
        "messages": [],
    }
    assert main(p100_args("vm", "undefine", "resident")) == 2
    assert "VM resident is running; stop it first" in capsys.readouterr().err
    assert main(p100_args("vm", "destroy", "ghost")) == 0
    assert "ghost: unchanged, undefined" in capsys.readouterr().out
    assert main(p100_args("vm", "start", "resident", "--timeout", "0")) == 2


def test_gpulab_vm_plan_runs_as_a_program(lab_spec):
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", *p100_args("vm", "plan", str(lab_spec), "--json"), *p100_facts()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True and len(data["gpus"]) == 4 and data["hostdevs"][0] == "0000:3b:00.0"
    assert {c["name"] for c in data["checks"]} >= {"gpus", "iommu", "iommu_groups", "vfio", "hugepages", "schema"}


def test_bad_connect_uri_is_a_clear_error(lab_spec, capsys):
    assert main(["vm", "host", "--connect", "test:///nonexistent/host.xml"]) == 2
    err = capsys.readouterr().err
    assert "cannot connect to libvirt at test:///nonexistent/host.xml" in err and "--connect" in err
