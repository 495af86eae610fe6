"""The operating systems gpulab provisions and what each install source offers on them (matrix.yml).

An OS's own archive (`distro`) packages the driver branches and the one toolkit listed under operating_systems;
NVIDIA's repository and runfiles (`cuda_repo`, `runfile`) carry the toolkits whose ubuntu/debian lists name the OS,
and the driver branches from the oldest to the newest of those toolkits' drivers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from gpulab.compat import rules, versions
from gpulab.compat.data import BranchEntry, CudaRelease, OperatingSystem, load_matrix

_OS_TEXT = re.compile(r"^(debian|ubuntu)[\s_-]*(\d+(?:\.\d+)?)(?:\.\d+)?(?:\s*lts)?$")


def os_key(text: str | None) -> str | None:
    """'Debian 12', 'debian12', 'Ubuntu 24.04 LTS', '24.04' -> 'debian12', 'ubuntu24.04'; None for anything else."""
    if not text:
        return None
    cleaned = text.strip().lower()
    if re.fullmatch(r"\d\d\.\d\d(?:\.\d+)?", cleaned):
        cleaned = "ubuntu" + cleaned
    match = _OS_TEXT.match(cleaned)
    if not match:
        return None
    family, release = match.groups()
    if family == "debian":
        return f"debian{release.split('.')[0]}"
    parts = release.split(".")
    return f"ubuntu{parts[0]}.{parts[1]}" if len(parts) > 1 else None


def provisioned() -> tuple[OperatingSystem, ...]:
    """The operating systems gpulab's roles provision, in the matrix's order."""
    return load_matrix().operating_systems


def supported_releases() -> dict[str, tuple[str, ...]]:
    """{"Debian": ("11", "12"), "Ubuntu": (...)}: the operating systems gpulab provisions, oldest release first."""
    out: dict[str, list[str]] = {}
    for osr in provisioned():
        out.setdefault(osr.family.capitalize(), []).append(osr.release)
    return {family: tuple(sorted(releases, key=versions.key)) for family, releases in out.items()}


def galaxy_platforms() -> list[dict[str, object]]:
    """The same operating systems as Ansible role metadata lists them (galaxy_info.platforms): Debian and Ubuntu by
    their codenames, oldest first. The roles' meta/main.yml must list exactly these."""
    by_release = {(o.family.capitalize(), o.release): o.codename for o in provisioned()}
    return [
        {"name": family, "versions": [by_release[(family, release)] for release in releases]}
        for family, releases in supported_releases().items()
    ]


def operating_system(text: str | None) -> OperatingSystem | None:
    key = os_key(text)
    return next((o for o in provisioned() if o.os == key), None)


def provisioned_names() -> str:
    """'Debian 12, Debian 11, Ubuntu 24.04, ...' for messages."""
    return ", ".join(o.name for o in provisioned())


@functools.lru_cache(maxsize=64)
def nvidia_cuda(osr: OperatingSystem) -> tuple[CudaRelease, ...]:
    """Toolkits NVIDIA publishes for the OS (its repository and runfiles), oldest first."""
    out = []
    for rel in load_matrix().cuda:
        published = rel.debian if osr.family == "debian" else rel.ubuntu
        if osr.release in published:
            out.append(rel)
    return tuple(out)


@functools.lru_cache(maxsize=64)
def nvidia_branches(osr: OperatingSystem) -> tuple[BranchEntry, ...]:
    """Driver branches NVIDIA publishes for the OS: from the toolkit driver of the oldest toolkit published for it
    to that of the newest (the repository carries each toolkit's driver beside it), oldest first."""
    cudas = nvidia_cuda(osr)
    if not cudas:
        return ()
    low = rules.branch_record(cudas[0].min_driver).number
    high = rules.branch_record(cudas[-1].min_driver).number
    return tuple(b for b in load_matrix().drivers if low <= b.number <= high)


@functools.lru_cache(maxsize=64)
def archive_branches(osr: OperatingSystem) -> tuple[BranchEntry, ...]:
    """Driver branches the OS's own archive packages, oldest first."""
    wanted = {p.version for p in osr.drivers}
    return tuple(b for b in load_matrix().drivers if b.branch in wanted)


@functools.lru_cache(maxsize=64)
def archive_cuda(osr: OperatingSystem) -> tuple[CudaRelease, ...]:
    """Toolkits the OS's own archive packages, oldest first."""
    wanted = {versions.key(p.version) for p in osr.cuda}
    return tuple(c for c in load_matrix().cuda if versions.key(c.version) in wanted)


def branch_span(branches: Sequence[BranchEntry]) -> str:
    """'R535–R595' for a contiguous run of the matrix's branches, else 'R535, R470' (newest first)."""
    if not branches:
        return "none"
    ordered = sorted(branches, key=lambda b: b.number)
    numbers = [b.number for b in load_matrix().drivers]
    first, last = numbers.index(ordered[0].number), numbers.index(ordered[-1].number)
    if len(ordered) > 2 and last - first + 1 == len(ordered):
        return f"{ordered[0].branch}–{ordered[-1].branch}"
    return ", ".join(b.branch for b in reversed(ordered))


def cuda_span(releases: Sequence[CudaRelease]) -> str:
    """'12.2–13.2' or '11.8' (releases oldest first)."""
    if not releases:
        return "none"
    if len(releases) > 2:
        return f"{releases[0].version}–{releases[-1].version}"
    return ", ".join(r.version for r in releases)
