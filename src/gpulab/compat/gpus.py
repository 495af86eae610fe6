"""Find a GPU in the matrix by PCI id, NVML name or the short alias people type."""

from __future__ import annotations

import re

from gpulab.compat.data import GpuSpec, ProductClass, load_matrix
from gpulab.errors import GpulabError

# Drivers add or drop these vendor/brand words over time ("A100-SXM4-40GB" vs "NVIDIA A100-SXM4-40GB"), so
# they are not part of a name's identity.
_BRAND_WORDS = ("nvidia", "tesla", "geforce")


def _words(name: str) -> list[str]:
    words = [w for w in re.split(r"[\s_-]+", name.strip().lower()) if w]
    while words and words[0] in _BRAND_WORDS:
        words = words[1:]
    return words


def name_key(name: str) -> str:
    """Case-, separator- and brand-insensitive identity of a GPU name or alias ("GTX1080Ti" = "GTX 1080 Ti")."""
    return "".join(_words(name))


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


# Name patterns, checked in order; the first match decides. Workstation boards carry "Quadro", "RTX A<n>",
# "RTX PRO" or "Ada Generation" ("RTX 6000 Ada Generation" would otherwise read as a GeForce number); the RTX
# PRO Server Edition is the data-centre one of its family.
_CLASS_BY_NAME: tuple[tuple[re.Pattern[str], ProductClass], ...] = (
    (re.compile(r"\bserver edition\b", re.I), "data-centre"),
    (re.compile(r"\bquadro\b|\brtx a\d|\brtx pro\b|\bada generation\b|\bworkstation\b", re.I), "workstation"),
    (re.compile(r"\b(geforce|titan)\b|\b(gtx|rtx) ?\d{3,4}\b", re.I), "consumer"),
)
# nvidia-smi's <product_brand>, for names that tell nothing ("Graphics Device").
_CLASS_BY_BRAND: dict[str, ProductClass] = {
    "geforce": "consumer",
    "titan": "consumer",
    "quadro": "workstation",
    "quadro rtx": "workstation",
    "nvidia rtx": "workstation",
    "tesla": "data-centre",
}


def product_class(name: str, brand: str | None = None) -> ProductClass:
    """Who a GPU is built for, from its name, else the driver's brand; boards with neither tell are data-centre
    parts (A100, H200, L4, T4: their names carry no consumer or workstation mark)."""
    for pattern, cls in _CLASS_BY_NAME:
        if pattern.search(name):
            return cls
    return _CLASS_BY_BRAND.get((brand or "").strip().lower(), "data-centre")


def _candidates(text: str) -> list[GpuSpec]:
    """GPUs whose name or an alias contains every word of `text` (for helpful errors and loose input)."""
    words = _words(text)
    found = []
    for gpu in load_matrix().gpus:
        haystack = " ".join(" ".join(_words(n)) for n in (gpu.name, *gpu.aliases))
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
