"""Find a GPU in the matrix by PCI id, NVML name or the short alias people type."""

from __future__ import annotations

import re

from gpulab.compat.data import GpuSpec, load_matrix
from gpulab.compat.gpu_names import name_key, name_words
from gpulab.errors import GpulabError


def normalize_pci_id(pci_id: str) -> str | None:
    """'10de:2335', '0x233510DE' (nvidia-smi), '233510DE' or '10DE:2335' -> '10de:2335'; None if not a PCI id."""
    text = pci_id.strip().lower().removeprefix("0x")
    if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{4}", text):
        return text
    if re.fullmatch(r"[0-9a-f]{8}", text):
        # nvidia-smi prints device id then vendor id: 0x2335_10DE.
        return f"{text[4:]}:{text[:4]}"
    return None


def all_gpus() -> list[GpuSpec]:
    return list(load_matrix().gpus)


def gpu_by_pci_id(pci_id: str) -> GpuSpec | None:
    key = normalize_pci_id(pci_id)
    if key is None:
        return None
    return next((gpu for gpu in load_matrix().gpus if key in gpu.pci_ids), None)


def gpu_by_name(name: str) -> GpuSpec | None:
    """Exact NVML name or alias, ignoring case, spacing and the NVIDIA/Tesla/GeForce prefix.

    Names and aliases are unique in the matrix (checked at load), so a hit is never ambiguous; family aliases
    such as "P100" are given to the most common SKU and its source says so.
    """
    key = name_key(name)
    if not key:
        return None
    for gpu in load_matrix().gpus:
        if key in {name_key(n) for n in (gpu.name, *gpu.aliases)}:
            return gpu
    return None


def gpu_for(name: str, pci_device_id: str | None = None) -> GpuSpec | None:
    """The matrix entry of a GPU as a driver reports it: by PCI id first (names vary by driver, and pre-release
    boards say "Graphics Device"), then by name."""
    spec = gpu_by_pci_id(pci_device_id) if pci_device_id else None
    return spec or gpu_by_name(name)


def _candidates(text: str) -> list[GpuSpec]:
    """GPUs whose name or an alias contains every word of `text` (for helpful errors and loose input)."""
    words = name_words(text)
    found = []
    for gpu in load_matrix().gpus:
        haystack = " ".join(" ".join(name_words(n)) for n in (gpu.name, *gpu.aliases))
        if words and all(w in haystack.split() or w in haystack for w in words):
            found.append(gpu)
    return found


def resolve_gpu(text: str) -> GpuSpec:
    """A GPU from a PCI id, NVML name or alias; loose text is accepted when it matches exactly one GPU."""
    if not text or not text.strip():
        raise GpulabError("no GPU given; pass an NVML name ('NVIDIA H200'), an alias ('P100') or a PCI id.")
    if normalize_pci_id(text) is not None:
        gpu = gpu_by_pci_id(text)
        if gpu is None:
            known = ", ".join(f"{g.pci_ids[0]} ({g.name})" for g in load_matrix().gpus)
            raise GpulabError(f"PCI id {text!r} is not in the compatibility matrix; known ids: {known}.")
        return gpu
    gpu = gpu_by_name(text)
    if gpu is not None:
        return gpu
    candidates = _candidates(text)
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        names = "; ".join(f"{g.name} (alias {g.aliases[0]})" for g in candidates)
        raise GpulabError(f"GPU {text!r} matches several GPUs: {names}. Pass one of these names or aliases.")
    known = ", ".join(g.name for g in load_matrix().gpus)
    raise GpulabError(
        f"GPU {text!r} is not in the compatibility matrix. Known GPUs: {known}. "
        "Pass one of these names, an alias ('H200', 'P100') or a PCI id ('10de:2335')."
    )
