"""The PCI-id ranges of compat/legacy.py held against pci.ids, the list the ids come from.

pci.ids names most NVIDIA GPUs by their chip (`2330  GH100 [H100 SXM5 80GB]`); the chip's letters name the
architecture. Every such GPU must map to that architecture, and the ids of chips older than Fermi to none. The
system's pci.ids (Debian's package) gives the broad sample; it may predate the newest chips, so an excerpt of the
upstream list from device 0x2300 on (tests/fixtures/pci-ids/README.md) adds Hopper's and Blackwell's later ids.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpulab.compat.legacy import architecture_for_pci_id, compute_capability_for_pci_id, newest_stack
from gpulab.names import Architecture, UnlistedArchitecture
from guest.prereq import require_file

SYSTEM_PCI_IDS = "/usr/share/misc/pci.ids"
EXCERPT = Path(__file__).parent / "fixtures" / "pci-ids" / "nvidia-2300-on.ids"
CHIP_ARCH = {
    "GF": "Fermi",
    "GK": "Kepler",
    "GM": "Maxwell",
    "GP": "Pascal",
    "GV": "Volta",
    "TU": "Turing",
    "GA": "Ampere",
    "AD": "Ada",
    "GH": "Hopper",
    "GB": "Blackwell",
}
CHIP = re.compile(r"(GF|GK|GM|GP|GV|TU|GA|AD|GH|GB)\d{2,3}[A-Z]*")
# Chips before Fermi: NV1-NV4x, G7x-G9x, GT2xx, and the chipsets (MCP, C51).
PRE_FERMI = re.compile(r"(NV\d+|G\d{2}|GT2\d\d|MCP\d+|C\d\d)[A-Z]*")
# Functions of a GPU's board or of a chip family that nvidia-smi never lists as a GPU.
NOT_A_GPU = ("Audio", "USB", "UCSI", "NVSwitch", "PCIe host", "PCI bridge")


def _nvidia_devices(text: str) -> dict[str, str]:
    """pci.ids -> {"10de:2330": "GH100 [H100 SXM5 80GB]"}: vendor 10de's device lines (subsystems left out)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("10de  "))
    devices: dict[str, str] = {}
    for line in lines[start + 1 :]:
        if line and not line.startswith(("\t", "#")):
            break  # the next vendor
        if line.startswith("\t") and not line.startswith("\t\t"):
            devices[f"10de:{line[1:5]}"] = line[7:]
    return devices


def _gpus_named_by_chip(devices: dict[str, str]) -> dict[str, str]:
    """{pci id: architecture} for the GPUs whose pci.ids name starts with a Fermi-or-later chip."""
    out = {}
    for pci_id, name in devices.items():
        match = CHIP.fullmatch(name.split(" ")[0])
        if match and not any(word in name for word in NOT_A_GPU):
            out[pci_id] = CHIP_ARCH[match.group(1)]
    return out


def _system_devices() -> dict[str, str]:
    return _nvidia_devices(require_file(SYSTEM_PCI_IDS).read_text(encoding="utf-8", errors="replace"))


def _excerpt_devices() -> dict[str, str]:
    return _nvidia_devices(EXCERPT.read_text(encoding="utf-8"))


@pytest.mark.parametrize("source", ["system", "excerpt"])
def test_every_gpu_pci_ids_names_by_chip_maps_to_its_architecture(source: str) -> None:
    gpus = _gpus_named_by_chip(_system_devices() if source == "system" else _excerpt_devices())
    got = {pci: architecture_for_pci_id(pci) for pci in gpus}
    wrong = {pci: (arch, got[pci]) for pci, arch in gpus.items() if got[pci] != arch}
    assert not wrong, f"pci id: (architecture by pci.ids, by legacy.py): {wrong}"


# Each chip's compute capability (CUDA programming guide, "Compute Capabilities"), by chip name; a chip not here
# takes its family's entry (its letters), None where no CUDA release names it yet.
CHIP_CC = {
    "GF100": "2.0", "GF110": "2.0", "GF": "2.1",
    "GK104": "3.0", "GK106": "3.0", "GK107": "3.0", "GK210": "3.7", "GK": "3.5",
    "GM107": "5.0", "GM108": "5.0", "GM": "5.2",
    "GP100": "6.0", "GP": "6.1", "GV": "7.0", "TU": "7.5", "GA100": "8.0", "GA": "8.6", "AD": "8.9", "GH": "9.0",
    "GB100": "10.0", "GB102": "10.0", "GB110": "10.3", "GB10B": "11.0", "GB20B": "12.1", "GB112": None,
    "GB120": None, "GB": "12.0",
}  # fmt: skip
CHIP_NAME = re.compile(r"(GF|GK|GM|GP|GV|TU|GA|AD|GH|GB)(\d{2,3})(B(?=M?$|GL))?")


# pci.ids names these GM204 with GM107 in brackets: engineering boards whose chip the list does not settle.
UNSETTLED = {"10de:13ad", "10de:13ae", "10de:13be", "10de:13bf"}


def _chip_cc(name: str) -> str | None:
    """The compute capability of the chip a pci.ids name starts with."""
    m = CHIP_NAME.match(name.split(" ")[0])
    assert m, name
    letters, digits, b = m.groups()
    for key in (f"{letters}{digits}{b or ''}", f"{letters}{digits}", letters):
        if key in CHIP_CC:
            return CHIP_CC[key]
    raise AssertionError(name)


