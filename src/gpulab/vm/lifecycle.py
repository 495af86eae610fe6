"""define / start / destroy / undefine: idempotent, each returning an Outcome that says whether anything changed.

Redefining an unchanged VM is a no-op; a changed one is redefined and the Outcome carries the unified diff of
libvirt's stored definition before and after.
"""

from __future__ import annotations

import difflib
import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.vm import disk as vmdisk
from gpulab.vm import seed as vmseed
from gpulab.vm.connection import error_text, is_remote, libvirt_module
from gpulab.vm.domain import inactive_xml, lookup, read_metadata, write_metadata
from gpulab.vm.host import Host
from gpulab.vm.network import ensure_network
from gpulab.vm.plan import plan
from gpulab.vm.spec import VmSpec

SSH_PORT = 22


@dataclass
class Outcome:
    name: str
    action: str
    changed: bool
    state: str = ""  # running | shut off | undefined
    diff: str = ""
    ip: str | None = None
    messages: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action": self.action,
            "changed": self.changed,
            "state": self.state,
            "diff": self.diff,
            "ip": self.ip,
            "messages": list(self.messages),
        }


def _state(dom: Any) -> str:
    return "running" if dom.isActive() else "shut off"


def _require_local_files(host: Host, spec: VmSpec) -> None:
    if is_remote(host.uri) and spec.disk is not None and (spec.disk.base is not None or spec.cloud_init is not None):
        raise GpulabError(
            f"{spec.name}: a disk overlay and a cloud-init seed are made on this machine, but {host.uri} is remote. "
            "Run gpulab on the KVM host itself (the libvirt_vm role does), or give disk.path to an existing disk."
        )


