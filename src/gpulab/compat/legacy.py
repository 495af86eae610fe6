"""GPUs the matrix does not list by model: their architecture from the PCI device id, and the newest stack
(driver branch, CUDA, PyTorch, TensorFlow) that still supports that architecture, computed from matrix.yml.

The PCI id ranges follow NVIDIA's chip numbering as listed in pci.ids (https://pci-ids.ucw.cz/read/PC/10de):
each GPU generation's chips take consecutive device-id blocks. A range is a chip family's block, so an id in
it names the family's architecture even for a board the matrix has no entry for.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulab.compat import versions
from gpulab.compat.data import CudaRelease, load_matrix
from gpulab.compat.rules import matrix_arch
from gpulab.names import Architecture, ReportedArchitecture

# (first id, last id, architecture, compute capability), device ids of vendor 10de, first match wins; from
# pci.ids chip names (GF1xx Fermi, GK1xx/GK2xx Kepler, GM1xx/GM2xx Maxwell, GP1xx Pascal, GV100 Volta, TU1xx
# Turing, GA1xx Ampere, GH100 Hopper, AD1xx Ada, GB1xx/GB2xx Blackwell) and each chip's compute capability (CUDA
# programming guide, "Compute Capabilities"; None where no CUDA release names the chip yet).
# tests/test_compat_legacy.py holds every GPU pci.ids names by its chip against these. Ids of pre-Fermi chips
# (G8x/G9x/GT2xx, e.g. GT218 at 0x10C0) are in no range.
_PCI_RANGES: tuple[tuple[int, int, Architecture, str | None], ...] = (
    (0x06C0, 0x06DF, Architecture.FERMI, "2.0"),  # GF100
    (0x0DC0, 0x0DFF, Architecture.FERMI, "2.1"),  # GF106, GF108
    (0x0E20, 0x0E3F, Architecture.FERMI, "2.1"),  # GF104
    (0x0F00, 0x0F3F, Architecture.FERMI, "2.1"),  # GF108 (GeForce GT 610/620/630/730)
    (0x0FC0, 0x0FFF, Architecture.KEPLER, "3.0"),  # GK107
    (0x102D, 0x102D, Architecture.KEPLER, "3.7"),  # GK210 (Tesla K80), inside the GK110 block below
    (0x1000, 0x103F, Architecture.KEPLER, "3.5"),  # GK110, GK110B, GK180 (Tesla K20/K40)
    (0x1040, 0x107F, Architecture.FERMI, "2.1"),  # GF119
    (0x1080, 0x109F, Architecture.FERMI, "2.0"),  # GF110 (Tesla M2090, GTX 580)
    (0x1140, 0x115F, Architecture.FERMI, "2.1"),  # GF117M
    (0x1180, 0x11FF, Architecture.KEPLER, "3.0"),  # GK104, GK106 (GRID K520, GTX 680)
    (0x1200, 0x127F, Architecture.FERMI, "2.1"),  # GF114, GF116
    (0x1280, 0x12BF, Architecture.KEPLER, "3.5"),  # GK208
    (0x1300, 0x133F, Architecture.KEPLER, "3.5"),  # GK110 (0x130B)
    (0x1340, 0x13BF, Architecture.MAXWELL, "5.0"),  # GM108, GM107 (Tesla M10)
    (0x13C0, 0x13FF, Architecture.MAXWELL, "5.2"),  # GM204
    (0x1400, 0x143F, Architecture.MAXWELL, "5.2"),  # GM206
    (0x15C0, 0x15FF, Architecture.PASCAL, "6.0"),  # GP100
    (0x1600, 0x167F, Architecture.MAXWELL, "5.2"),  # GM204 mobile
    (0x1720, 0x172F, Architecture.PASCAL, "6.0"),  # GP100: inside the Maxwell block below, so listed before it
    (0x1700, 0x17BF, Architecture.MAXWELL, "5.0"),  # GM107, GM108
    (0x17C0, 0x17FF, Architecture.MAXWELL, "5.2"),  # GM200 (Tesla M40)
    (0x1B00, 0x1D7F, Architecture.PASCAL, "6.1"),  # GP102, GP104, GP106, GP107, GP108
    (0x1D80, 0x1DFF, Architecture.VOLTA, "7.0"),  # GV100
    (0x1E00, 0x1FFF, Architecture.TURING, "7.5"),  # TU102, TU104, TU106, TU117
    (0x2080, 0x20FF, Architecture.AMPERE, "8.0"),  # GA100
    (0x2100, 0x21FF, Architecture.TURING, "7.5"),  # TU116
    # GH100 (H100, H200, GH200): inside the GA10x block below, so listed first
    (0x2300, 0x23FF, Architecture.HOPPER, "9.0"),
    (0x2200, 0x25FF, Architecture.AMPERE, "8.6"),  # GA102, GA103, GA104, GA106, GA107
    (0x2600, 0x28FF, Architecture.ADA, "8.9"),  # AD102, AD103, AD104, AD106, AD107
    (0x2900, 0x29FF, Architecture.BLACKWELL, "10.0"),  # GB100, GB102 (B100, B200, GB200)
    (0x2B00, 0x2B00, Architecture.BLACKWELL, "11.0"),  # GB10B (Jetson Thor)
    (0x2E00, 0x2E3F, Architecture.BLACKWELL, "12.1"),  # GB20B (GB10, DGX Spark)
    (0x2B00, 0x2FFF, Architecture.BLACKWELL, "12.0"),  # GB202, GB203, GB205, GB206, GB207 (GeForce RTX 50, RTX PRO)
    (0x3180, 0x31FF, Architecture.BLACKWELL, "10.3"),  # GB110 (B300, GB300)
    (0x3200, 0x33FF, Architecture.BLACKWELL, None),  # GB112, GB120
)

# The compute capability a stack must serve for each architecture: the one most of its compute boards have
# (Kepler's Tesla K20/K40/K80 are 3.5/3.7; its 3.0 parts lost CUDA support earlier, with CUDA 11.0).
ARCH_CC: dict[Architecture, str] = {
    Architecture.FERMI: "2.0",
    Architecture.KEPLER: "3.5",
    Architecture.MAXWELL: "5.0",
    Architecture.PASCAL: "6.0",
    Architecture.VOLTA: "7.0",
    Architecture.TURING: "7.5",
    Architecture.AMPERE: "8.0",
    Architecture.ADA: "8.9",
    Architecture.HOPPER: "9.0",
    Architecture.BLACKWELL: "10.0",
}

# Older than the matrix's CUDA list (9.0 on): Fermi's last CUDA is 8.0 (CUDA 9.0 release notes, "Fermi
# architecture support has been removed").
_LAST_CUDA_BEFORE_MATRIX = {Architecture.FERMI: "8.0"}


def _range_for_pci_id(pci_id: str | None) -> tuple[int, int, Architecture, str | None] | None:
    if not pci_id or not pci_id.lower().startswith("10de:"):
        return None
    try:
        device = int(pci_id.split(":")[1], 16)
    except (IndexError, ValueError):
        return None
    return next((r for r in _PCI_RANGES if r[0] <= device <= r[1]), None)


def architecture_for_pci_id(pci_id: str | None) -> Architecture | None:
    """ "10de:1091" -> Architecture.FERMI; None for another vendor, a malformed id or one in no known range."""
    found = _range_for_pci_id(pci_id)
    return found[2] if found else None


def compute_capability_for_pci_id(pci_id: str | None) -> str | None:
    """ "10de:118a" (GK104) -> "3.0"; None where the id or its chip's compute capability is unknown."""
    found = _range_for_pci_id(pci_id)
    return found[3] if found else None


