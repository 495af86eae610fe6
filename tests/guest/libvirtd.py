"""libvirt's system daemon for the boot tests, started by hand where systemd is not PID 1 (containers, CI)."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import time
from pathlib import Path

from guest.image import file_lock, guest_cache, run

URI = "qemu:///system"
SOCKET = Path("/run/libvirt/libvirt-sock")
VIRTLOGD_SOCKET = Path("/run/libvirt/virtlogd-sock")


def responds(uri: str = URI) -> bool:
    """True when a client call to the daemon succeeds."""
    proc = subprocess.run(["virsh", "-c", uri, "version"], capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode == 0


def _prepare_kvm_device() -> None:
    # Without group kvm access to /dev/kvm libvirt re-probes QEMU's capabilities on every call (~1 min each).
    kvm = Path("/dev/kvm")
    if not kvm.exists():
        return
    try:
        gid = grp.getgrnam("kvm").gr_gid
    except KeyError:
        return
    st = kvm.stat()
    if st.st_gid != gid:
        os.chown(kvm, -1, gid)
    if st.st_mode & 0o060 != 0o060:
        kvm.chmod(0o660)


def _wait_for(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.2)
    return False


def ensure_running() -> None:
    """Start virtlogd and libvirtd unless the daemon already answers; idempotent and safe across sessions."""
    if SOCKET.exists() and responds():
        return
    with file_lock(guest_cache() / "libvirtd.lock"):
        if SOCKET.exists() and responds():
            return
        _prepare_kvm_device()
        if not VIRTLOGD_SOCKET.exists():
            run([shutil.which("virtlogd") or "/usr/sbin/virtlogd", "-d"])
            _wait_for(VIRTLOGD_SOCKET, 30)
        # A socket left by a daemon that died would make the new one refuse to start.
        SOCKET.unlink(missing_ok=True)
        run([shutil.which("libvirtd") or "/usr/sbin/libvirtd", "-d"])
        if not _wait_for(SOCKET, 60) or not responds():
            raise RuntimeError(f"libvirtd started but {URI} does not answer; see /var/log/libvirt/libvirtd.log")
