"""Load matrix.yml once, check its shape, and turn it into typed, immutable records.

A malformed matrix is a packaging bug, but it still surfaces as a GpulabError naming the entry and key, so a
hand edit that breaks the file is easy to find.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpulab.compat import versions
from gpulab.compat.entry import Entry
from gpulab.compat.gpu_names import ProductClass, name_key, product_class
from gpulab.errors import GpulabError
from gpulab.names import ARCHITECTURES, Architecture, DriverBranch, UnknownValue

_PCI_ID = re.compile(r"^10de:[0-9a-f]{4}$")


@dataclass(frozen=True)
class GpuSpec:
    name: str
    aliases: tuple[str, ...]
    pci_ids: tuple[str, ...]
    architecture: Architecture
    compute_capability: str
    memory_gib: float
    form_factor: str
    # Datasheet rates; None where no NVIDIA document states the figure (A10G has no public datasheet).
    fp32_tflops: float | None
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float | None
    memory_bandwidth_gbs: float | None
    pcie_gen: int
    pcie_width: int
    nvlink_gbs: float | None
    source: str
    # A first driver later than the architecture's first branch (H200 came after Hopper's R520).
    min_driver: str | None = None
    # BAR1 (the aperture the host sees the board's memory through) where it is not the memory rounded up to a
    # power of two, as on data-centre boards: GeForce and T4 boards map 256 MiB.
    bar1_mib: int | None = None

    @property
    def product_class(self) -> ProductClass:
        return product_class(self.name)


@dataclass(frozen=True)
class CudaRelease:
    version: str
    min_driver: str
    min_driver_compat: str | None
    cc_min: str
    cc_max: str
    ubuntu: tuple[str, ...]
    debian: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class BranchEntry:
    branch: str
    number: int
    max_cuda: str
    recommended: str
    architectures: tuple[Architecture, ...]
    open_kernel_modules: Architecture | None
    source: str
    open_default: bool = False  # installs the open kernel modules by default where they drive the GPU


@dataclass(frozen=True)
class CudnnBuild:
    cuda_min: str
    cuda_max: str
    cc_min: str
    cc_max: str


@dataclass(frozen=True)
class CudnnRelease:
    version: str
    builds: tuple[CudnnBuild, ...]
    source: str


@dataclass(frozen=True)
class TorchBuild:
    tag: str
    cuda: str
    arches: tuple[str, ...]
    cudnn: str
    experimental: bool = False  # RELEASE.md's "Experimental CUDA" column

    @property
    def index_url(self) -> str:
        return f"https://download.pytorch.org/whl/{self.tag}"


@dataclass(frozen=True)
class TorchRelease:
    version: str
    python: tuple[str, ...]
    builds: tuple[TorchBuild, ...]
    source: str


@dataclass(frozen=True)
class TfRelease:
    version: str
    python: tuple[str, ...]
    cuda: str
    cudnn: str
    and_cuda: bool
    cc_min: str
    source: str


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    stack: dict[str, str]
    source: str


@dataclass(frozen=True)
class ArchivePackage:
    """A driver branch (R535) or toolkit (11.8) an OS's own archive packages, and the version seen there."""

    version: str
    packages: tuple[str, ...]
    seen: str | None


@dataclass(frozen=True)
class OperatingSystem:
    os: str  # "debian12", "ubuntu24.04": distribution name in lower case + release
    name: str  # "Debian 12"
    codename: str  # "bookworm": how Ansible's role metadata (galaxy_info.platforms) names the release
    family: str  # "debian" or "ubuntu"
    release: str  # "12", "24.04": the value the cuda section's debian/ubuntu lists use
    archive: str  # "Debian 12's archive (non-free)"
    drivers: tuple[ArchivePackage, ...]  # version: the branch ("R535")
    cuda: tuple[ArchivePackage, ...]
    source: str


@dataclass(frozen=True)
class DriverLifecycle:
    branch: str
    designation: str  # long-term, production, feature
    support_end: str  # YYYY-MM, as NVIDIA publishes it
    source: str

    @property
    def long_term(self) -> bool:
        return self.designation == "long-term"

    @property
    def number(self) -> int:
        return DriverBranch.parse(self.branch).number