def sole_compute_capability(architecture: ReportedArchitecture | None) -> str | None:
    """The compute capability every chip of the architecture has (Volta 7.0, Turing 7.5, Ada 8.9, Hopper 9.0);
    None where its chips differ (Ampere 8.0 and 8.6) or the matrix does not list the architecture."""
    found = {cc for _, _, a, cc in _PCI_RANGES if a is architecture}
    return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class NewestStack:
    architecture: Architecture
    driver_branch: str
    driver: str
    cuda: str | None
    torch: str | None
    tensorflow: str | None
    current: bool  # the newest driver branch still supports the architecture

    def text(self) -> str:
        matrix = load_matrix()
        torch = (
            f"PyTorch {self.torch}"
            if self.torch
            else f"no PyTorch release the matrix lists ({matrix.torch[0].version} and later)"
        )
        tf = (
            f"TensorFlow {self.tensorflow}"
            if self.tensorflow
            else f"no TensorFlow release the matrix lists ({matrix.tensorflow[0].version} and later)"
        )
        cuda = f"CUDA {self.cuda}" if self.cuda else "no CUDA"
        return f"driver {self.driver_branch} ({self.driver}), {cuda}, {torch}, {tf}"


def newest_stack(architecture: ReportedArchitecture, compute_capability: str | None = None) -> NewestStack:
    """The newest driver branch, CUDA, PyTorch and TensorFlow that support `architecture`, from matrix.yml;
    for a GPU of known `compute_capability` (a Kepler GK104 is 3.0, not the architecture's 3.5) by that."""
    arch = matrix_arch(architecture)
    matrix = load_matrix()
    branches = [b for b in matrix.drivers if arch in b.architectures]
    last = max(branches, key=lambda b: b.number)
    own_cc = compute_capability or ARCH_CC[arch]
    cc = versions.key(own_cc)

    def served(rel: CudaRelease) -> bool:
        """A CUDA release with kernels for the architecture that the last branch runs, natively or through
        minor-version compatibility within its major version."""
        if versions.key(rel.cc_min) > cc:
            return False
        if versions.key(rel.version) <= versions.key(last.max_cuda):
            return True
        compat = rel.min_driver_compat
        same_major = rel.version.split(".")[0] == last.max_cuda.split(".")[0]
        return compat is not None and same_major and versions.key(compat) <= versions.key(last.recommended)

    cudas = [c for c in matrix.cuda if served(c)]
    cuda = max((c.version for c in cudas), key=versions.key, default=_LAST_CUDA_BEFORE_MATRIX.get(arch))
    major, minor = own_cc.split(".")
    torch = tf = None
    if cuda is not None:
        runs = [
            r.version
            for r in matrix.torch
            for b in r.builds
            if versions.key(b.cuda) <= versions.key(cuda)
            and any(a.split(".")[0] == major and int(a.split(".")[1]) <= int(minor) for a in b.arches)
        ]
        torch = max(runs, key=versions.key, default=None)
        # A TensorFlow release runs where its tested CUDA does and its wheels carry kernels for the GPU.
        tfs = [
            t.version
            for t in matrix.tensorflow
            if versions.key(t.cuda) <= versions.key(cuda) and versions.key(t.cc_min) <= cc
        ]
        tf = max(tfs, key=versions.key, default=None)
    newest = max(b.number for b in matrix.drivers)
    return NewestStack(arch, last.branch, last.recommended, cuda, torch, tf, current=last.number == newest)
