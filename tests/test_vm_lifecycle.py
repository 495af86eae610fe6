"""plan / define / start / destroy / undefine on libvirt's test driver: idempotence, diffs, refusals, and the
files define makes (qcow2 overlay with qemu-img, cloud-init seed ISO, isolated network)."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import threading

import pytest

import vm_fakehost as fake
from gpulab.errors import GpulabError
from gpulab.vm import define, destroy, discover_host, plan, spec_from_dict, start, undefine
from gpulab.vm.domain import lookup, read_metadata
from gpulab.vm.lifecycle import _start_error, ssh_banner

LAB = {"name": "lab", "vcpus": 20, "memory_mib": 20480, "gpus": "4x10de:15f8", "hugepages": True, "network": "default"}


@pytest.fixture
def p100():
    """A fresh fake 4x P100 host (its state lives as long as this connection) and its discovered Host."""
    conn = fake.connect("p100x4")
    return conn, discover_host(conn, fake.sysfs("p100x4"))


def test_define_is_idempotent_and_a_change_shows_as_a_diff(p100):
    conn, host = p100
    spec = spec_from_dict(LAB)
    first = define(conn, spec, host=host)
    assert first.changed and first.state == "shut off"
    assert first.diff.startswith("--- /dev/null\n+++ lab (new)\n")
    assert "+    <hostdev mode='subsystem' type='pci' managed='yes'>" in first.diff
    assert plan(conn, spec, host=host).up_to_date

    again = define(conn, spec, host=host)
    assert (again.changed, again.diff) == (False, "")
    assert "already defined as specified" in again.messages[0]

    changed = define(conn, dataclasses.replace(spec, vcpus=16), host=host)
    assert changed.changed
    assert "-  <vcpu placement='static'>20</vcpu>\n+  <vcpu placement='static'>16</vcpu>" in changed.diff
    assert "--- lab (defined)\n+++ lab (new)\n" in changed.diff
    assert not define(conn, dataclasses.replace(spec, vcpus=16), host=host).changed


def test_an_edit_made_outside_gpulab_is_detected_and_reverted(p100):
    conn, host = p100
    spec = spec_from_dict(LAB)
    define(conn, spec, host=host)
    import libvirt

    dom = lookup(conn, "lab")
    edited = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE).replace("<on_crash>destroy<", "<on_crash>restart<")
    conn.defineXML(edited)  # what `virsh edit` does; gpulab's metadata survives, its digest no longer matches
    assert not plan(conn, spec, host=host).up_to_date
    outcome = define(conn, spec, host=host)
    assert outcome.changed and "-  <on_crash>restart</on_crash>\n+  <on_crash>destroy</on_crash>" in outcome.diff


def test_start_destroy_undefine_report_changes_truthfully(p100):
    conn, host = p100
    define(conn, spec_from_dict(LAB), host=host)
    started = start(conn, "lab")
    assert (started.changed, started.state) == (True, "running")
    assert started.ip is not None  # the test driver hands out a lease on the default network
    assert not start(conn, "lab").changed

    with pytest.raises(GpulabError, match=r"VM lab is running; stop it first with `gpulab vm destroy lab`"):
        undefine(conn, "lab")
    assert destroy(conn, "lab").changed
    assert (destroy(conn, "lab").changed, destroy(conn, "lab").state) == (False, "shut off")
    gone = undefine(conn, "lab")
    assert (gone.changed, gone.state) == (True, "undefined") and lookup(conn, "lab") is None
    assert not undefine(conn, "lab").changed
    assert destroy(conn, "lab").state == "undefined"


def test_start_of_an_undefined_vm_says_how_to_define_it(p100):
    conn, _host = p100
    with pytest.raises(GpulabError, match=r"VM nope is not defined on test://.*gpulab vm define SPEC"):
        start(conn, "nope")


def test_wait_ssh_needs_a_network_interface(p100):
    conn, host = p100
    define(conn, spec_from_dict({"name": "nonet", "vcpus": 2, "memory_mib": 1024}), host=host)
    with pytest.raises(GpulabError, match="no libvirt network interface"):
        start(conn, "nonet", wait_ssh=True, timeout=5)


def test_define_refuses_a_group_shared_with_a_nic_and_defines_nothing():
    conn = fake.connect("shared-groups")
    spec = spec_from_dict({"name": "bad", "vcpus": 4, "memory_mib": 4096, "gpus": "0000:06:00.0"})
    with pytest.raises(GpulabError) as err:
        define(conn, spec)
    text = str(err.value)
    assert "VM bad cannot be defined" in text and "[iommu_groups]" in text and "0000:07:00.0 Ethernet" in text
    assert lookup(conn, "bad") is None
    # Passing the NIC along makes the group whole.
    ok = define(conn, dataclasses.replace(spec, extra_hostdevs=("0000:07:00.0",)))
    assert ok.changed and ok.diff.count("<hostdev mode='subsystem'") == 2


def test_hugepages_are_checked_per_numa_node_before_define():
    conn = fake.connect("h200x4")
    spec = spec_from_dict({"name": "big", "vcpus": 8, "memory_mib": 65536, "gpus": "1", "hugepages": True})
    p = plan(conn, spec, root=fake.sysfs("h200x4"))
    assert [c.name for c in p.failures] == ["hugepages"]
    assert "NUMA node 0 has 0 free 1G pages, the VM needs 64" in p.failures[0].message
    assert "hugepages-1048576kB/nr_hugepages" in p.failures[0].message
    with pytest.raises(GpulabError, match="hugepages"):
        define(conn, spec, root=fake.sysfs("h200x4"))
    assert lookup(conn, "big") is None


def test_two_node_hugepages_need_each_nodes_share(p100):
    conn, host = p100
    p = plan(conn, spec_from_dict(dict(LAB, memory_mib=40960)), host=host)  # 20 x 1G per node, 16 free on each
    assert "NUMA node 0 has 16 free 1G pages, the VM needs 20; NUMA node 1 has 16" in p.failures[0].message


def test_pinning_more_vcpus_than_the_node_has_is_an_error(p100):
    conn, host = p100
    with pytest.raises(GpulabError, match=r"24 vCPUs are to be pinned to NUMA node 0, which has 20 CPUs"):
        plan(conn, spec_from_dict({"name": "x", "vcpus": 24, "memory_mib": 4096, "gpus": "3b:00.0"}), host=host)
    unpinned = spec_from_dict({"name": "x", "vcpus": 24, "memory_mib": 4096, "gpus": "3b:00.0", "numa_pinning": False})
    assert plan(conn, unpinned, host=host).ok


def test_warnings_for_gpus_on_the_host_driver_and_vfio_not_loaded():
    conn = fake.connect("h200x4")
    p = plan(
        conn, spec_from_dict({"name": "w", "vcpus": 4, "memory_mib": 8192, "gpus": "1"}), root=fake.sysfs("h200x4")
    )
    assert p.ok
    warnings = {c.name: c.message for c in p.warnings}
    assert "vfio_pci" in warnings["vfio"] and "bound to nvidia" in warnings["driver"]


def test_libvirts_no_passthrough_error_becomes_the_iommu_fix():
    fake.require_libvirt()
    import libvirt

    err = _start_error(
        "vm1", libvirt.libvirtError("unsupported configuration: host doesn't support passthrough of host PCI devices")
    )
    assert "no working IOMMU/VFIO" in str(err) and "intel_iommu=on" in str(err) and "vfio_host role" in str(err)
    other = _start_error("vm1", libvirt.libvirtError("some other failure"))
    assert str(other) == "cannot start VM vm1: some other failure"
    # libvirt's words when virtlogd is down but its socket file is left behind
    no_log = _start_error(
        "vm1", libvirt.libvirtError("Failed to connect socket to '/run/libvirt/virtlogd-sock': Connection refused")
    )
    assert "virtlogd is not running" in str(no_log) and "virtlogd -d" in str(no_log)


def test_ssh_banner_reads_a_real_server_and_rejects_others():
    def serve(payload: bytes, ready: threading.Event, port: list[int]) -> None:
        with socket.socket() as srv:
            srv.bind(("127.0.0.1", 0))
            srv.listen(1)
            port.append(srv.getsockname()[1])
            ready.set()
            conn, _ = srv.accept()
            with conn:
                conn.sendall(payload)

    for payload, expected in (
        (b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", "SSH-2.0-OpenSSH_9.2p1 Debian-2"),
        (b"HTTP/1.1 400\r\n", None),
    ):
        ready, port = threading.Event(), []
        thread = threading.Thread(target=serve, args=(payload, ready, port), daemon=True)
        thread.start()
        ready.wait(5)
        assert ssh_banner("127.0.0.1", port[0], timeout=5) == expected
        thread.join(5)


@pytest.fixture
def keypair(tmp_path):
    tool = fake.require_tool("ssh-keygen")

    def make(name: str) -> str:
        key = tmp_path / name
        subprocess.run([tool, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
        return key.with_suffix(".pub").read_text().strip()

    return make


@pytest.fixture
def base_image(tmp_path):
    tool = fake.require_tool("qemu-img")
    base = tmp_path / "images" / "base.qcow2"
    base.parent.mkdir()
    subprocess.run([tool, "create", "-q", "-f", "qcow2", str(base), "1G"], check=True)
    return base


def _iso_file(iso, name: str, tmp_path) -> str:
    """One file of the seed ISO, extracted with xorriso into the test's own directory."""
    tool = fake.require_tool("xorriso")
    target = tmp_path / f"extracted-{name}"
    subprocess.run(
        [tool, "-indev", str(iso), "-osirrox", "on", "-extract", f"/{name}", str(target)],
        capture_output=True,
        check=True,
    )
    return target.read_text()


