"""Degenerate and retro-dated `nvidia-smi -q -x` captures, derived from the real ones in fixtures/."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
H200_XML = FIXTURES / "h200x4-firecracker" / "nvidia-smi-q-x.xml"
H200_TOPO = FIXTURES / "h200x4-firecracker" / "nvidia-smi-topo-m.txt"
# A real 2017 capture: driver 375.66, two Tesla P100 PCIe 12GB (see fixtures/p100x2-driver375/README.md).
P100_XML = FIXTURES / "p100x2-driver375" / "nvidia-smi-q-x.xml"


def all_na(xml: str, keep: tuple[str, ...] = ("uuid",)) -> str:
    """Every leaf value replaced by N/A, as a driver that reports nothing writes it; `keep` tags stay."""
    root = ET.fromstring(xml)
    for node in root.iter():
        if len(node) == 0 and node.tag not in keep and (node.text or "").strip():
            node.text = "N/A"
    return ET.tostring(root, encoding="unicode")


def with_versions(xml: str, driver: str, cuda: str | None) -> str:
    """The capture with its driver version replaced and its CUDA version set (added when absent)."""
    xml = re.sub(r"<driver_version>[^<]*</driver_version>", f"<driver_version>{driver}</driver_version>", xml)
    xml = re.sub(r"\s*<cuda_version>[^<]*</cuda_version>", "", xml)
    if cuda is not None:
        xml = xml.replace("</driver_version>", f"</driver_version>\n    <cuda_version>{cuda}</cuda_version>", 1)
    return xml


def write(path: Path, xml: str) -> Path:
    path.write_text(xml)
    return path
