"""libvirt node devices (`virsh nodedev-dumpxml`) as typed PCI device records."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from gpulab.errors import GpulabError
from gpulab.hw.pci_gpu import is_nvidia_gpu, is_nvswitch
from gpulab.records import PcieLink
from gpulab.vm.pci import PciAddress, class_name, is_bridge

# libvirt reports PCIe link speed in GT/s; the generation follows from it (PCIe base spec).
_GEN_BY_SPEED = {"2.5": 1, "5": 2, "8": 3, "16": 4, "32": 5, "64": 6}


@dataclass(frozen=True)
class PciDevice:
    address: PciAddress
    vendor_id: int
    product_id: int
    class_code: int
    vendor_name: str = ""
    product_name: str = ""
    numa_node: int | None = None
    link: PcieLink | None = None
    iommu_group: int | None = None
    iommu_members: tuple[PciAddress, ...] = field(default=())
    driver: str | None = None
    sysfs_path: str | None = None  # libvirt's <path>: /sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0
    parent: str | None = None  # the upstream node device (pci_0000_3a_00_0; "computer" on a root bus)

    @property
    def pci_id(self) -> str:
        return f"{self.vendor_id:04x}:{self.product_id:04x}"

    @property
    def kind(self) -> str:
        return class_name(self.class_code)

    @property
    def is_bridge(self) -> bool:
        return is_bridge(self.class_code)

    @property
    def is_nvidia_gpu(self) -> bool:
        return is_nvidia_gpu(self.vendor_id, self.class_code)

    @property
    def is_nvswitch(self) -> bool:
        return is_nvswitch(self.vendor_id, self.class_code)

    def describe(self) -> str:
        """'0000:07:00.0 Ethernet controller 8086:10fb (82599ES 10-Gigabit SFI/SFP+)'."""
        text = f"{self.address} {self.kind} {self.pci_id}"
        return f"{text} ({self.product_name})" if self.product_name else text


def _int(text: str | None, base: int = 0) -> int | None:
    if text is None or not text.strip():
        return None
    try:
        return int(text.strip(), base)
    except ValueError:
        return None


def _address(elem: ET.Element) -> PciAddress:
    return PciAddress(
        domain=int(elem.get("domain", "0"), 0),
        bus=int(elem.get("bus", "0"), 0),
        slot=int(elem.get("slot", "0"), 0),
        function=int(elem.get("function", "0"), 0),
    )


def _link(cap: ET.Element) -> PcieLink | None:
    links = {e.get("validity"): e for e in cap.findall("pci-express/link")}
    if not links:
        return None

    def gen(elem: ET.Element | None) -> int | None:
        return None if elem is None else _GEN_BY_SPEED.get((elem.get("speed") or "").removesuffix(".0"))

    def width(elem: ET.Element | None) -> int | None:
        return None if elem is None else _int(elem.get("width"))

    cap_link, sta_link = links.get("cap"), links.get("sta")
    return PcieLink(
        gen_current=gen(sta_link), gen_max=gen(cap_link), width_current=width(sta_link), width_max=width(cap_link)
    )


def parse_pci_nodedev(xml: str) -> PciDevice | None:
    """One PCI node device; None when the XML holds no PCI capability (the caller asked for PCI only)."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as err:
        raise GpulabError(f"libvirt returned node device XML that does not parse ({err}); report this.") from err
    cap = root.find("capability[@type='pci']")
    if cap is None:
        return None
    domain, bus, slot, function = (_int(cap.findtext(k)) for k in ("domain", "bus", "slot", "function"))
    if bus is None or slot is None or function is None:
        name = root.findtext("name") or "?"
        raise GpulabError(f"libvirt node device {name} has no PCI address; its XML is incomplete.")
    vendor, product = cap.find("vendor"), cap.find("product")
    group = cap.find("iommuGroup")
    numa = cap.find("numa")
    numa_node = _int(numa.get("node")) if numa is not None else None
    return PciDevice(
        address=PciAddress(domain or 0, bus, slot, function),
        vendor_id=_int(vendor.get("id") if vendor is not None else None) or 0,
        product_id=_int(product.get("id") if product is not None else None) or 0,
        class_code=_int(cap.findtext("class"), 16) or 0,
        vendor_name=(vendor.text or "").strip() if vendor is not None else "",
        product_name=(product.text or "").strip() if product is not None else "",
        # sysfs says -1 when the platform does not report locality.
        numa_node=numa_node if numa_node is not None and numa_node >= 0 else None,
        link=_link(cap),
        iommu_group=_int(group.get("number")) if group is not None else None,
        iommu_members=tuple(sorted(_address(a) for a in group.findall("address"))) if group is not None else (),
        driver=(root.findtext("driver/name") or "").strip() or None,
        sysfs_path=(root.findtext("path") or "").strip() or None,
        parent=(root.findtext("parent") or "").strip() or None,
    )
