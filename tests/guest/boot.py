"""Boot the test guest on qemu:///system through gpulab.vm: the same template, seed and lifecycle users get.

The guest runs under TCG (domain type qemu, cpu maximum: this machine's /dev/kvm cannot run stock guests), boots
its kernel directly (no firmware or bootloader to wait for), gets its SSH key from gpulab's cloud-init seed and
its address from the isolated network gpulab creates.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guest import disk, image
from guest.ssh import Guest

NETWORK = "gpulab-test"
NETWORK_ADDRESS = "192.168.213.1/24"  # the host's side of the isolated bridge; guests get DHCP leases in it
NAME_PREFIX = "gpulab-test-"
BOOT_TIMEOUT = 900.0  # TCG boots to SSH in 1.5-3 min on 2 cores; leave room for a loaded machine


def runs_dir() -> Path:
    """Per-guest files (overlay, seed, console log). Not under /tmp: QEMU runs as libvirt-qemu and must reach them."""
    path = image.guest_cache() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def guest_name(tag: str = "") -> str:
    return f"{NAME_PREFIX}{os.getpid()}{'-' + tag if tag else ''}"


def spec_dict(
    name: str, base: disk.BaseDisk, public_key: str, workdir: Path, vcpus: int, memory_mib: int
) -> dict[str, Any]:
    """A gpulab VM spec (docs/vm.md) for the test guest."""
    return {
        "name": name,
        "vcpus": vcpus,
        "memory_mib": memory_mib,
        "domain_type": "qemu",
        "cpu_mode": "maximum",
        "firmware": "bios",
        "numa_pinning": False,
        "disk": {"base": str(base.qcow2), "dir": str(workdir)},
        "cloud_init": {"hostname": name, "user": image.GUEST_USER, "ssh_authorized_keys": [public_key]},
        "network": {"name": NETWORK, "address": NETWORK_ADDRESS},
        "kernel_boot": {"kernel": str(base.kernel), "initrd": str(base.initrd), "cmdline": base.cmdline},
        "console_log": str(workdir / "console.log"),
    }


def console_tail(workdir: Path, lines: int = 40) -> str:
    log = workdir / "console.log"
    if not log.exists():
        return "(no console log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_guest(conn: Any, name: str) -> None:
    """Destroy and undefine a test guest and delete its files; quiet when parts are already gone."""
    from gpulab import vm

    with contextlib.suppress(Exception):
        vm.destroy(conn, name)
    with contextlib.suppress(Exception):
        vm.undefine(conn, name, remove_storage=True)
    shutil.rmtree(runs_dir() / name, ignore_errors=True)


def reap_orphans(conn: Any) -> list[str]:
    """Remove test guests left by test sessions that died (their pid is in the name and no longer runs)."""
    reaped = []
    names = {d.name() for d in conn.listAllDomains()} | {p.name for p in runs_dir().iterdir()}
    for name in sorted(names):
        if not name.startswith(NAME_PREFIX):
            continue
        pid = name.removeprefix(NAME_PREFIX).split("-")[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            remove_guest(conn, name)
            reaped.append(name)
    return reaped


def wait_for_boot(guest: Guest, timeout: float) -> None:
    """Block until systemd has finished booting (cloud-init included); a dropped connection is retried."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = guest.ssh("systemctl", "is-system-running", "--wait", timeout=timeout, check=False)
        state = proc.stdout.strip()
        if state == "running":
            return
        if proc.returncode != 255:  # 255: the connection dropped (sshd restarting); anything else is the guest's
            failed = guest.ssh("systemctl", "--failed", "--no-legend", check=False).stdout.strip()
            raise RuntimeError(
                f"{guest.name} finished booting {state or 'in an unknown state'}; failed units: {failed}"
            )
        time.sleep(2)
    raise TimeoutError(f"{guest.name} did not finish booting within {timeout:.0f} s")


def redefine(conn: Any, name: str, edit: Callable[[str], str]) -> None:
    """Define the domain again from its stored definition passed through `edit` (gpulab's metadata kept)."""
    import libvirt

    xml = conn.lookupByName(name).XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    conn.defineXMLFlags(edit(xml), libvirt.VIR_DOMAIN_DEFINE_VALIDATE)


def boot(
    conn: Any,
    name: str,
    key: Path,
    vcpus: int = 2,
    memory_mib: int = 3072,
    overrides: dict[str, Any] | None = None,
    host: Any = None,
    edit: Callable[[str], str] | None = None,
) -> tuple[Guest, float]:
    """Define and start a guest, wait until SSH logs in with `key`; returns it and the seconds from start to login.

    `overrides` change the spec's keys, `host` replaces gpulab's discovery of this machine (a gpulab.vm.Host), and
    `edit` rewrites the defined domain's XML before it starts (to drop what this machine cannot give a guest)."""
    from gpulab import vm

    base = disk.base_disk()
    workdir = runs_dir() / name
    workdir.mkdir(exist_ok=True)
    workdir.chmod(0o755)
    public_key = Path(f"{key}.pub").read_text().strip()
    data = {**spec_dict(name, base, public_key, workdir, vcpus, memory_mib), **(overrides or {})}
    spec = vm.spec_from_dict(data, where=f"test guest {name}")
    vm.define(conn, spec, host=host)
    if edit is not None:
        redefine(conn, name, edit)
    started = time.monotonic()
    try:
        out = vm.start(conn, name, wait_ssh=True, timeout=BOOT_TIMEOUT)
        assert out.ip is not None
        guest = Guest(
            name=name,
            host=out.ip,
            user=image.GUEST_USER,
            key=key,
            kernel_release=base.kernel_release,
            host_address=NETWORK_ADDRESS.split("/")[0],
            console_log=workdir / "console.log",
        )
        # The SSH server may answer before cloud-init has installed the key: log in, then wait for the boot
        # (cloud-init included) to finish, so tests never race it.
        guest.wait_for_ssh(timeout=max(60.0, BOOT_TIMEOUT - (time.monotonic() - started)))
        wait_for_boot(guest, timeout=max(60.0, BOOT_TIMEOUT - (time.monotonic() - started)))
    except Exception as err:
        raise RuntimeError(f"test guest {name} did not come up: {err}\nconsole:\n{console_tail(workdir)}") from err
    return guest, time.monotonic() - started
