"""Turn what a user means ("4x10de:15f8", "all", "3b:00.0,3c:00.0", "2xP100") into the host's GPUs.

Every miss is a one-line GpulabError that lists what the host has, the way virt-install answers "did not find a
matching node device".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from gpulab.compat import gpu_by_name, normalize_pci_id
from gpulab.errors import GpulabError
from gpulab.vm import viable
from gpulab.vm.host import Gpu, Host
from gpulab.vm.pci import PciAddress

SELECTOR_FORMS = (
    "'all', 'none', a count ('2'), a model or PCI id ('P100', '10de:15f8': every such GPU), "
    "a count of them ('4x10de:15f8', '2xP100'), or PCI addresses ('0000:3b:00.0,3c:00.0')"
)
# Used with fullmatch. A count is taken in any numeric form so that '-1xP100' or '1.5xP100' is refused as a count,
# not looked up as a model; ASCII digits only ('²'.isdigit() is true, but int('²') fails).
_NUMBER = r"[-+]?[0-9]+(?:\.[0-9]*)?"
_COUNT = re.compile(rf"(?P<count>{_NUMBER})[ \t]*[x×*][ \t]*(?P<what>.+)", re.IGNORECASE)
_PLAIN_COUNT = re.compile(_NUMBER)


def host_gpu_listing(host: Host) -> str:
    """What the host has, on one line (an error stays one line)."""
    if not host.gpus:
        return f"this host has no NVIDIA GPUs ({len(host.devices)} PCI devices in libvirt's node-device list)"
    items = []
    for gpu in host.gpus:
        numa = f"NUMA node {gpu.numa_node}" if gpu.numa_node is not None else "NUMA node unknown"
        items.append(f"{gpu.address} {gpu.name} ({gpu.device.pci_id}, {numa})")
    return f"this host has {len(host.gpus)} NVIDIA GPU{'s' if len(host.gpus) != 1 else ''}: {'; '.join(items)}"


def _count(term: str, text: str) -> int:
    if not text.isdigit():
        raise GpulabError(
            f"GPU selector {term!r}: {text} is not a GPU count; ask for a whole number of at least 1, or use 'none'."
        )
    count = int(text)
    if count < 1:
        raise GpulabError(f"GPU selector {term!r} asks for {count} GPUs; ask for at least 1, or use 'none'.")
    return count


def _terms(selector: str | Sequence[str]) -> list[str]:
    items = [selector] if isinstance(selector, str) else list(selector)
    terms: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise GpulabError(f"GPU selector item {item!r} is not text; use {SELECTOR_FORMS}.")
        terms.extend(t.strip() for t in item.split(",") if t.strip())
    return terms


def _by_address(host: Host, terms: list[str]) -> list[Gpu]:
    chosen: list[Gpu] = []
    for term in terms:
        address = PciAddress.parse(term)
        gpu = host.gpu_at(address)
        if gpu is None:
            device = host.devices.get(address)
            if device is None:
                raise GpulabError(f"no PCI device {address} on this host; {host_gpu_listing(host)}.")
            owner = next((g for g in host.gpus if device in g.companions), None)
            if owner is not None:
                raise GpulabError(
                    f"{address} is the {device.kind} of GPU {owner.address}; select the GPU and its other "
                    "functions come with it."
                )
            raise GpulabError(
                f"{device.describe()} is not an NVIDIA GPU; pass other PCI devices with `extra_hostdevs`; "
                f"{host_gpu_listing(host)}."
            )
        if gpu in chosen:
            raise GpulabError(f"GPU {address} is selected twice; name each GPU once.")
        chosen.append(gpu)
    return chosen


def _pci_ids_for(what: str, host: Host) -> tuple[set[str], str]:
    """The PCI ids a model name or id stands for, and how to name them in messages."""
    pci_id = normalize_pci_id(what)
    if pci_id is not None:
        return {pci_id}, pci_id
    spec = gpu_by_name(what)
    if spec is None:
        raise GpulabError(
            f"unknown GPU model {what!r}: use a name or alias from `gpulab matrix gpus` ('P100', 'NVIDIA H200') "
            f"or a PCI id ('10de:15f8'); {host_gpu_listing(host)}."
        )
    return set(spec.pci_ids), spec.name


def select_gpus(host: Host, selector: str | Sequence[str] | None, extra: Collection[PciAddress] = ()) -> list[Gpu]:
    """The GPUs `selector` names on `host`, in a stable order (host address order, or as listed). A count picks
    among the sets that can go to a VM whole (`extra`: devices the VM takes too, so they may share a group)."""
    terms = _terms(selector) if selector is not None else []
    if selector is not None and not terms:  # `--gpus ''` is more likely an unset variable than "no GPU"
        raise GpulabError(
            f"GPU selector {selector!r} is empty; write one such as 'all', '2xP100' or '0000:3b:00.0', "
            "or 'none' for no GPU."
        )
    if not terms or [t.lower() for t in terms] == ["none"]:
        return []
    if all(PciAddress.looks_like(t) for t in terms):
        return _by_address(host, terms)
    if len(terms) != 1:
        raise GpulabError(f"cannot combine GPU selectors {', '.join(terms)!s}; use one of {SELECTOR_FORMS}.")
    term = terms[0]
    if term.lower() == "all":
        if not host.gpus:
            raise GpulabError(f"--gpus all: {host_gpu_listing(host)}.")
        return list(host.gpus)

    m = _COUNT.fullmatch(term)
    count: int | None
    if _PLAIN_COUNT.fullmatch(term):
        count, ids, label = _count(term, term), {g.device.pci_id for g in host.gpus}, "NVIDIA GPU"
    elif m and normalize_pci_id(term) is None:  # "0x10de:15f8" is an id, not "0 x 10de:15f8"
        count = _count(term, m.group("count"))
        ids, label = _pci_ids_for(m.group("what").strip(), host)
    else:
        count = None
        ids, label = _pci_ids_for(term, host)
    candidates = [g for g in host.gpus if g.device.pci_id in ids]
    if not candidates:
        raise GpulabError(f"no {label} on this host (selector {term!r}); {host_gpu_listing(host)}.")
    if count is None:
        return candidates
    if count > len(candidates):
        raise GpulabError(
            f"selector {term!r} asks for {count} x {label}, but this host has {len(candidates)}; ask for at most "
            f"{len(candidates)}; {host_gpu_listing(host)}."
        )
    found = viable.units(host, candidates, extra)
    chosen = viable.pick(found, count)
    if chosen is None:
        raise GpulabError(
            f"no {count} x {label} on this host can go to a VM whole (selector {term!r}): {viable.why_not(found)}. "
            "Ask for a count the usable IOMMU groups add up to, name GPUs by address, add the devices that share "
            "their group to extra_hostdevs, or move cards to slots with ACS (`gpulab vm host` lists the groups)."
        )
    return chosen