@dataclass(frozen=True)
class RepoNaming:
    """How NVIDIA's apt repositories name a driver branch's packages, from `first_branch` on; `{branch}` in a name is
    the branch number."""

    first_branch: str
    driver: dict[str, str]  # kernel modules (open, proprietary) -> the driver's meta package
    fabricmanager: str
    persistenced: str
    pinning: str | None
    source: str

    @property
    def first_number(self) -> int:
        return DriverBranch.parse(self.first_branch).number


@dataclass(frozen=True)
class CudnnWheel:
    """A pinned cuDNN wheel on PyPI: key "<cuDNN major.minor>-cu<CUDA major>" ("9.10-cu12")."""

    key: str
    version: str
    sha256: str
    path: str  # under cudnn_wheel_base_url (packages/...)
    source: str

    def as_pin(self) -> dict[str, str]:
        return {"version": self.version, "sha256": self.sha256, "path": self.path}


@dataclass(frozen=True)
class Matrix:
    gpus: tuple[GpuSpec, ...]
    cuda: tuple[CudaRelease, ...]
    drivers: tuple[BranchEntry, ...]
    cudnn: tuple[CudnnRelease, ...]
    torch: tuple[TorchRelease, ...]
    tensorflow: tuple[TfRelease, ...]
    profiles: tuple[Profile, ...]
    operating_systems: tuple[OperatingSystem, ...]
    lifecycle: tuple[DriverLifecycle, ...] = ()
    repo_packages: tuple[RepoNaming, ...] = ()
    cudnn_wheels: tuple[CudnnWheel, ...] = ()


def _arch(entry: Entry, key: str) -> Architecture:
    value = entry.text(key)
    return _architecture(value, f"matrix.yml: {entry.where}.{key}={value!r} is not one of {', '.join(ARCHITECTURES)}.")


def _architecture(text: str, refused: str) -> Architecture:
    """The architecture matrix.yml names with `text`, or a GpulabError saying `refused` (where in the file)."""
    try:
        return Architecture.parse(text)
    except UnknownValue:
        raise GpulabError(refused) from None


def _gpu(e: Entry) -> GpuSpec:
    pci_ids = tuple(p.lower() for p in e.texts("pci_ids"))
    for pci in pci_ids:
        if not _PCI_ID.match(pci):
            raise GpulabError(f"matrix.yml: {e.where}.pci_ids has {pci!r}; write NVIDIA ids as '10de:xxxx'.")
    return GpuSpec(
        name=e.text("name"),
        aliases=e.texts("aliases"),
        pci_ids=pci_ids,
        architecture=_arch(e, "architecture"),
        compute_capability=e.version("compute_capability"),
        memory_gib=e.num("memory_gib"),
        form_factor=e.text("form_factor"),
        fp32_tflops=e.opt_num("fp32_tflops"),
        tf32_tflops=e.opt_num("tf32_tflops"),
        bf16_tflops=e.opt_num("bf16_tflops"),
        fp16_tflops=e.opt_num("fp16_tflops"),
        memory_bandwidth_gbs=e.opt_num("memory_bandwidth_gbs"),
        pcie_gen=e.integer("pcie_gen"),
        pcie_width=e.integer("pcie_width"),
        nvlink_gbs=e.opt_num("nvlink_gbs"),
        source=e.text("source"),
        min_driver=e.opt_version("min_driver"),
        bar1_mib=_bar1_mib(e),
    )


def _bar1_mib(e: Entry) -> int | None:
    if e.raw.get("bar1_mib") is None:
        return None
    value = e.integer("bar1_mib")
    if value < 1 or value & (value - 1):
        raise GpulabError(f"matrix.yml: {e.where}.bar1_mib={value} is not a power of two in MiB.")
    return value


def _cuda(e: Entry) -> CudaRelease:
    compat = e.opt_text("min_driver_compat")
    if compat is not None:
        versions.parse(compat, f"matrix.yml: {e.where}.min_driver_compat")
    return CudaRelease(
        version=e.version("version"),
        min_driver=e.version("min_driver"),
        min_driver_compat=compat,
        cc_min=e.version("cc_min"),
        cc_max=e.version("cc_max"),
        ubuntu=e.texts("ubuntu"),
        debian=e.texts("debian"),
        source=e.text("source"),
    )


def _branch_text(where: str, value: str, example: str) -> str:
    """A branch as the matrix writes it: its R form (R580), read by the one parser of branches."""
    try:
        canonical = str(DriverBranch.parse(value)) == value
    except GpulabError:
        canonical = False
    if not canonical:
        raise GpulabError(f"matrix.yml: {where}={value!r} must look like '{example}'.")
    return value