@pytest.mark.parametrize("source", ["system", "excerpt"])
def test_every_gpu_pci_ids_names_by_chip_has_its_compute_capability(source: str) -> None:
    devices = _system_devices() if source == "system" else _excerpt_devices()
    gpus = _gpus_named_by_chip(devices)
    wrong = {
        pci: (devices[pci], want, got)
        for pci in gpus.keys() - UNSETTLED
        if (got := compute_capability_for_pci_id(pci)) != (want := _chip_cc(devices[pci]))
    }
    assert not wrong, f"pci id: (pci.ids name, compute capability by chip, by legacy.py): {wrong}"
    assert compute_capability_for_pci_id("10de:118a") == "3.0"  # GRID K520 (GK104)
    assert compute_capability_for_pci_id("10de:102d") == "3.7"  # Tesla K80 (GK210)


def test_the_sample_covers_every_architecture_since_fermi() -> None:
    gpus = {**_gpus_named_by_chip(_system_devices()), **_gpus_named_by_chip(_excerpt_devices())}
    per_arch = {arch: sum(1 for a in gpus.values() if a == arch) for arch in CHIP_ARCH.values()}
    # A parser that found nothing (a changed file layout) must not pass as "nothing wrong".
    assert all(count >= 10 for count in per_arch.values()), per_arch  # Volta: GV100 only
    # Cards gpulab's captures and users name, as a spot check of the parse itself.
    for pci_id, arch in {
        "10de:1091": "Fermi",  # Tesla M2090
        "10de:1028": "Kepler",  # Tesla K20m
        "10de:13bd": "Maxwell",  # Tesla M10
        "10de:15f8": "Pascal",  # Tesla P100 PCIe 16GB
        "10de:1db4": "Volta",  # Tesla V100 PCIe 16GB
        "10de:1eb8": "Turing",  # Tesla T4
        "10de:20b2": "Ampere",  # A100 SXM4 80GB
        "10de:26b5": "Ada",  # L40
        "10de:2335": "Hopper",  # H200 SXM 141GB (excerpt)
        "10de:2901": "Blackwell",  # B200 (excerpt)
    }.items():
        assert gpus[pci_id] == arch


def test_chips_before_fermi_map_to_no_architecture() -> None:
    devices = _system_devices()
    old = [pci for pci, name in devices.items() if PRE_FERMI.fullmatch(name.split(" ")[0])]
    assert len(old) > 500 and "10de:10c0" in old  # GT218 (GeForce 9300 GS), once taken for Fermi
    assert [pci for pci in old if architecture_for_pci_id(pci) is not None] == []


def test_every_architecture_of_the_ranges_has_a_newest_stack() -> None:
    for arch in CHIP_ARCH.values():
        assert newest_stack(Architecture.parse(arch)).architecture == arch


def test_the_newest_stack_names_tensorflow_too() -> None:
    from gpulab.compat.data import load_matrix

    newest_tf = load_matrix().tensorflow[-1].version
    # Kepler's last CUDA is 11.x (R470): TensorFlow 2.14 is the last release tested on CUDA 11 (11.8).
    assert newest_stack(Architecture.KEPLER).tensorflow == "2.14"
    # Maxwell (cc 5.0) runs CUDA 12, but TensorFlow's wheels stop carrying its kernels after 2.17.
    assert newest_stack(Architecture.MAXWELL).tensorflow == "2.17"
    assert newest_stack(Architecture.HOPPER).tensorflow == newest_tf
    assert newest_stack(Architecture.AMPERE).text().endswith(f", TensorFlow {newest_tf}")
    fermi = newest_stack(Architecture.FERMI)
    assert fermi.tensorflow is None
    assert fermi.text().endswith("no TensorFlow release the matrix lists (1.12 and later)")


def test_a_kepler_gpu_of_compute_capability_3_0_has_an_older_newest_stack() -> None:
    # CUDA 11.0 dropped compute capability 3.0 (GK104/GK106/GK107): the GRID K520's last CUDA is 10.2, and no
    # PyTorch or TensorFlow release the matrix lists ships its kernels; a 3.5 Kepler (K20, GK110) runs CUDA 11.
    gk104 = newest_stack(Architecture.KEPLER, "3.0")
    assert (gk104.driver_branch, gk104.cuda, gk104.torch, gk104.tensorflow) == ("R470", "10.2", None, None)
    assert newest_stack(Architecture.KEPLER).cuda == newest_stack(Architecture.KEPLER, "3.5").cuda == "11.8"


def test_each_architecture_is_named_once() -> None:
    """The matrix's name and the one drivers report lead to one architecture; NVML's codes lead to the same."""
    assert Architecture.parse("Ada Lovelace") is Architecture.parse(" ada ") is Architecture.parse("Ada")
    assert (Architecture.ADA.driver_name, Architecture.HOPPER.driver_name) == ("Ada Lovelace", "Hopper")
    assert [Architecture.parse(a.driver_name) for a in Architecture] == list(Architecture)
    assert Architecture.parse_reported("Rubin") == UnlistedArchitecture("Rubin") == Architecture.from_nvml(13)
    assert Architecture.from_nvml(8) is Architecture.ADA and Architecture.from_nvml(99) is None


@pytest.mark.parametrize(
    ("architecture", "cc"),
    [("Volta", "7.0"), ("Turing", "7.5"), ("Ada", "8.9"), ("Ada Lovelace", "8.9"), ("Hopper", "9.0"),
     ("Ampere", None), ("Pascal", None), ("Kepler", None), ("Blackwell", None), ("Rubin", None), (None, None)],
)  # fmt: skip
def test_an_architecture_with_one_compute_capability_gives_it(architecture: str | None, cc: str | None) -> None:
    from gpulab.compat.legacy import sole_compute_capability

    assert sole_compute_capability(Architecture.parse_reported(architecture) if architecture else None) == cc
