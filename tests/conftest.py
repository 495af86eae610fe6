"""Fixtures shared by gpulab's own tests (the guest image, libvirtd and a booted guest: see tests/guest)."""

from guest.fixtures import booted_guest, debian_root, guest_rootfs, libvirt_system, require_root_tools

__all__ = ["booted_guest", "debian_root", "guest_rootfs", "libvirt_system", "require_root_tools"]