def _driver(e: Entry) -> BranchEntry:
    branch = _branch_text(f"{e.where}.branch", e.text("branch"), "R580")
    archs = [
        _architecture(text, f"matrix.yml: {e.where}.architectures has unknown {text!r}.")
        for text in e.texts("architectures")
    ]
    okm = e.opt_text("open_kernel_modules")
    refused = f"matrix.yml: {e.where}.open_kernel_modules={okm!r} is not an architecture."
    oldest_open = None if okm is None else _architecture(okm, refused)
    recommended = e.version("recommended")
    number = DriverBranch.parse(branch).number
    if versions.major(recommended) != number:
        raise GpulabError(f"matrix.yml: {e.where}.recommended={recommended} is not in branch {branch}.")
    return BranchEntry(
        branch=branch,
        number=number,
        max_cuda=e.version("max_cuda"),
        recommended=recommended,
        architectures=tuple(archs),
        open_kernel_modules=oldest_open,
        source=e.text("source"),
        open_default=e.opt_flag("open_default"),
    )


def _pair(e: Entry, key: str) -> tuple[str, str]:
    values = e.texts(key)
    if len(values) != 2:
        raise GpulabError(f"matrix.yml: {e.where}.{key} must be a [low, high] pair.")
    for value in values:
        versions.parse(value, f"matrix.yml: {e.where}.{key}")
    return values[0], values[1]


def _cudnn(e: Entry) -> CudnnRelease:
    builds = []
    for i, raw in enumerate(e.items("builds")):
        b = Entry(raw, f"{e.where}.builds[{i}]")
        (cuda_min, cuda_max), (cc_min, cc_max) = _pair(b, "cuda"), _pair(b, "cc")
        builds.append(CudnnBuild(cuda_min, cuda_max, cc_min, cc_max))
    return CudnnRelease(version=e.version("version"), builds=tuple(builds), source=e.text("source"))


def _torch(e: Entry) -> TorchRelease:
    builds = []
    for i, raw in enumerate(e.items("builds")):
        b = Entry(raw, f"{e.where}.builds[{i}]")
        cuda = b.version("cuda")
        tag = b.text("tag")
        if tag != "cu" + cuda.replace(".", ""):
            raise GpulabError(f"matrix.yml: {b.where}.tag={tag!r} does not match cuda {cuda}.")
        arches = b.texts("arches")
        for arch in arches:
            versions.parse(arch)
        experimental = b.flag("experimental") if "experimental" in b.raw else False
        builds.append(TorchBuild(tag, cuda, arches, b.version("cudnn"), experimental))
    return TorchRelease(
        version=e.version("version"),
        python=versions.expand_python(e.texts("python")),
        builds=tuple(builds),
        source=e.text("source"),
    )


def _tf(e: Entry) -> TfRelease:
    return TfRelease(
        version=e.version("version"),
        python=versions.expand_python(e.texts("python")),
        cuda=e.version("cuda"),
        cudnn=e.version("cudnn"),
        and_cuda=e.flag("and_cuda"),
        cc_min=e.version("cc_min"),
        source=e.text("source"),
    )


_STACK_KEYS = ("gpu", "driver", "cuda", "cudnn", "torch", "tensorflow", "python", "os")


def _profile(e: Entry) -> Profile:
    stack = Entry(e.raw.get("stack"), f"{e.where}.stack")
    unknown = set(stack.raw) - set(_STACK_KEYS)
    if unknown:
        raise GpulabError(f"matrix.yml: {stack.where} has unknown keys {sorted(unknown)}; use {_STACK_KEYS}.")
    return Profile(
        name=e.text("name"),
        description=e.text("description"),
        stack={k: stack.text(k) for k in stack.raw},
        source=e.text("source"),
    )


_OS_KEY = re.compile(r"^(debian)(\d+)$|^(ubuntu)(\d\d\.\d\d)$")


