"""What a card itself asks of the VM: hidden KVM for GeForce drivers before R465, a ROM image, a card that
drives the host's console, and functions in its slot that are no part of a graphics board."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from gpulab.compat import CONSUMER, newest_branch_for_arch, product_class
from gpulab.vm.checks import FAIL, OK, WARN, PlanCheck
from gpulab.vm.connection import is_local
from gpulab.vm.host import Gpu, Host
from gpulab.vm.nodedev import PciDevice
from gpulab.vm.spec import VmSpec

# From R465 NVIDIA's driver runs GeForce boards in a VM; older ones stop when they see a hypervisor
# (RmInitAdapter failed on Linux, code 43 on Windows) unless KVM hides itself.
GEFORCE_VM_BRANCH = 465
# Kernel options that release the boot framebuffer, so vfio-pci can own a boot VGA card.
_FRAMEBUFFER_OFF = ("video=efifb:off", "video=vesafb:off", "video=simplefb:off", "initcall_blacklist=sysfb_init")


def framebuffer_released(host: Host) -> str | None:
    """The kernel option that frees the boot framebuffer for vfio-pci, if the host's command line has one."""
    return next((o for o in (host.kernel_cmdline or "").split() if o in _FRAMEBUFFER_OFF), None)


def guest_branch(spec: VmSpec, gpu: Gpu) -> tuple[int | None, str]:
    """The guest driver branch for `gpu` and where it comes from: the spec, else the matrix's plan."""
    if spec.guest_driver is not None:
        return spec.guest_driver, "guest_driver"
    if gpu.spec is not None:
        return newest_branch_for_arch(gpu.spec.architecture).number, "the matrix's plan for it"
    return None, "unknown"


def needs_hidden_kvm(spec: VmSpec, gpu: Gpu) -> bool | None:
    """True when the GPU's guest driver refuses it under a hypervisor; None when the branch is unknown."""
    if product_class(gpu.name) != CONSUMER:
        return False
    branch, _source = guest_branch(spec, gpu)
    return None if branch is None else branch < GEFORCE_VM_BRANCH


def kvm_hidden(spec: VmSpec, gpus: Sequence[Gpu]) -> bool:
    """The spec's kvm_hidden, or on where a GeForce board's guest driver needs it."""
    if spec.kvm_hidden is not None:
        return spec.kvm_hidden
    return spec.domain_type == "kvm" and any(needs_hidden_kvm(spec, g) for g in gpus)


def hidden_kvm_checks(spec: VmSpec, gpus: Sequence[Gpu]) -> list[PlanCheck]:
    hidden = kvm_hidden(spec, gpus)
    if hidden and spec.domain_type != "kvm":
        return [PlanCheck("kvm_hidden", WARN, "kvm_hidden only applies to domain_type kvm; it is ignored here.")]
    checks = []
    for gpu in gpus:
        need = needs_hidden_kvm(spec, gpu)
        branch, source = guest_branch(spec, gpu)
        if need is None:
            checks.append(
                PlanCheck(
                    "kvm_hidden",
                    WARN,
                    f"GPU {gpu.address} ({gpu.name}) is a GeForce board and its guest driver branch is unknown; "
                    f"drivers before R{GEFORCE_VM_BRANCH} refuse it in a VM unless KVM is hidden: set guest_driver "
                    "(e.g. R460), or kvm_hidden: true.",
                )
            )
        elif need and not hidden:
            checks.append(
                PlanCheck(
                    "kvm_hidden",
                    WARN,
                    f"GPU {gpu.address} ({gpu.name}) with guest driver R{branch} ({source}): drivers before "
                    f"R{GEFORCE_VM_BRANCH} refuse a GeForce board that sees a hypervisor; remove kvm_hidden: false "
                    f"(or set it true), or install R{GEFORCE_VM_BRANCH} or later in the guest.",
                )
            )
        elif need and spec.kvm_hidden is None:
            checks.append(
                PlanCheck(
                    "kvm_hidden",
                    OK,
                    f"KVM hidden from the guest (and a Hyper-V vendor id set): GPU {gpu.address} ({gpu.name}) "
                    f"with guest driver R{branch} ({source}) needs it before R{GEFORCE_VM_BRANCH}",
                )
            )
    return checks


