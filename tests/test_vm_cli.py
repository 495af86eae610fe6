"""`gpulab vm ...` on fake hosts: output people read, JSON automation reads, and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def plan_on_p100(tmp_path, spec_text, *extra, root=None):
    """`gpulab vm plan` of `spec_text` on the 4x P100 host (2 NUMA nodes of 20 CPUs, 192 GiB)."""
    fake.require_libvirt()
    spec = tmp_path / "vm.yml"
    spec.write_text(spec_text)
    facts = ["--root", str(root)] if root is not None else []
    return main(p100_args("vm", "plan", str(spec), *extra) + facts)


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulab: error: "), err
    assert "Traceback" not in err and "unexpected" not in err, err
    return lines[0]


def test_memory_beyond_the_host_is_refused_with_the_figures(tmp_path, capsys):
    assert plan_on_p100(tmp_path, "name: big\nvcpus: 4\nmemory_mib: 60000000\n") == 2
    captured = capsys.readouterr()
    message = (
        "memory_mib 60000000 MiB (58593.8 GiB) is more than this host has, 196608 MiB (192.0 GiB); "
        "lower memory_mib below 196608, leaving room for the host."
    )
    assert f"[FAIL] memory: {message}" in captured.out
    assert one_error_line(captured.err) == (
        f"gpulab: error: VM big cannot be defined on {fake.uri('p100x4')}: [memory] {message}"
    )
    # Just below the host's memory is planned (the host check is not off by one).
    assert plan_on_p100(tmp_path, "name: big\nvcpus: 4\nmemory_mib: 196608\n") == 0
    assert "[ok  ] memory: 196608 MiB (192.0 GiB) of the host's 196608 MiB (192.0 GiB)" in capsys.readouterr().out


def test_memory_beyond_the_pinned_numa_node_is_refused(tmp_path, capsys):
    root = fake.sysfs_copy("p100x4", tmp_path, {0: 98304, 1: 98304})  # 96 GiB per node
    one_gpu = "name: wide\nvcpus: 8\nmemory_mib: 131072\ngpus: '0000:3b:00.0'\n"  # 128 GiB, bound to node 0
    assert plan_on_p100(tmp_path, one_gpu, root=root) == 2
    captured = capsys.readouterr()
    assert (
        "[FAIL] memory: NUMA node 0 has 98304 MiB (96.0 GiB), the VM needs 131072 MiB (128.0 GiB) there. Lower "
        "memory_mib, choose GPUs on more NUMA nodes (the memory is split over theirs), or set numa_pinning: false."
    ) in captured.out
    assert "[memory] NUMA node 0 has 98304 MiB" in one_error_line(captured.err)
    # The fixes it names: GPUs on both nodes split the memory (64 GiB each); or no pinning at all.
    assert plan_on_p100(tmp_path, one_gpu.replace("'0000:3b:00.0'", "all"), root=root) == 0
    assert plan_on_p100(tmp_path, one_gpu + "numa_pinning: false\n", root=root) == 0
    out = capsys.readouterr().out
    assert "[ok  ] memory: 131072 MiB (128.0 GiB) of the host's 196608 MiB (192.0 GiB)" in out
    assert "[FAIL]" not in out
    # Without a node's memory (the fixture has no meminfo) only the host's total is checked.
    assert plan_on_p100(tmp_path, one_gpu, root=fake.sysfs("p100x4")) == 0
    # `vm host` shows what the plan compared against.
    assert main(p100_args("vm", "host", "--root", str(root))) == 0
    assert "node 0: CPUs 0-9,20-29; hugepages 2M 512/512 free, 1G 16/16 free; memory 96.0 GiB" in (
        capsys.readouterr().out
    )
    assert main(p100_args("vm", "host", "--json", "--root", str(root))) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["cpus"], data["memory_mib"]) == (40, 196608)
    assert [n["memory_mib"] for n in data["numa_nodes"]] == [98304, 98304]


def test_hugepages_and_node_memory_are_both_per_node(tmp_path, capsys):
    root = fake.sysfs_copy("p100x4", tmp_path, {0: 16384, 1: 98304})
    spec = "name: hp\nvcpus: 8\nmemory_mib: 20480\ngpus: '0000:3b:00.0'\nhugepages: true\n"
    assert plan_on_p100(tmp_path, spec, root=root) == 2
    out = capsys.readouterr().out
    assert "[FAIL] memory: NUMA node 0 has 16384 MiB (16.0 GiB), the VM needs 20480 MiB (20.0 GiB) there." in out
    assert "[FAIL] hugepages: NUMA node 0 has 16 free 1G pages, the VM needs 20." in out


def test_unpinned_vcpu_overcommit_is_a_warning_in_text_and_json(tmp_path, capsys):
    spec = "name: many\nvcpus: 512\nmemory_mib: 4096\n"
    assert plan_on_p100(tmp_path, spec) == 0
    warning = (
        "512 vCPUs on a host with 40 CPUs: they take turns on the CPUs (overcommit), so each runs slower and the "
        "guest may report soft lockups; lower vcpus to at most 40."
    )
    assert f"[WARN] vcpus: {warning}" in capsys.readouterr().out
    assert plan_on_p100(tmp_path, spec, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True
    assert {"name": "vcpus", "status": "warn", "message": warning} in data["checks"]
    # GPUs with numa_pinning: false float too; 40 vCPUs on 40 CPUs is no overcommit.
    floating = "name: many\nvcpus: 40\nmemory_mib: 4096\ngpus: all\nnuma_pinning: false\n"
    assert plan_on_p100(tmp_path, floating, "--json", root=fake.sysfs("p100x4")) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["vcpus"] == {"name": "vcpus", "status": "ok", "message": "40 vCPUs of the host's 40 CPUs, not pinned"}


def test_pinned_vcpus_beyond_their_node_are_refused(tmp_path, capsys):
    spec = "name: pin\nvcpus: 512\nmemory_mib: 4096\ngpus: all\n"
    assert plan_on_p100(tmp_path, spec, root=fake.sysfs("p100x4")) == 2
    assert one_error_line(capsys.readouterr().err) == (
        "gpulab: error: pin: 256 vCPUs are to be pinned to NUMA node 0, which has 20 CPUs (0-9,20-29). "
        "Lower vcpus, or set numa_pinning: false to let them float."
    )


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("vcpus: 0", "vcpus: 0 is not a whole number from 1 to 1024."),
        ("vcpus: -4", "vcpus: -4 is not a whole number from 1 to 1024."),
        ("vcpus: 5000", "vcpus: 5000 is not a whole number from 1 to 1024."),
        ("vcpus: 2.5", "vcpus: 2.5 is not a whole number from 1 to 1024."),
        ("vcpus: true", "vcpus: True is not a whole number from 1 to 1024."),
        ("vcpus: '4'", "vcpus: '4' is not a whole number from 1 to 1024."),
        ('name: "vm1\\n"', "name: 'vm1\\n' is not a VM name"),
        ("gpus: 99", "gpus: 99 is not a GPU count from 1 to 16; write 'none' for no GPU."),
    ],
)
def test_bad_spec_values_are_one_line_and_exit_2(tmp_path, capsys, line, needle):
    key = line.split(":")[0]
    base = {"name": "name: vm1", "vcpus": "vcpus: 4", "memory_mib": "memory_mib: 4096"}
    text = "\n".join([line] + [v for k, v in base.items() if k != key]) + "\n"
    assert plan_on_p100(tmp_path, text) == 2
    error = one_error_line(capsys.readouterr().err)
    assert error.startswith(f"gpulab: error: VM spec {tmp_path / 'vm.yml'}: {needle}"), error


@pytest.mark.parametrize(
    ("selector", "needle"),
    [
        (
            "99xP100",
            "selector '99xP100' asks for 99 x Tesla P100-PCIE-16GB, but this host has 4; ask for at most 4; this",
        ),
        ("0xP100", "GPU selector '0xP100' asks for 0 GPUs; ask for at least 1, or use 'none'."),
        ("-1xP100", "GPU selector '-1xP100': -1 is not a GPU count; ask for a whole number of at least 1"),
        ("1.5xP100", "GPU selector '1.5xP100': 1.5 is not a GPU count"),
        ("lots", "unknown GPU model 'lots'"),
        ("", "GPU selector '' is empty"),
    ],
)
def test_bad_gpus_overrides_are_one_line_and_exit_2(lab_spec, capsys, selector, needle):
    assert main(p100_args("vm", "plan", str(lab_spec), f"--gpus={selector}")) == 2
    assert one_error_line(capsys.readouterr().err).startswith(f"gpulab: error: {needle}")


@pytest.mark.parametrize(
    "kind", ["missing", "directory", "/dev/zero", "not UTF-8", "not YAML", "a list", "under a file"]
)
def test_spec_paths_that_are_no_spec_are_one_line_and_exit_2(tmp_path, capsys, kind):
    fake.require_libvirt()
    (tmp_path / "file").write_text("x")
    paths = {
        "missing": (tmp_path / "missing.yml", "VM spec <p> does not exist; "),
        "directory": (tmp_path, "VM spec <p> is a directory, not a file; "),
        "/dev/zero": (Path("/dev/zero"), "VM spec /dev/zero is a character device, not a file; "),
        "not UTF-8": (tmp_path / "latin1.yml", "VM spec <p> is not UTF-8 text (byte 0xe9 at offset 7); "),
        "not YAML": (tmp_path / "vm.toml", "VM spec <p> is not valid YAML: expected '<document start>', "),
        "a list": (tmp_path / "list.yml", "VM spec <p>: must be a mapping of keys (name, vcpus, memory_mib, ...), "),
        "under a file": (tmp_path / "file" / "vm.yml", "VM spec <p>: a part of the path is a file, "),
    }
    (tmp_path / "latin1.yml").write_bytes("name: vé1\n".encode("latin-1"))
    (tmp_path / "vm.toml").write_text('[vm]\nname = "vm1"\n')
    (tmp_path / "list.yml").write_text("- name: vm1\n")
    path, needle = paths[kind]
    for command in ("plan", "define"):
        assert main(p100_args("vm", command, str(path))) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert one_error_line(captured.err).startswith("gpulab: error: " + needle.replace("<p>", str(path)))
