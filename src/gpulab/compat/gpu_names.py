"""What a GPU's name alone tells: its identity for lookups and who it is built for (no matrix needed, so
compat.data can use it while loading the matrix)."""

from __future__ import annotations

import re
from typing import Final, Literal

# Who a board is built for; it decides which health findings are faults (ECC off is normal on GeForce). The report
# schema enumerates the same names (tests/test_names.py holds them equal).
ProductClass = Literal["data-centre", "workstation", "consumer"]
DATA_CENTRE: Final = "data-centre"
WORKSTATION: Final = "workstation"
CONSUMER: Final = "consumer"
PRODUCT_CLASSES: tuple[ProductClass, ...] = (DATA_CENTRE, WORKSTATION, CONSUMER)

# Drivers add or drop these vendor/brand words over time ("A100-SXM4-40GB" vs "NVIDIA A100-SXM4-40GB"), so
# they are not part of a name's identity.
_BRAND_WORDS = ("nvidia", "tesla", "geforce")


def name_words(name: str) -> list[str]:
    words = [w for w in re.split(r"[\s_-]+", name.strip().lower()) if w]
    while words and words[0] in _BRAND_WORDS:
        words = words[1:]
    return words


def name_key(name: str) -> str:
    """Case-, separator- and brand-insensitive identity of a GPU name or alias ("GTX1080Ti" = "GTX 1080 Ti")."""
    return "".join(name_words(name))


# Name patterns, checked in order; the first match decides. Workstation boards carry "Quadro", "RTX A<n>",
# "RTX PRO" or "Ada Generation" ("RTX 6000 Ada Generation" would otherwise read as a GeForce number); the RTX
# PRO Server Edition is the data-centre one of its family.
_CLASS_BY_NAME: tuple[tuple[re.Pattern[str], ProductClass], ...] = (
    (re.compile(r"\bserver edition\b", re.I), DATA_CENTRE),
    (re.compile(r"\bquadro\b|\brtx a\d|\brtx pro\b|\bada generation\b|\bworkstation\b", re.I), WORKSTATION),
    (re.compile(r"\b(geforce|titan)\b|\b(gtx|rtx) ?\d{3,4}\b", re.I), CONSUMER),
)
# nvidia-smi's <product_brand>, for names that tell nothing ("Graphics Device").
_CLASS_BY_BRAND: dict[str, ProductClass] = {
    "geforce": CONSUMER,
    "titan": CONSUMER,
    "quadro": WORKSTATION,
    "quadro rtx": WORKSTATION,
    "nvidia rtx": WORKSTATION,
    "tesla": DATA_CENTRE,
}


def product_class(name: str, brand: str | None = None) -> ProductClass:
    """Who a GPU is built for, from its name, else the driver's brand; boards with neither tell are data-centre
    parts (A100, H200, L4, T4: their names carry no consumer or workstation mark)."""
    for pattern, cls in _CLASS_BY_NAME:
        if pattern.search(name):
            return cls
    return _CLASS_BY_BRAND.get((brand or "").strip().lower(), DATA_CENTRE)
