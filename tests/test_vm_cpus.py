"""CPU topology and housekeeping on fake hosts: cores from sibling lists (numbered side by side or half the
machine apart), whole cores to the guest as thread pairs, and QEMU's own threads on CPUs no vCPU uses."""

from __future__ import annotations

import shutil

import pytest

import vm_fakehost as fake
from gpulab.errors import GpulabError
from gpulab.vm import discover_host, plan, spec_from_dict
from gpulab.vm.cputopo import cores_of, place_vcpus, siblings_from_capabilities, smt_width

SPLIT = {c: (c % 4, c % 4 + 4) for c in range(8)}  # 4 cores, siblings 0,4 1,5 ...
INTERLEAVED = {c: (c - c % 2, c - c % 2 + 1) for c in range(8)}  # 4 cores, siblings 0,1 2,3 ...


def test_cores_come_from_sibling_lists_whatever_the_numbering():
    assert cores_of(range(8), SPLIT) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert cores_of(range(8), INTERLEAVED) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert cores_of(range(4), {}) == [(0,), (1,), (2,), (3,)]  # no sibling data: each CPU its own core
    assert cores_of((4, 5, 6, 7), SPLIT) == [(4,), (5,), (6,), (7,)]  # siblings outside the set are not taken
    assert smt_width(cores_of(range(8), SPLIT)) == 2 and smt_width([(0,), (1, 2)]) == 1


def test_vcpus_go_to_whole_cores_or_to_distinct_cores_first():
    split = cores_of(range(8), SPLIT)
    assert place_vcpus(split, 4, threads=2) == [0, 4, 1, 5]
    assert place_vcpus([(4,), (1, 5), (2, 6)], 4, threads=2) == [1, 5, 2, 6]  # only whole cores take pairs
    assert place_vcpus(split, 3, threads=1) == [0, 1, 2]  # the kernel's order would have given 0, 1, 2 too
    interleaved = cores_of(range(8), INTERLEAVED)
    assert place_vcpus(interleaved, 3, threads=1) == [0, 2, 4]  # the kernel's order would put 0 and 1 on one core
    assert place_vcpus(interleaved, 6, threads=1) == [0, 2, 4, 6, 1, 3]  # siblings only once cores run out


def test_siblings_from_libvirt_capabilities():
    caps = """<capabilities><host><topology><cells num='1'><cell id='0'><cpus num='4'>
      <cpu id='0' socket_id='0' die_id='0' core_id='0' siblings='0,2'/>
      <cpu id='1' socket_id='0' die_id='0' core_id='1' siblings='1,3'/>
      <cpu id='2' socket_id='0' die_id='0' core_id='0' siblings='0,2'/>
      <cpu id='3' socket_id='0' die_id='0' core_id='1' siblings='1,3'/>
    </cpus></cell></cells></topology></host></capabilities>"""
    assert siblings_from_capabilities(caps) == {0: (0, 2), 1: (1, 3), 2: (0, 2), 3: (1, 3)}


def test_sysfs_siblings_reach_the_host(tmp_path):
    p100 = discover_host(fake.connect("p100x4"), fake.sysfs("p100x4"))
    assert p100.siblings[0] == (0, 20) and p100.siblings[35] == (15, 35)  # split numbering
    h200 = discover_host(fake.connect("h200x4"), fake.sysfs("h200x4"))
    assert h200.siblings[0] == (0, 1) and h200.siblings[63] == (62, 63)  # interleaved numbering
    assert h200.to_dict()["numa_nodes"][0]["cores"][:2] == ["0-1", "2-3"]


def planned(host, spec, root=None):
    conn = fake.connect(host)
    return plan(conn, spec_from_dict({"name": "vm", "memory_mib": 4096, **spec}), root=root or fake.sysfs(host))


def pins(p):
    return [int(pin.cpuset) for pin in p.layout.pins]


def test_split_siblings_give_thread_pairs_and_core_0_to_housekeeping():
    p = planned("p100x4", {"vcpus": 6, "gpus": "0000:3b:00.0", "disk": {"path": "/images/vm.qcow2"}})
    assert pins(p) == [1, 21, 2, 22, 3, 23]
    assert (p.layout.topology.sockets, p.layout.topology.cores, p.layout.topology.threads) == (1, 3, 2)
    assert p.layout.emulator_cpuset == "0,20"
    assert "<iothreadpin iothread='1' cpuset='0,20'/>" in p.xml and "<iothreads>1</iothreads>" in p.xml


def test_interleaved_siblings_give_thread_pairs_side_by_side():
    p = planned("h200x4", {"vcpus": 6, "gpus": "1"})
    assert pins(p) == [2, 3, 4, 5, 6, 7] and p.layout.emulator_cpuset == "0-1"
    assert p.layout.topology.threads == 2


