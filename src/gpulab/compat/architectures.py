"""GPU architectures, each named once: by the matrix's name, with the name drivers report where it differs and
NVML's code for it. Standard library only: hw reads NVML's codes here without loading the matrix."""

from __future__ import annotations

# Oldest first; matrix.yml's `architecture` values are these.
ARCHITECTURES = ("Fermi", "Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell")

# How NVML and nvidia-smi's <product_architecture> name an architecture where it is not the matrix's name.
_DRIVER_NAMES = {"Ada": "Ada Lovelace"}

# nvmlDeviceArchitecture_t (nvml.h) -> the architecture; Rubin is newer than the matrix.
NVML_ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}


def driver_name(architecture: str) -> str:
    """The name drivers report for an architecture: "Ada" -> "Ada Lovelace"; others as given."""
    return _DRIVER_NAMES.get(architecture, architecture)


def matrix_name(name: str) -> str | None:
    """The matrix's name for an architecture as the matrix or a driver writes it, in any case ("Ada Lovelace",
    "ada" -> "Ada"); None for one the matrix does not list."""
    key = " ".join(name.lower().split())
    for arch in ARCHITECTURES:
        if key in (arch.lower(), driver_name(arch).lower()):
            return arch
    return None
