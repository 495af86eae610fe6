"""Read `nvidia-smi nvlink -s` text into per-GPU NvLinkInfo lists.

Bandwidth is kept in GB/s per link, as nvidia-smi prints it; links reported `<inactive>` are kept with
active=False so a missing link is visible rather than silently absent.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpulab.errors import GpulabError
from gpulab.paths import CAPTURE_LIMIT, read_input_bytes
from gpulab.records import NvLinkInfo

_GPU = re.compile(r"^GPU (\d+):")
_LINK = re.compile(r"^\s*Link (\d+):\s*(.*)$")


def parse_nvlink_text(text: str, source: str = "<string>") -> dict[int, list[NvLinkInfo]]:
    """Map GPU index -> its links."""
    out: dict[int, list[NvLinkInfo]] = {}
    current: list[NvLinkInfo] | None = None
    for line in text.splitlines():
        if m := _GPU.match(line):
            current = out.setdefault(int(m.group(1)), [])
            continue
        if (m := _LINK.match(line)) and current is not None:
            rest = m.group(2).strip()
            speed = re.match(r"([\d.]+)\s*GB/s", rest)
            active = speed is not None and "inactive" not in rest.lower()
            current.append(
                NvLinkInfo(
                    link=int(m.group(1)),
                    active=active,
                    bandwidth_gbps=float(speed.group(1)) if speed else None,
                )
            )
    if not out:
        raise GpulabError(
            f"{source}: no 'GPU n:' lines, not `nvidia-smi nvlink -s` output; "
            "capture it with `nvidia-smi nvlink -s > FILE`"
        )
    return out


def parse_nvlink(path: Path) -> dict[int, list[NvLinkInfo]]:
    fix = "capture it with `nvidia-smi nvlink -s > FILE`"
    text = read_input_bytes(path, "NVLink status file", fix, limit=CAPTURE_LIMIT).decode("utf-8", errors="replace")
    return parse_nvlink_text(text, str(path))
