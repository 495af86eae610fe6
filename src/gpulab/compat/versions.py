"""Version strings as comparable tuples; every malformed input becomes a GpulabError, never a ValueError."""

from __future__ import annotations

import functools
import re

from gpulab.errors import GpulabError

_VERSION = re.compile(r"^\d+(\.\d+)*$")


@functools.lru_cache(maxsize=4096)  # the planners compare the same few hundred versions many times over
def parse(text: str, what: str = "version") -> tuple[int, ...]:
    """'580.95.05' -> (580, 95, 5); 'R580' -> (580,). Zero padding is not applied here (see `compare`)."""
    cleaned = text.strip().lstrip("vVrR")
    if not _VERSION.match(cleaned):
        raise GpulabError(f"{what} {text!r} is not a version number; write it like '12.9' or '580.95.05'.")
    return tuple(int(part) for part in cleaned.split("."))


def compare(a: str, b: str) -> int:
    """-1/0/1 like cmp(); shorter versions are zero-padded so '580' == '580.0.0'."""
    pa, pb = parse(a), parse(b)
    width = max(len(pa), len(pb))
    ta, tb = pa + (0,) * (width - len(pa)), pb + (0,) * (width - len(pb))
    return (ta > tb) - (ta < tb)


def key(text: str) -> tuple[int, ...]:
    """Sort key; trailing zeros dropped so '9.0' and '9' sort together."""
    parts = list(parse(text))
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def major_minor(text: str, what: str = "version") -> str:
    """'12.9.1' -> '12.9', '12' -> '12.0'. Matrix entries are keyed by major.minor."""
    parts = parse(text, what)
    return f"{parts[0]}.{parts[1] if len(parts) > 1 else 0}"


def major(text: str) -> int:
    return parse(text)[0]


def cuda_version(text: str) -> str:
    """Accept '12.9', '12.9.1', 'cu129', 'cu90', 'CUDA 12.9' and return the matrix key '12.9'."""
    cleaned = text.strip().lower().removeprefix("cuda").strip()
    if cleaned.startswith("cu") and cleaned[2:].isdigit() and len(cleaned) >= 4:
        digits = cleaned[2:]
        return f"{int(digits[:-1])}.{digits[-1]}"
    return major_minor(cleaned, "CUDA version")


def split_local(text: str) -> tuple[str, str | None]:
    """'2.9.0+cu128' -> ('2.9.0', 'cu128'): pip's local version label names the wheel's CUDA build."""
    base, _, local = text.strip().partition("+")
    return base, (local.lower() or None)


def in_range(value: str, low: str, high: str) -> bool:
    return compare(low, value) <= 0 <= compare(high, value)


def expand_python(ranges: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """['2.7', '3.3-3.6'] -> ('2.7', '3.3', '3.4', '3.5', '3.6')."""
    out: list[str] = []
    for item in ranges:
        low, _, high = item.partition("-")
        lo, hi = parse(low, "Python version"), parse(high or low, "Python version")
        if lo[0] != hi[0] or len(lo) != 2 or len(hi) != 2 or lo > hi:
            raise GpulabError(f"Python range {item!r} must look like '3.10-3.14' within one major version.")
        out.extend(f"{lo[0]}.{minor}" for minor in range(lo[1], hi[1] + 1))
    return tuple(out)