def _packages(e: Entry, key: str, what: str) -> tuple[ArchivePackage, ...]:
    out = []
    for i, raw in enumerate(e.items(key)):
        p = Entry(raw, f"{e.where}.{key}[{i}]")
        version = p.text(what)
        if what == "branch":
            _branch_text(f"{p.where}.branch", version, "R535")
        if what == "version":
            versions.parse(version, f"matrix.yml: {p.where}.version")
        if "seen" not in p.raw:
            raise GpulabError(f"matrix.yml: {p.where} is missing key 'seen' (null when not checked).")
        out.append(ArchivePackage(version=version, packages=p.texts("packages"), seen=p.opt_text("seen")))
    return tuple(out)


def _operating_system(e: Entry) -> OperatingSystem:
    key = e.text("os")
    match = _OS_KEY.match(key)
    if not match:
        raise GpulabError(f"matrix.yml: {e.where}.os={key!r} must look like 'debian12' or 'ubuntu24.04'.")
    family, release = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    return OperatingSystem(
        os=key,
        name=e.text("name"),
        codename=e.text("codename"),
        family=family,
        release=release,
        archive=e.text("archive"),
        drivers=_packages(e, "drivers", "branch"),
        cuda=_packages(e, "cuda", "version"),
        source=e.text("source"),
    )


def _lifecycle(e: Entry) -> DriverLifecycle:
    designation, end = e.text("designation"), e.text("support_end")
    if designation not in ("long-term", "production", "feature"):
        raise GpulabError(
            f"matrix.yml: {e.where}.designation={designation!r} must be long-term, production or feature."
        )
    if not re.match(r"^\d{4}-(0[1-9]|1[0-2])$", end):
        raise GpulabError(f"matrix.yml: {e.where}.support_end={end!r} must look like '2028-06'.")
    return DriverLifecycle(branch=e.text("branch"), designation=designation, support_end=end, source=e.text("source"))


def _repo_naming(e: Entry) -> RepoNaming:
    driver = e._get("driver", (dict,))
    if sorted(driver) != ["open", "proprietary"] or not all(isinstance(v, str) and v for v in driver.values()):
        raise GpulabError(f"matrix.yml: {e.where}.driver must map open and proprietary to package names.")
    first = _branch_text(f"{e.where}.first_branch", e.text("first_branch"), "R580")
    return RepoNaming(
        first_branch=first,
        driver=dict(driver),
        fabricmanager=e.text("fabricmanager"),
        persistenced=e.text("persistenced"),
        pinning=e.opt_text("pinning"),
        source=e.text("source"),
    )


def _cudnn_wheels(raw: dict[str, Any]) -> tuple[CudnnWheel, ...]:
    node = raw.get("cudnn_wheels")
    if not isinstance(node, dict) or not node:
        raise GpulabError("matrix.yml: section 'cudnn_wheels' is missing or empty.")
    out = []
    for key, value in node.items():
        e = Entry(value, f"cudnn_wheels[{key!r}]")
        if not re.match(r"^\d+\.\d+-cu\d+$", str(key)):
            raise GpulabError(f"matrix.yml: cudnn_wheels key {key!r} must look like '9.10-cu12'.")
        sha = e.text("sha256")
        if not re.match(r"^[0-9a-f]{64}$", sha):
            raise GpulabError(f"matrix.yml: {e.where}.sha256 must be 64 lower-case hex digits.")
        version = e.text("version")
        if not version.startswith(str(key).split("-", 1)[0] + "."):
            raise GpulabError(f"matrix.yml: {e.where}.version {version!r} is not a cuDNN {str(key).split('-')[0]}.")
        out.append(CudnnWheel(str(key), version, sha, e.text("path"), e.text("source")))
    return tuple(out)


def cudnn_wheel_pins() -> dict[str, dict[str, str]]:
    """The pinned cuDNN wheels as the roles' cudnn_wheels: key -> {version, sha256, path}."""
    return {w.key: w.as_pin() for w in load_matrix().cudnn_wheels}


def _section(raw: dict[str, Any], path: str, parse: Any) -> tuple[Any, ...]:
    node: Any = raw
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, list) or not node:
        raise GpulabError(f"matrix.yml: section {path!r} is missing or empty.")
    return tuple(parse(Entry(item, f"{path}[{i}]")) for i, item in enumerate(node))


def _unique(items: tuple[Any, ...], attr: str, section: str) -> None:
    seen: set[str] = set()
    for item in items:
        value = getattr(item, attr)
        if value in seen:
            raise GpulabError(f"matrix.yml: {section} lists {attr} {value!r} twice.")
        seen.add(value)


