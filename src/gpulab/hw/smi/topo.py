"""Read `nvidia-smi topo -m` text: the GPU-to-GPU link matrix and each GPU's CPU/NUMA affinity.

Only GPU rows are kept (NIC rows and columns are dropped) so the matrix lines up with GpuInfo.index.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gpulab.errors import GpulabError
from gpulab.paths import CAPTURE_LIMIT, read_input_bytes

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FIX = "capture it with `nvidia-smi topo -m > FILE`"


@dataclass
class GpuAffinity:
    cpus: str | None = None  # cpulist, "0-63"
    numa: str | None = None  # "0", "0-1" or None for N/A


@dataclass
class Topology:
    matrix: list[list[str]] = field(default_factory=list)
    affinity: list[GpuAffinity] = field(default_factory=list)


def parse_topo_text(text: str, source: str = "<string>") -> Topology:
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_idx = next((i for i, line in enumerate(lines) if re.search(r"\bGPU0\b", line)), None)
    if header_idx is None:
        raise GpulabError(f"{source}: no GPU0 column header, not `nvidia-smi topo -m` output; {_FIX}")
    # Columns are tab separated; the header starts with an empty cell for the row labels.
    header = [c.strip() for c in lines[header_idx].split("\t")]
    if header and header[0] == "":
        header = header[1:]
    gpu_cols = [i for i, name in enumerate(header) if re.fullmatch(r"GPU\d+", name)]
    cpu_col = header.index("CPU Affinity") if "CPU Affinity" in header else None
    numa_col = header.index("NUMA Affinity") if "NUMA Affinity" in header else None
    topo = Topology()
    for line in lines[header_idx + 1 :]:
        if not line.strip():
            break
        cells = line.split("\t")
        label, cells = cells[0].strip(), [c.strip() for c in cells[1:]]
        if not re.fullmatch(r"GPU\d+", label):
            continue  # NIC rows
        if len(cells) < len(gpu_cols):
            raise GpulabError(f"{source}: row {label} has {len(cells)} cells, expected {len(header)}; {_FIX}")
        topo.matrix.append([cells[i] for i in gpu_cols])

        def cell(col: int | None, cells: list[str] = cells) -> str | None:
            if col is None or col >= len(cells) or cells[col] in ("", "N/A"):
                return None
            return cells[col]

        topo.affinity.append(GpuAffinity(cpus=cell(cpu_col), numa=cell(numa_col)))
    if len(topo.matrix) != len(gpu_cols):
        raise GpulabError(f"{source}: {len(gpu_cols)} GPU columns but {len(topo.matrix)} GPU rows; {_FIX}")
    return topo


def parse_topo(path: Path) -> Topology:
    text = read_input_bytes(path, "topology file", _FIX, limit=CAPTURE_LIMIT).decode("utf-8", errors="replace")
    return parse_topo_text(text, str(path))
