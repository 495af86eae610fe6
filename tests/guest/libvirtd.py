"""libvirt's system daemon for the boot tests, started by hand where systemd is not PID 1 (containers, CI)."""

from __future__ import annotations

import grp
import os
import shutil
import socket
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


def accepts(path: Path) -> bool:
    """True when a daemon listens on the UNIX socket `path` (a socket file alone may be left by one that died)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def _wait_for(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if accepts(path):
            return True
        time.sleep(0.2)
    return False


def _start(daemon: str, sock: Path, seconds: float) -> None:
    # Sockets survive their daemon where /run outlives the processes (a container restarted, a session ended);
    # a stale one would make the new daemon refuse to bind.
    for stale in sock.parent.glob(f"{sock.name.removesuffix('-sock')}*sock*"):
        stale.unlink(missing_ok=True)
    run([shutil.which(daemon) or f"/usr/sbin/{daemon}", "-d"])
    if not _wait_for(sock, seconds):
        raise RuntimeError(f"{daemon} started but nothing listens on {sock}; see /var/log/libvirt/{daemon}.log")


def ensure_running() -> None:
    """Start virtlogd and libvirtd unless they already listen; idempotent and safe across sessions.

    QEMU guests log through virtlogd, so libvirtd answering is not enough: each daemon is checked on its own."""
    if accepts(VIRTLOGD_SOCKET) and accepts(SOCKET) and responds():
        return
    with file_lock(guest_cache() / "libvirtd.lock"):
        _prepare_kvm_device()
        if not accepts(VIRTLOGD_SOCKET):
            _start("virtlogd", VIRTLOGD_SOCKET, 30)
        if not accepts(SOCKET):
            _start("libvirtd", SOCKET, 60)
        if not responds():
            raise RuntimeError(f"libvirtd listens but {URI} does not answer; see /var/log/libvirt/libvirtd.log")