def _check_gpu_keys(gpus: tuple[GpuSpec, ...]) -> None:
    """Names, aliases and PCI ids must each identify one GPU, or lookups would be ambiguous."""
    owner: dict[str, str] = {}
    for gpu in gpus:
        for key in {name_key(n) for n in (gpu.name, *gpu.aliases)} | set(gpu.pci_ids):
            if key in owner and owner[key] != gpu.name:
                raise GpulabError(f"matrix.yml: {key!r} names both {owner[key]!r} and {gpu.name!r}.")
            owner[key] = gpu.name


def parse_matrix(raw: Any) -> Matrix:
    if not isinstance(raw, dict):
        raise GpulabError("matrix.yml: the top level must be a mapping of sections.")
    matrix = Matrix(
        gpus=_section(raw, "gpus", _gpu),
        cuda=_section(raw, "cuda", _cuda),
        drivers=_section(raw, "drivers", _driver),
        cudnn=_section(raw, "cudnn", _cudnn),
        torch=_section(raw, "frameworks.torch", _torch),
        tensorflow=_section(raw, "frameworks.tensorflow", _tf),
        profiles=_section(raw, "profiles", _profile),
        operating_systems=_section(raw, "operating_systems", _operating_system),
        lifecycle=_section(raw, "driver_lifecycle", _lifecycle),
        repo_packages=_section(raw, "nvidia_repository_packages", _repo_naming),
        cudnn_wheels=_cudnn_wheels(raw),
    )
    for items, attr, name in (
        (matrix.gpus, "name", "gpus"),
        (matrix.cuda, "version", "cuda"),
        (matrix.drivers, "branch", "drivers"),
        (matrix.cudnn, "version", "cudnn"),
        (matrix.torch, "version", "frameworks.torch"),
        (matrix.tensorflow, "version", "frameworks.tensorflow"),
        (matrix.profiles, "name", "profiles"),
        (matrix.operating_systems, "os", "operating_systems"),
        (matrix.lifecycle, "branch", "driver_lifecycle"),
    ):
        _unique(items, attr, name)
    _check_gpu_keys(matrix.gpus)
    _check_references(matrix)
    return matrix


def _check_references(matrix: Matrix) -> None:
    """Framework and OS entries name CUDA versions and driver branches the rules look up, so each must be listed."""
    known = {versions.key(c.version) for c in matrix.cuda}
    needed = [(f"torch {t.version} {b.tag}", b.cuda) for t in matrix.torch for b in t.builds]
    needed += [(f"tensorflow {t.version}", t.cuda) for t in matrix.tensorflow]
    needed += [(f"operating system {o.os}", c.version) for o in matrix.operating_systems for c in o.cuda]
    for who, cuda in needed:
        if versions.key(cuda) not in known:
            raise GpulabError(f"matrix.yml: {who} uses CUDA {cuda}, which the cuda section does not list.")
    branches = {d.branch for d in matrix.drivers}
    for life in matrix.lifecycle:
        if life.branch not in branches:
            raise GpulabError(
                f"matrix.yml: driver_lifecycle names {life.branch}, which the drivers section does not list."
            )
    for osr in matrix.operating_systems:
        for driver in osr.drivers:
            if driver.version not in branches:
                raise GpulabError(
                    f"matrix.yml: operating system {osr.os} packages driver {driver.version}, which the drivers "
                    "section does not list."
                )


def _default_text() -> str:
    return resources.files("gpulab.compat").joinpath("matrix.yml").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=4)
def load_matrix(path: str | None = None) -> Matrix:
    """The parsed matrix (cached). `path` overrides the packaged file, e.g. for testing an edited copy."""
    try:
        text = Path(path).read_text(encoding="utf-8") if path else _default_text()
        raw = yaml.safe_load(text)
    except OSError as err:
        raise GpulabError(f"cannot read the compatibility matrix {path or 'matrix.yml'}: {err}") from err
    except yaml.YAMLError as err:
        raise GpulabError(f"matrix.yml is not valid YAML: {err}") from err
    return parse_matrix(raw)


def load_raw(path: str | None = None) -> dict[str, Any]:
    """The YAML as plain data, for tests and tools that inspect sources."""
    text = Path(path).read_text(encoding="utf-8") if path else _default_text()
    data = yaml.safe_load(text)
    return data if isinstance(data, dict) else {}