def define(conn: Any, spec: VmSpec, host: Host | None = None, root: Path | None = None) -> Outcome:
    """Make the VM defined as `spec` says: checks first, then the network, disk overlay, seed and domain."""
    libvirt = libvirt_module()
    p = plan(conn, spec, host=host, root=root)
    p.raise_for_failures()
    _require_local_files(p.host, spec)
    outcome = Outcome(name=spec.name, action="define", changed=False)
    if spec.network is not None and ensure_network(conn, spec.network):
        outcome.changed = True
        outcome.messages.append(f"network {spec.network.name} created and started")
    files: dict[str, str] = {}
    if spec.disk is not None and spec.disk.base is not None and p.disk_path is not None:
        if vmdisk.ensure_overlay(spec.disk.base, p.disk_path, spec.disk.size_gib):
            outcome.changed = True
            outcome.messages.append(f"disk overlay {p.disk_path} created on {spec.disk.base}")
        files["overlay"] = str(p.disk_path)
    if p.seed is not None and p.seed_path is not None:
        if vmseed.build_seed_iso(p.seed, p.seed_path):
            outcome.changed = True
            outcome.messages.append(f"cloud-init seed {p.seed_path} written")
        files["seed"] = str(p.seed_path)
    if p.up_to_date:
        dom = lookup(conn, spec.name)
        outcome.state = _state(dom)
        outcome.messages.append(f"{spec.name} is already defined as specified")
    else:
        before = p.existing.xml if p.existing else ""
        try:
            dom = conn.defineXMLFlags(p.xml, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
            write_metadata(dom, p.rendered_digest, files)
        except libvirt.libvirtError as err:
            raise GpulabError(f"libvirt refused to define {spec.name}: {error_text(err)}") from err
        after = inactive_xml(dom)
        outcome.state = _state(dom)
        if before != after:
            outcome.changed = True
            outcome.diff = "".join(
                difflib.unified_diff(
                    before.splitlines(keepends=True),
                    after.splitlines(keepends=True),
                    fromfile=f"{spec.name} (defined)" if before else "/dev/null",
                    tofile=f"{spec.name} (new)",
                )
            )
            outcome.messages.append(f"{spec.name} {'updated' if before else 'defined'}")
            if p.existing is not None and p.existing.active:
                outcome.messages.append(f"{spec.name} is running; the new definition applies from its next start")
    if spec.disk is not None and p.seed_path is not None:
        vmseed.remove_stale_seeds(spec.disk.dir, spec.name, keep=p.seed_path)
    return outcome


def _networks_of(dom: Any) -> list[str]:
    root = ET.fromstring(dom.XMLDesc(0))
    return [s.get("network", "") for s in root.findall("devices/interface[@type='network']/source") if s.get("network")]


def _start_error(name: str, err: Exception) -> GpulabError:
    message = error_text(err)
    if "support passthrough of host PCI devices" in message:
        return GpulabError(
            f"cannot start VM {name}: this host has no working IOMMU/VFIO for PCI passthrough (libvirt: {message}). "
            "Enable the IOMMU (intel_iommu=on iommu=pt on the kernel command line; AMD has it on by default, check "
            "VT-d/AMD-Vi in the firmware setup), load vfio-pci, and reboot: the vfio_host role does this. "
            "`gpulab vm host` shows the IOMMU and VFIO state."
        )
    if "not viable" in message:
        return GpulabError(
            f"cannot start VM {name}: an IOMMU group is not viable (libvirt: {message}). Every device in the IOMMU "
            "group of a passed-through GPU must go to the VM or be a bridge; `gpulab vm plan` lists the groups."
        )
    if "virtlogd-sock" in message:
        return GpulabError(
            f"cannot start VM {name}: libvirt's log daemon virtlogd is not running (libvirt: {message}). Start it "
            "(`systemctl start virtlogd.socket`, or `virtlogd -d` where systemd does not run) and start the VM again."
        )
    return GpulabError(f"cannot start VM {name}: {message}")


def _guest_ipv4(dom: Any) -> str | None:
    libvirt = libvirt_module()
    for source in (libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE, libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP):
        try:
            interfaces = dom.interfaceAddresses(source)
        except libvirt.libvirtError:
            continue
        for iface in (interfaces or {}).values():
            for addr in iface.get("addrs") or []:
                if addr.get("type") == libvirt.VIR_IP_ADDR_TYPE_IPV4 and addr.get("addr"):
                    return str(addr["addr"])
    return None


def ssh_banner(ip: str, port: int = SSH_PORT, timeout: float = 5.0) -> str | None:
    """The SSH server's identification line, or None when nothing answers like an SSH server."""
    try:
        with socket.create_connection((ip, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            banner = sock.recv(256).decode(errors="replace").strip()
    except OSError:
        return None
    return banner if banner.startswith("SSH-") else None


def _wait(probe: Callable[[float], str | None], deadline: float, interval: float = 2.0) -> str | None:
    """Call `probe(seconds_left)` until it returns something or the deadline passes."""
    while True:
        found = probe(max(0.5, deadline - time.monotonic()))
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))


def start(conn: Any, name: str, wait_ssh: bool = False, timeout: float = 300.0) -> Outcome:
    """Start the VM unless it runs; with `wait_ssh`, return once its SSH server answers (guest IP from DHCP)."""
    libvirt = libvirt_module()
    dom = lookup(conn, name)
    if dom is None:
        raise GpulabError(f"VM {name} is not defined on {conn.getURI()}; define it first with `gpulab vm define SPEC`.")
    outcome = Outcome(name=name, action="start", changed=False)
    deadline = time.monotonic() + timeout
    if not dom.isActive():
        try:
            for net_name in _networks_of(dom):
                net = conn.networkLookupByName(net_name)
                if not net.isActive():
                    net.create()
                    outcome.messages.append(f"network {net_name} started")
            dom.create()
        except libvirt.libvirtError as err:
            raise _start_error(name, err) from err
        outcome.changed = True
        outcome.messages.append(f"{name} started")
    outcome.state = _state(dom)
    if wait_ssh:
        if not _networks_of(dom):
            raise GpulabError(f"VM {name} has no libvirt network interface, so there is no address to reach SSH on.")
        outcome.ip = _wait(lambda _left: _guest_ipv4(dom), deadline)
        if outcome.ip is None:
            raise GpulabError(
                f"VM {name} runs but got no address from DHCP within {timeout:.0f} s; watch it boot with "
                f"`virsh console {name}`."
            )
        ip = outcome.ip
        banner = _wait(lambda left: ssh_banner(ip, timeout=min(5.0, left)), deadline)
        if banner is None:
            raise GpulabError(
                f"VM {name} has address {ip} but its SSH server did not answer within {timeout:.0f} s; "
                f"check the guest with `virsh console {name}`."
            )
        outcome.messages.append(f"SSH answers at {ip}: {banner}")
    else:
        outcome.ip = _guest_ipv4(dom)
    return outcome


def destroy(conn: Any, name: str) -> Outcome:
    """Power the VM off (like pulling the plug); a VM that is not running is left as it is."""
    libvirt = libvirt_module()
    dom = lookup(conn, name)
    if dom is None:
        return Outcome(
            name=name, action="destroy", changed=False, state="undefined", messages=[f"{name} is not defined"]
        )
    if not dom.isActive():
        return Outcome(name=name, action="destroy", changed=False, state="shut off")
    try:
        dom.destroy()
    except libvirt.libvirtError as err:
        raise GpulabError(f"cannot stop VM {name}: {error_text(err)}") from err
    return Outcome(name=name, action="destroy", changed=True, state=_state(dom), messages=[f"{name} stopped"])


def undefine(conn: Any, name: str, remove_storage: bool = False) -> Outcome:
    """Remove the VM's definition (and its UEFI variables); with `remove_storage`, also the disk overlay and the
    cloud-init seed gpulab created for it. A running VM is refused: stop it with destroy first."""
    libvirt = libvirt_module()
    dom = lookup(conn, name)
    if dom is None:
        return Outcome(
            name=name, action="undefine", changed=False, state="undefined", messages=[f"{name} is not defined"]
        )
    if dom.isActive():
        raise GpulabError(f"VM {name} is running; stop it first with `gpulab vm destroy {name}`, then undefine it.")
    created = read_metadata(dom)
    try:
        try:
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
        except libvirt.libvirtError as err:
            # Drivers that keep no UEFI variable store reject the NVRAM flag; nothing is left behind without it.
            if err.get_error_code() != libvirt.VIR_ERR_INVALID_ARG:
                raise
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
    except libvirt.libvirtError as err:
        raise GpulabError(f"cannot undefine VM {name}: {error_text(err)}") from err
    outcome = Outcome(name=name, action="undefine", changed=True, state="undefined", messages=[f"{name} undefined"])
    if remove_storage:
        for key in ("overlay", "seed"):
            path = Path(created[key]) if created.get(key) else None
            if path is not None and path.exists():
                path.unlink()
                outcome.messages.append(f"removed {path}")
    return outcome
