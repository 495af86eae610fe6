"""The VM's network: an existing libvirt network by name, or an isolated one gpulab defines from
templates/network.xml.j2 (no forwarding; DHCP from dnsmasq) when the spec gives its address."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpulab.errors import GpulabError
from gpulab.vm.connection import error_text, libvirt_module
from gpulab.vm.identity import network_uuid
from gpulab.vm.rendering import render
from gpulab.vm.spec import NetworkSpec


@dataclass(frozen=True)
class NetworkState:
    exists: bool
    active: bool


def render_network(spec: NetworkSpec) -> str:
    if spec.address is None:
        raise GpulabError(f"network {spec.name} has no address; gpulab only creates networks it is given one for.")
    net, ip = spec.address.network, spec.address.ip
    # DHCP hands out the larger run of addresses on either side of the host's own.
    below = (net.network_address + 1, ip - 1)
    above = (ip + 1, net.broadcast_address - 1)
    start, end = max((below, above), key=lambda run: int(run[1]) - int(run[0]))
    context = {
        "name": spec.name,
        "uuid": network_uuid(spec.name),
        "address": str(spec.address.ip),
        "netmask": str(spec.address.netmask),
        "dhcp_start": str(start),
        "dhcp_end": str(end),
    }
    return render("network.xml.j2", net=context)


def network_state(conn: Any, name: str) -> NetworkState:
    libvirt = libvirt_module()
    try:
        net = conn.networkLookupByName(name)
    except libvirt.libvirtError:
        return NetworkState(exists=False, active=False)
    return NetworkState(exists=True, active=bool(net.isActive()))


def known_networks(conn: Any) -> list[str]:
    return sorted(n.name() for n in conn.listAllNetworks())


def ensure_network(conn: Any, spec: NetworkSpec) -> bool:
    """Make the network exist and run; True when something changed. An existing network is used as it is."""
    libvirt = libvirt_module()
    state = network_state(conn, spec.name)
    if not state.exists and not spec.create:
        raise GpulabError(
            f"libvirt network {spec.name!r} does not exist (networks: {', '.join(known_networks(conn)) or 'none'}); "
            "create it, or give network.address in the spec and gpulab creates an isolated one."
        )
    try:
        if not state.exists:
            # VALIDATE checks the XML against libvirt's network schema before anything is defined.
            net = conn.networkDefineXMLFlags(render_network(spec), libvirt.VIR_NETWORK_DEFINE_VALIDATE)
            net.setAutostart(1)
        else:
            net = conn.networkLookupByName(spec.name)
        if not net.isActive():
            net.create()
            return True
    except libvirt.libvirtError as err:
        raise GpulabError(f"cannot set up libvirt network {spec.name}: {error_text(err)}") from err
    return not state.exists