def test_define_makes_overlay_seed_and_network_then_undefine_removes_them(tmp_path, keypair, base_image):
    conn = fake.connect("p100x4")
    vms = tmp_path / "vms"
    spec = spec_from_dict(
        {
            "name": "boot",
            "vcpus": 2,
            "memory_mib": 1024,
            "domain_type": "qemu",
            "firmware": "bios",
            "disk": {"base": str(base_image), "dir": str(vms), "size_gib": 2},
            "cloud_init": {"hostname": "boot-vm", "ssh_authorized_keys": [keypair("first")]},
            "network": {"name": "gpulab-iso", "address": "192.168.150.1/24"},
        }
    )
    outcome = define(conn, spec)
    assert outcome.changed
    net = conn.networkLookupByName("gpulab-iso")
    assert net.isActive() and "<forward" not in net.XMLDesc(0)
    assert "range start='192.168.150.2' end='192.168.150.254'" in net.XMLDesc(0)

    overlay = vms / "boot.qcow2"
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", str(overlay)], capture_output=True, text=True, check=True
        ).stdout
    )
    assert info["format"] == "qcow2" and info["backing-filename"] == str(base_image) and info["virtual-size"] == 2 << 30
    [seed] = vms.glob("boot-seed-*.iso")
    assert "CD001" in seed.read_bytes()[0x8001:0x8006].decode() and b"cidata" in seed.read_bytes()[0x8028:0x8048]
    user_data = _iso_file(seed, "user-data", tmp_path)
    assert user_data.startswith("#cloud-config\n") and '"boot-vm"' in user_data and "first" in user_data
    assert '"boot-vm"' in _iso_file(seed, "meta-data", tmp_path)
    xml = lookup(conn, "boot").XMLDesc(0)
    assert str(overlay) in xml and str(seed) in xml and "<source network='gpulab-iso'/>" in xml
    assert read_metadata(lookup(conn, "boot"))["overlay"] == str(overlay)

    assert not define(conn, spec).changed  # files and definition all in place

    rekeyed = dataclasses.replace(
        spec, cloud_init=dataclasses.replace(spec.cloud_init, ssh_authorized_keys=(keypair("second"),))
    )
    changed = define(conn, rekeyed)
    [new_seed] = vms.glob("boot-seed-*.iso")
    assert changed.changed and new_seed != seed and not seed.exists()  # the old seed is cleaned up
    assert f"-      <source file='{seed}'/>" in changed.diff and f"+      <source file='{new_seed}'/>" in changed.diff

    outcome = undefine(conn, "boot", remove_storage=True)
    assert outcome.changed and not overlay.exists() and not new_seed.exists()
    assert base_image.exists()  # the shared base is never touched


def test_an_overlay_on_another_base_is_refused(tmp_path, base_image):
    conn = fake.connect("p100x4")
    other = tmp_path / "images" / "other.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(other), "1G"], check=True)
    vms = tmp_path / "vms"
    vms.mkdir()
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(other), str(vms / "o.qcow2")], check=True
    )
    spec = spec_from_dict(
        {
            "name": "o",
            "vcpus": 1,
            "memory_mib": 512,
            "domain_type": "qemu",
            "disk": {"base": str(base_image), "dir": str(vms)},
        }
    )
    with pytest.raises(GpulabError, match=r"o.qcow2 exists but is not an overlay on .*base.qcow2"):
        define(conn, spec)
    assert lookup(conn, "o") is None


def test_a_missing_named_network_fails_the_plan(p100):
    conn, host = p100
    p = plan(conn, spec_from_dict({"name": "n", "vcpus": 1, "memory_mib": 512, "network": "nowhere"}), host=host)
    assert [c.name for c in p.failures] == ["network"] and "'nowhere' does not exist" in p.failures[0].message
