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
from gpulab.compat.rules import normalize_arch

# (first id, last id, architecture), device ids of vendor 10de, first match wins; from pci.ids chip names
# (GF1xx Fermi, GK1xx/GK2xx Kepler, GM1xx/GM2xx Maxwell, GP1xx Pascal, GV100 Volta, TU1xx Turing, GA1xx Ampere,
# GH100 Hopper, AD1xx Ada, GB1xx/GB2xx Blackwell). tests/test_compat_legacy.py holds every GPU pci.ids names by
# its chip against these. Ids of pre-Fermi chips (G8x/G9x/GT2xx, e.g. GT218 at 0x10C0) are in no range.
_PCI_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x06C0, 0x06DF, "Fermi"),  # GF100
    (0x0DC0, 0x0DFF, "Fermi"),  # GF106, GF108
    (0x0E20, 0x0E3F, "Fermi"),  # GF104
    (0x0F00, 0x0F3F, "Fermi"),  # GF108 (GeForce GT 610/620/630/730)
    (0x0FC0, 0x0FFF, "Kepler"),  # GK107
    (0x1000, 0x103F, "Kepler"),  # GK110, GK110B, GK180, GK210 (Tesla K20/K40/K80)
    (0x1040, 0x107F, "Fermi"),  # GF119
    (0x1080, 0x109F, "Fermi"),  # GF110 (Tesla M2090, GTX 580)
    (0x1140, 0x115F, "Fermi"),  # GF117M
    (0x1180, 0x11FF, "Kepler"),  # GK104, GK106
    (0x1200, 0x127F, "Fermi"),  # GF114, GF116
    (0x1280, 0x12BF, "Kepler"),  # GK208
    (0x1300, 0x133F, "Kepler"),  # GK110 (0x130B)
    (0x1340, 0x13BF, "Maxwell"),  # GM108, GM107 (Tesla M10)
    (0x13C0, 0x13FF, "Maxwell"),  # GM204
    (0x1400, 0x143F, "Maxwell"),  # GM206
    (0x15C0, 0x15FF, "Pascal"),  # GP100
    (0x1600, 0x167F, "Maxwell"),  # GM20x mobile
    (0x1720, 0x172F, "Pascal"),  # GP100: inside the Maxwell block below, so listed before it
    (0x1700, 0x17FF, "Maxwell"),  # GM107, GM108, GM200
    (0x1B00, 0x1D7F, "Pascal"),  # GP102, GP104, GP106, GP107, GP108
    (0x1D80, 0x1DFF, "Volta"),  # GV100
    (0x1E00, 0x1FFF, "Turing"),  # TU102, TU104, TU106, TU117
    (0x2080, 0x20FF, "Ampere"),  # GA100
    (0x2100, 0x21FF, "Turing"),  # TU116
    (0x2300, 0x23FF, "Hopper"),  # GH100 (H100, H200, GH200): inside the GA10x block below, so listed before it
    (0x2200, 0x25FF, "Ampere"),  # GA102, GA103, GA104, GA106, GA107
    (0x2600, 0x28FF, "Ada"),  # AD102, AD103, AD104, AD106, AD107
    (0x2900, 0x29FF, "Blackwell"),  # GB100, GB102 (B100, B200, GB200)
    (0x2B00, 0x2FFF, "Blackwell"),  # GB10B, GB20x, GB20B
    (0x3180, 0x33FF, "Blackwell"),  # GB110, GB112, GB120 (B300, GB300)
)

# The compute capability a stack must serve for each architecture: the one most of its compute boards have
# (Kepler's Tesla K20/K40/K80 are 3.5/3.7; its 3.0 parts lost CUDA support earlier, with CUDA 11.0).
ARCH_CC = {
    "Fermi": "2.0",
    "Kepler": "3.5",
    "Maxwell": "5.0",
    "Pascal": "6.0",
    "Volta": "7.0",
    "Turing": "7.5",
    "Ampere": "8.0",
    "Ada": "8.9",
    "Hopper": "9.0",
    "Blackwell": "10.0",
}

# Older than the matrix's CUDA list (9.0 on): Fermi's last CUDA is 8.0 (CUDA 9.0 release notes, "Fermi
# architecture support has been removed").
_LAST_CUDA_BEFORE_MATRIX = {"Fermi": "8.0"}


def architecture_for_pci_id(pci_id: str | None) -> str | None:
    """ "10de:1091" -> "Fermi"; None for another vendor, a malformed id or one in no known range."""
    if not pci_id or not pci_id.lower().startswith("10de:"):
        return None
    try:
        device = int(pci_id.split(":")[1], 16)
    except (IndexError, ValueError):
        return None
    return next((arch for lo, hi, arch in _PCI_RANGES if lo <= device <= hi), None)


@dataclass(frozen=True)
class NewestStack:
    architecture: str
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


def newest_stack(architecture: str) -> NewestStack:
    """The newest driver branch, CUDA, PyTorch and TensorFlow that support `architecture`, from matrix.yml."""
    arch = normalize_arch(architecture)
    matrix = load_matrix()
    branches = [b for b in matrix.drivers if arch in b.architectures]
    last = max(branches, key=lambda b: b.number)
    cc = versions.key(ARCH_CC[arch])

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
    major, minor = ARCH_CC[arch].split(".")
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
