"""Interrupt remapping and GPU reset methods read from fake sysfs trees, and what `plan` and `vm host` say."""

from __future__ import annotations

import json

import pytest

import vm_fakehost as fake
from gpulab.cli import main
from gpulab.errors import GpulabError
from gpulab.vm import PciAddress, plan, spec_from_dict
from gpulab.vm.hostfacts import interrupt_remapping, reset_methods

GPU = "0000:3b:00.0"
SPEC = {"name": "vm", "vcpus": 4, "memory_mib": 4096, "gpus": GPU}


def checks(root, spec=None):
    p = plan(fake.connect("p100x4"), spec_from_dict(spec or SPEC), root=root)
    return {c.name: c for c in p.checks}, p


def test_fixture_hosts_remap_interrupts_and_reset_their_gpus():
    ir = interrupt_remapping(fake.sysfs("p100x4"))
    assert ir is not None and ir.enabled is True and ir.detail == "VT-d (dmar0)" and not ir.allow_unsafe
    assert reset_methods(fake.sysfs("p100x4"), PciAddress.parse(GPU)) == ("bus",)
    assert reset_methods(fake.sysfs("h200x4"), PciAddress.parse("0000:19:00.0")) == ("flr", "bus")
    found, _ = checks(fake.sysfs("p100x4"))
    assert found["interrupt_remapping"].status == "ok" and found["reset"].message == f"GPU {GPU} resets by bus"


def test_a_vtd_unit_without_interrupt_remapping_warns_that_vfio_will_refuse(tmp_path):
    root = fake.sysfs_copy("p100x4", tmp_path)
    (root / "sys/class/iommu/dmar0/intel-iommu/ecap").write_text("f020d7\n")  # bit 3 (IR) clear
    found, p = checks(root)
    check = found["interrupt_remapping"]
    assert check.status == "warn" and p.ok
    assert check.message.startswith(
        "interrupt remapping is off (VT-d unit dmar0 reports no interrupt remapping), so VFIO refuses the devices "
        "when the VM starts; turn interrupt remapping on"
    )


def test_intremap_off_and_allow_unsafe_interrupts(tmp_path):
    root = fake.sysfs_copy("p100x4", tmp_path)
    cmdline = root / "proc/cmdline"
    cmdline.write_text(cmdline.read_text().strip() + " intremap=off vfio_iommu_type1.allow_unsafe_interrupts=1\n")
    ir = interrupt_remapping(root)
    assert ir is not None and ir.enabled is False and ir.allow_unsafe
    assert ir.detail == "turned off by intremap=off on the kernel command line"
    found, _ = checks(root)
    message = found["interrupt_remapping"].message
    assert "VFIO accepts the devices only because vfio_iommu_type1.allow_unsafe_interrupts is set" in message
    assert "drop that option" in message
    # The module's live parameter wins over the command line.
    param = root / "sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts"
    param.parent.mkdir(parents=True)
    param.write_text("N\n")
    assert not interrupt_remapping(root).allow_unsafe  # type: ignore[union-attr]


