"""Existing domains: lookup, the normalised XML gpulab compares, and the bookkeeping it keeps in metadata.

gpulab records two digests in the domain's `<metadata>`: of the XML it rendered, and of the definition libvirt
stored from it. A define whose rendering and stored definition both still match is a no-op; anything else
(a changed spec, or an edit made with `virsh edit`) redefines and reports the difference.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

from gpulab.vm.connection import libvirt_module

METADATA_URI = "https://gpulab.dev/xmlns/vm/1"
QEMU_NAMESPACE = "http://libvirt.org/schemas/domain/qemu/1.0"
METADATA_KEY = "gpulab"


@dataclass(frozen=True)
class Existing:
    uuid: str
    active: bool
    xml: str  # normalised inactive definition
    rendered_digest: str | None
    defined_digest: str | None
    files: dict[str, str]  # what gpulab created for it: overlay, seed

    @property
    def untouched(self) -> bool:
        """The stored definition is still the one gpulab defined (no edit since)."""
        return self.defined_digest == digest(self.xml)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def normalise(xml: str) -> str:
    """libvirt's inactive XML in a canonical form for comparing and diffing: without gpulab's metadata, and
    with the devices sorted (libvirt rewrites their order when it saves a definition after a start)."""
    root = ET.fromstring(xml)
    for metadata in root.findall("metadata"):
        root.remove(metadata)
    devices = root.find("devices")
    if devices is not None:
        children = sorted(devices, key=lambda e: (e.tag, ET.tostring(e, encoding="unicode")))
        for child in list(devices):
            devices.remove(child)
        devices.extend(children)
    return "".join(_lines(root, 0))


def _escape(text: str, quote: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("'", "&apos;") if quote else text


def _qualified(name: str) -> str:
    """ElementTree's '{uri}tag' back to the prefix libvirt writes."""
    return name.replace("{" + QEMU_NAMESPACE + "}", "qemu:")


def _lines(elem: ET.Element, depth: int) -> list[str]:
    """One element written the way `virsh dumpxml` does (two-space indent, single-quoted attributes)."""
    pad = "  " * depth
    attrs = "".join(f" {_qualified(k)}='{_escape(v, quote=True)}'" for k, v in elem.attrib.items())
    if depth == 0 and any(_qualified(e.tag).startswith("qemu:") for e in elem.iter()):
        attrs += f" xmlns:qemu='{QEMU_NAMESPACE}'"
    tag = _qualified(elem.tag)
    children = list(elem)
    text = (elem.text or "").strip()
    if not children:
        return [f"{pad}<{tag}{attrs}>{_escape(text)}</{tag}>\n" if text else f"{pad}<{tag}{attrs}/>\n"]
    lines = [f"{pad}<{tag}{attrs}>\n"]
    for child in children:
        lines.extend(_lines(child, depth + 1))
    lines.append(f"{pad}</{tag}>\n")
    return lines


def lookup(conn: Any, name: str) -> Any | None:
    libvirt = libvirt_module()
    try:
        return conn.lookupByName(name)
    except libvirt.libvirtError as err:
        if err.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
            return None
        raise


def inactive_xml(dom: Any) -> str:
    libvirt = libvirt_module()
    return normalise(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))


def read_metadata(dom: Any) -> dict[str, str]:
    """gpulab's record on a domain: `rendered`/`defined` digests and the files it created (`overlay`, `seed`)."""
    libvirt = libvirt_module()
    try:
        text = dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, METADATA_URI, libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        root = ET.fromstring(text)
    except (libvirt.libvirtError, ET.ParseError):
        return {}
    record = dict(root.attrib)
    record.update({child.tag: child.get("sha256", "") for child in root})
    return record


def write_metadata(dom: Any, rendered_digest: str, files: dict[str, str]) -> None:
    """Record what gpulab rendered, the definition libvirt stored from it, and the files gpulab made for it."""
    libvirt = libvirt_module()
    root = ET.Element("vm", {k: v for k, v in sorted(files.items()) if v})
    ET.SubElement(root, "rendered", sha256=rendered_digest)
    ET.SubElement(root, "defined", sha256=digest(inactive_xml(dom)))
    dom.setMetadata(
        libvirt.VIR_DOMAIN_METADATA_ELEMENT,
        ET.tostring(root, encoding="unicode"),
        METADATA_KEY,
        METADATA_URI,
        libvirt.VIR_DOMAIN_AFFECT_CONFIG,
    )


def existing(conn: Any, name: str) -> Existing | None:
    dom = lookup(conn, name)
    if dom is None:
        return None
    meta = read_metadata(dom)
    return Existing(
        uuid=dom.UUIDString(),
        active=bool(dom.isActive()),
        xml=inactive_xml(dom),
        rendered_digest=meta.get("rendered"),
        defined_digest=meta.get("defined"),
        files={k: v for k, v in meta.items() if k in ("overlay", "seed")},
    )