def boot_vga_checks(host: Host, gpus: Sequence[Gpu], spec: VmSpec) -> list[PlanCheck]:
    checks = []
    released = framebuffer_released(host)
    for gpu in (g for g in gpus if g.boot_vga):
        if released:
            has_rom = spec.gpu_rom is not None and spec.gpu_rom.file is not None
            # The firmware runs the card's option ROM at boot and may leave a modified image behind.
            rom = "" if has_rom else "; the firmware has run its ROM at boot, so give a clean dump with gpu_rom.file"
            checks.append(
                PlanCheck(
                    "boot_vga",
                    WARN,
                    f"GPU {gpu.address} ({gpu.name}) is the host's boot display; {released} releases its "
                    f"framebuffer{rom}.",
                )
            )
            continue
        checks.append(
            PlanCheck(
                "boot_vga",
                FAIL,
                f"GPU {gpu.address} ({gpu.name}) drives the host's console (boot_vga 1): the host's framebuffer "
                "holds its memory, so the guest cannot take the card; make another GPU or the onboard graphics the "
                "primary display in the firmware setup, or add video=efifb:off (initcall_blacklist=sysfb_init on "
                "kernels from 5.15) to the kernel command line and give a clean ROM dump with gpu_rom.file.",
            )
        )
    return checks


def rom_checks(host: Host, spec: VmSpec, gpus: Sequence[Gpu]) -> list[PlanCheck]:
    """The ROM file QEMU will read: checked where the hypervisor runs on this machine (or is the test driver)."""
    rom = spec.gpu_rom
    if rom is None or not gpus:
        return []
    if rom.file is None:
        return [PlanCheck("gpu_rom", OK, "the GPUs' ROM BAR is hidden from the guest (rom bar='off')")]
    models = sorted({g.device.pci_id for g in gpus})
    checks = []
    if len(models) > 1:
        checks.append(
            PlanCheck(
                "gpu_rom",
                FAIL,
                f"gpu_rom.file is one card's ROM but the VM's GPUs are {', '.join(models)}; select GPUs of one "
                "model, or leave gpu_rom out.",
            )
        )
    if not (is_local(host.uri) or host.uri.startswith("test:")):
        checks.append(PlanCheck("gpu_rom", WARN, f"gpu_rom.file {rom.file} is on the remote host; not checked here."))
        return checks
    try:
        mode = os.stat(rom.file).st_mode
    except OSError as err:
        checks.append(
            PlanCheck(
                "gpu_rom",
                FAIL,
                f"gpu_rom.file {rom.file} cannot be read ({err.strerror}); dump the card's ROM (echo 1 > "
                "/sys/bus/pci/devices/ADDR/rom; cat it) or give the right path.",
            )
        )
        return checks
    if not stat.S_ISREG(mode):
        checks.append(
            PlanCheck(
                "gpu_rom", FAIL, f"gpu_rom.file {rom.file} is not a regular file; give the path of the ROM image."
            )
        )
    elif not checks:
        checks.append(PlanCheck("gpu_rom", OK, f"the guest sees ROM image {rom.file}"))
    return checks


def foreign_function_checks(gpus: Sequence[Gpu], extra: Sequence[PciDevice]) -> list[PlanCheck]:
    """A function in a GPU's slot that is neither audio, USB nor UCSI goes to the VM only when asked for.

    One in the GPU's IOMMU group is already refused by the group check, which lists the group."""
    taken = {d.address for d in extra}
    checks = []
    for gpu in gpus:
        for device in gpu.foreign:
            if device.address in taken or device.address in gpu.device.iommu_members:
                continue
            checks.append(
                PlanCheck(
                    "companions",
                    FAIL,
                    f"GPU {gpu.address} ({gpu.name}) has {device.describe()} in its slot (IOMMU group "
                    f"{device.iommu_group}), which is no GPU function (audio, USB, UCSI): add it to extra_hostdevs "
                    "if the VM should own it, or choose another GPU.",
                )
            )
    return checks