def test_an_odd_vcpu_count_takes_distinct_cores_with_one_thread_each():
    p = planned("h200x4", {"vcpus": 5, "gpus": "1"})
    assert pins(p) == [2, 4, 6, 8, 10] and p.layout.topology.threads == 1 and p.layout.topology.cores == 5
    p = planned("p100x4", {"vcpus": 11, "gpus": "0000:3b:00.0"})  # 9 free cores on node 0
    assert pins(p) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 21, 22]
    assert any("11 vCPUs on 9 cores of node 0" in c.message for c in p.checks)


def test_a_full_node_sends_housekeeping_to_another_node():
    p = planned("p100x4", {"vcpus": 20, "gpus": "0000:3b:00.0"})
    assert sorted(pins(p)) == [*range(10), *range(20, 30)] and p.layout.emulator_cpuset == "10,30"


def test_no_spare_cpu_leaves_the_emulator_with_the_vcpus_and_says_so():
    p = planned("p100x4", {"vcpus": 40, "gpus": "all"})
    assert p.layout.emulator_cpuset == "0-39"
    [warning] = [c.message for c in p.warnings if c.name == "layout"]
    assert warning.startswith("no host CPU is left for QEMU's emulator and I/O threads")
    assert "lower vcpus by a core or name housekeeping_cpus" in warning


def test_two_nodes_give_one_socket_per_cell():
    p = planned("p100x4", {"vcpus": 8, "gpus": "all"})
    assert (p.layout.topology.sockets, p.layout.topology.cores, p.layout.topology.threads) == (2, 2, 2)
    assert pins(p) == [1, 21, 2, 22, 10, 30, 11, 31]
    with pytest.raises(GpulabError) as err:
        planned("p100x4", {"vcpus": 7, "gpus": "all"})
    assert "7 vCPUs do not split evenly; give vcpus a multiple of 2 or set numa_pinning: false." in str(err.value)
    assert "\n" not in str(err.value)


def test_named_housekeeping_cpus():
    p = planned("p100x4", {"vcpus": 4, "gpus": "0000:3b:00.0", "housekeeping_cpus": "9,29"})
    assert pins(p) == [0, 20, 1, 21] and p.layout.emulator_cpuset == "9,29"
    # One thread of core 0 named: the vCPUs still get whole cores, the other thread (20) stays unused.
    p = planned("p100x4", {"vcpus": 4, "gpus": "0000:3b:00.0", "housekeeping_cpus": "0"})
    assert pins(p) == [1, 21, 2, 22] and p.layout.topology.threads == 2 and p.layout.emulator_cpuset == "0"
    with pytest.raises(GpulabError) as err:
        planned("p100x4", {"vcpus": 4, "gpus": "0000:3b:00.0", "housekeeping_cpus": [0, 99]})
    assert str(err.value) == (
        "vm: housekeeping_cpus 99 are not CPUs of this host (it has 0-39); name CPUs it has, or leave the key out "
        "to let gpulab choose."
    )
    with pytest.raises(GpulabError) as err:
        planned("p100x4", {"vcpus": 20, "gpus": "0000:3b:00.0", "housekeeping_cpus": "0"})
    assert str(err.value) == (
        "vm: 20 vCPUs are to be pinned to NUMA node 0, which has 20 CPUs (0-9,20-29; housekeeping_cpus takes 0). "
        "Lower vcpus, or set numa_pinning: false to let them float."
    )


def test_floating_vcpus_keep_off_named_housekeeping_cpus():
    p = planned("p100x4", {"vcpus": 4, "housekeeping_cpus": "0,20"})
    assert not p.layout.pins and p.layout.vcpu_cpuset == "1-19,21-39"
    assert "<vcpu placement='static' cpuset='1-19,21-39'>4</vcpu>" in p.xml
    assert "<emulatorpin cpuset='0,20'/>" in p.xml
    assert "<topology sockets='1' dies='1' cores='4' threads='1'/>" in p.xml


def test_without_sibling_data_each_cpu_counts_as_a_core(tmp_path):
    root = fake.sysfs_copy("p100x4", tmp_path)
    shutil.rmtree(root / "sys/devices/system/cpu")
    p = planned("p100x4", {"vcpus": 4, "gpus": "0000:3b:00.0"}, root=root)
    assert pins(p) == [1, 2, 3, 4] and p.layout.emulator_cpuset == "0" and p.layout.topology.threads == 1
    assert any("hyper-thread siblings unknown" in c.message for c in p.checks)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("zero", "housekeeping_cpus: 'zero' is not a CPU list; write host CPUs as '0,40' or '0-1'"),
        ("3-1", "housekeeping_cpus: '3-1' has a range that runs backwards;"),
        ([], "housekeeping_cpus: [] is not a CPU list;"),
        ([True], "housekeeping_cpus: [True] is not a CPU list;"),
        ("99999", "housekeeping_cpus: '99999' is not a CPU list;"),
        ([9000], "housekeeping_cpus: [9000] names a CPU outside 0-8191;"),
    ],
)
def test_bad_housekeeping_cpus_are_one_line_errors(value, message):
    with pytest.raises(GpulabError) as err:
        spec_from_dict({"name": "vm", "vcpus": 2, "memory_mib": 1024, "housekeeping_cpus": value})
    assert message in str(err.value) and "\n" not in str(err.value)