def test_amd_vi_remaps_and_no_iommu_unit_is_unknown(tmp_path):
    root = fake.sysfs_copy("p100x4", tmp_path)
    dmar = root / "sys/class/iommu/dmar0"
    for path in sorted(dmar.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    dmar.rmdir()
    assert interrupt_remapping(root).enabled is None  # type: ignore[union-attr]
    found, _ = checks(root)
    assert found["interrupt_remapping"].status == "warn" and "cannot be read" in found["interrupt_remapping"].message
    (root / "sys/class/iommu/ivhd0/amd-iommu").mkdir(parents=True)
    ir = interrupt_remapping(root)
    assert ir is not None and ir.enabled is True and ir.detail == "AMD-Vi (ivhd0)"


def test_a_gpu_without_reset_method_warns_that_a_reboot_may_hang_it(tmp_path):
    root = fake.sysfs_copy("p100x4", tmp_path)
    device = root / "sys/bus/pci/devices" / GPU
    (device / "reset_method").unlink()
    assert reset_methods(root, PciAddress.parse(GPU)) == ()
    found, p = checks(root)
    assert found["reset"].status == "warn" and p.ok
    assert found["reset"].message.startswith(f"GPU {GPU} has no reset method (sysfs shows no reset_method)")
    assert "a VM reboot may leave it hung" in found["reset"].message and "secondary bus reset" in found["reset"].message
    (device / "reset").write_text("")  # a kernel before 5.15: resettable, method not shown
    assert reset_methods(root, PciAddress.parse(GPU)) == ("reset",)
    assert reset_methods(root, PciAddress.parse("0000:99:00.0")) is None


def test_a_multi_function_gpu_without_reset_method_is_reset_through_its_slot(tmp_path, capsys):
    """A GeForce board with its audio shows no reset_method (no FLR; the kernel's bus reset wants a device alone on
    its bus); vfio-pci resets the slot's bus because the VM owns every function."""
    gtx = "0000:01:00.0"
    root = fake.sysfs("geforce")
    assert reset_methods(root, PciAddress.parse(gtx)) == ()
    p = plan(fake.connect("geforce"), spec_from_dict({**SPEC, "gpus": gtx}), root=root)
    found = {c.name: c for c in p.checks}
    assert found["reset"].status == "ok" and found["interrupt_remapping"].status == "ok"
    assert found["reset"].message.startswith(f"GPU {gtx} has no reset of its own (a multi-function card")
    fake.require_libvirt()
    assert main(["vm", "host", "--connect", fake.uri("geforce"), "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "      reset: none of its own (multi-function card: vfio-pci resets its slot's bus)" in out
    assert "    8 cores, 2 threads each: 0,8 1,9 2,10 3,11 ..." in out


def test_without_sysfs_the_checks_stay_silent():
    p = plan(fake.connect("shared-groups"), spec_from_dict({**SPEC, "gpus": "GTX 1080 Ti"}))
    assert not {"interrupt_remapping", "reset"} & {c.name for c in p.checks}


def test_vm_host_reports_interrupt_remapping_and_reset_methods(tmp_path, capsys):
    fake.require_libvirt()
    root = fake.sysfs_copy("p100x4", tmp_path)
    (root / "sys/bus/pci/devices/0000:86:00.0/reset_method").unlink()
    assert main(["vm", "host", "--connect", fake.uri("p100x4"), "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "IRQ remap: on (VT-d (dmar0))" in out
    assert "      reset: bus" in out and "      reset: NONE (a VM reboot may hang the card)" in out
    assert "    10 cores, 2 threads each: 0,20 1,21 2,22 3,23 ..." in out
    assert main(["vm", "host", "--json", "--connect", fake.uri("p100x4"), "--root", str(root)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["interrupt_remapping"] == {"enabled": True, "detail": "VT-d (dmar0)", "allow_unsafe_interrupts": False}
    assert [g["reset_methods"] for g in data["gpus"]] == [["bus"], ["bus"], [], ["bus"]]


def test_secure_boot_needs_uefi_and_warns_about_module_signing():
    with pytest.raises(GpulabError) as err:
        spec_from_dict({**SPEC, "secure_boot": True, "firmware": "bios"})
    assert str(err.value) == (
        "VM spec: secure_boot: needs firmware: efi (SeaBIOS has no Secure Boot); set firmware: efi or drop secure_boot."
    )
    with pytest.raises(GpulabError) as err:
        spec_from_dict({**SPEC, "secure_boot": "yes"})
    assert str(err.value) == "VM spec: secure_boot: 'yes' is not true or false."
    _, p = checks(fake.sysfs("p100x4"), {**SPEC, "secure_boot": True, "kernel_boot": {"kernel": "/boot/vmlinuz"}})
    messages = [c.message for c in p.warnings]
    assert any("mokutil --import /var/lib/dkms/mok.pub" in m and "MokManager" in m for m in messages)
    assert any(m.startswith("secure_boot with kernel_boot:") for m in messages)
