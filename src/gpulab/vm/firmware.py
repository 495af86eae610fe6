"""Which guest firmware the domain asks libvirt for, and what that choice means for the guest's NVIDIA driver.

With `<os firmware='efi'>` and no features libvirt takes the first matching descriptor in
/usr/share/qemu/firmware, which on Debian and Ubuntu is OVMF with Secure Boot enforced and Microsoft's keys
enrolled: a DKMS-built nvidia module is then refused at load time. gpulab therefore always states the features:
Secure Boot off unless the spec turns it on.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.vm.spec import VmSpec

# The keys DKMS signs modules with (Debian's, and Ubuntu's shim-signed one); enrolled with MOK so the guest
# trusts them.
DKMS_KEY = "/var/lib/dkms/mok.pub"
UBUNTU_KEY = "/var/lib/shim-signed/mok/MOK.der"


@dataclass(frozen=True)
class Firmware:
    efi: bool
    secure_boot: bool  # enforced, with enrolled keys; needs SMM, which the template turns on with it

    @property
    def features(self) -> dict[str, str]:
        """libvirt firmware features to match descriptors on (`enabled` attribute per feature name)."""
        state = "yes" if self.secure_boot else "no"
        return {"enrolled-keys": state, "secure-boot": state}


def firmware_of(spec: VmSpec) -> Firmware:
    return Firmware(efi=spec.firmware == "efi", secure_boot=spec.firmware == "efi" and spec.secure_boot)


def firmware_warnings(spec: VmSpec) -> list[str]:
    if not firmware_of(spec).secure_boot:
        return []
    warnings = [
        "secure_boot is on: the guest loads only signed kernel modules, so a DKMS-built NVIDIA module is refused "
        f"until its signing key is trusted: in the guest run `mokutil --import {DKMS_KEY}` (Ubuntu: {UBUNTU_KEY}), "
        "reboot and enrol the key in MokManager on the console (virsh console), or set secure_boot: false."
    ]
    if spec.kernel_boot is not None:
        warnings.append(
            "secure_boot with kernel_boot: the firmware checks the directly booted kernel against Microsoft's keys, "
            "which a distribution kernel signed for shim fails; boot from the disk or set secure_boot: false."
        )
    return warnings
