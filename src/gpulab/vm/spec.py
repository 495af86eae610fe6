"""The VM spec: one YAML mapping (documented key by key in docs/vm.md), checked whole before anything runs.

Every problem in a spec is reported at once, each naming the key, what is wrong and what to write instead.
Relative paths are taken relative to the spec file.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpulab.errors import GpulabError, yaml_problem
from gpulab.names import DriverBranch
from gpulab.paths import load_yaml, read_input_text, shown
from gpulab.vm.partitions import NVSWITCH_MODES, PARTITIONS_FORM, NvswitchSpec, parse_partitions, partition_id
from gpulab.vm.pci import PciAddress
from gpulab.vm.sysfs import parse_cpulist

DOMAIN_TYPES = ("kvm", "qemu")
CPU_MODES = ("host-passthrough", "maximum", "host-model")
FIRMWARES = ("efi", "bios")
HUGEPAGE_SIZES = {"2M": 2048, "1G": 1048576}
DEFAULT_IMAGE_DIR = Path("/var/lib/libvirt/images")
MAX_VCPUS = 1024  # x86 KVM's KVM_MAX_VCPUS, and what recent QEMU's q35 machine takes
MAX_MEMORY_MIB = 64 * 1024 * 1024  # 64 TiB; the host check then holds it to what the host has
MAX_DISK_GIB = 1024 * 1024  # 1 PiB: far past any disk, well inside qcow2's 2 PiB with 64 KiB clusters
MAX_MMIO_WINDOW_GIB = 1024 * 1024  # 2^50 bytes: with guest RAM below it, still inside 52 physical address bits
MAX_GPU_COUNT = 16  # passed-through devices: one guest root port each, on slots 0x10-0x1f (see layout.py)
MAX_CMDLINE = 2047  # x86 COMMAND_LINE_SIZE is 2048 bytes with the terminating NUL
MAX_KEY_LINE = 16384  # OpenSSH's SSH_MAX_PUBKEY_BYTES; no real key line comes near it
MAX_SPEC_BYTES = 1024 * 1024  # a spec is a few hundred bytes; this only stops /dev/zero-like inputs
# Every pattern is used with fullmatch: `$` would also accept a trailing newline ("vm1\n").
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_SSH_KEY = re.compile(
    r"(?:ssh-(?:ed25519|rsa|dss)|ecdsa-sha2-nistp(?:256|384|521)|sk-(?:ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com)"
    r"[ \t]+[A-Za-z0-9+/]+={0,2}(?:[ \t]+[^\x00-\x1f\x7f]*)?"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CPULIST = re.compile(r"\d{1,4}(?:-\d{1,4})?(?:,\d{1,4}(?:-\d{1,4})?)*")
MAX_HOST_CPU = 8191  # Linux's NR_CPUS ceiling on x86
_NAME_RULE = "ASCII letters, digits, '_', '.', '-'; starts with a letter or digit; up to 63"


@dataclass(frozen=True)
class DiskSpec:
    base: Path | None = None  # a base image: the VM gets its own qcow2 overlay on it
    path: Path | None = None  # or a disk used as it is
    dir: Path = DEFAULT_IMAGE_DIR  # where the overlay and the cloud-init seed go
    size_gib: int | None = None  # overlay virtual size (default: the base image's)
    format: str | None = None  # of `path`: qcow2 or raw (default: from the file name)

    @property
    def disk_format(self) -> str:
        if self.path is None:
            return "qcow2"
        return self.format or ("qcow2" if self.path.suffix == ".qcow2" else "raw")

    def disk_path(self, vm_name: str) -> Path:
        if self.path is not None:
            return self.path
        return self.dir / f"{vm_name}.qcow2"


@dataclass(frozen=True)
class CloudInitSpec:
    hostname: str
    user: str
    ssh_authorized_keys: tuple[str, ...]


@dataclass(frozen=True)
class NetworkSpec:
    name: str
    address: ipaddress.IPv4Interface | None = None  # set: gpulab creates this isolated network if missing

    @property
    def create(self) -> bool:
        return self.address is not None


@dataclass(frozen=True)
class KernelBoot:
    kernel: Path
    initrd: Path | None
    cmdline: str


@dataclass(frozen=True)
class RomSpec:
    file: Path | None = None  # a ROM image QEMU shows the guest instead of the card's own
    bar: bool = True  # False: the guest sees no ROM BAR at all


@dataclass(frozen=True)
class VmSpec:
    name: str
    vcpus: int
    memory_mib: int
    gpus: str | None = None  # a selector (gpulab.vm.select); None: no GPU
    extra_hostdevs: tuple[str, ...] = ()
    domain_type: str = "kvm"
    cpu_mode: str = "host-passthrough"
    firmware: str = "efi"
    hugepages: bool = False
    hugepage_size: str = "1G"
    numa_pinning: bool = True
    mmio_window_gib: int | None = None  # None: sized from the GPUs' BARs
    p2p_clique: int | None = None  # the first clique id; each further P2P domain takes the next
    kvm_hidden: bool | None = None  # None: on where a GeForce board's guest driver needs it
    guest_driver: int | None = None  # the guest's driver branch (460 for R460); None: the matrix's plan
    gpu_rom: RomSpec | None = None
    nvswitch: NvswitchSpec | None = None
    secure_boot: bool = False  # OVMF with Secure Boot enforced and Microsoft's keys enrolled
    housekeeping_cpus: tuple[int, ...] | None = None  # host CPUs for QEMU's emulator and I/O threads; None: chosen
    disk: DiskSpec | None = None
    cloud_init: CloudInitSpec | None = None
    network: NetworkSpec | None = None
    kernel_boot: KernelBoot | None = None
    console_log: Path | None = None

    @property
    def hugepage_kib(self) -> int:
        return HUGEPAGE_SIZES[self.hugepage_size]


_KEYS = (
    "name",
    "vcpus",
    "memory_mib",
    "gpus",
    "extra_hostdevs",
    "domain_type",
    "cpu_mode",
    "firmware",
    "hugepages",
    "hugepage_size",
    "numa_pinning",
    "mmio_window_gib",
    "p2p_clique",
    "kvm_hidden",
    "guest_driver",
    "gpu_rom",
    "nvswitch",
    "secure_boot",
    "housekeeping_cpus",
    "disk",
    "cloud_init",
    "network",
    "kernel_boot",
    "console_log",
)


class _Reader:
    """Typed access to the spec mapping that collects every problem instead of stopping at the first."""

    def __init__(self, data: dict[str, Any], where: str, base_dir: Path) -> None:
        self.data, self.where, self.base_dir = data, where, base_dir
        self.problems: list[str] = []

    def fail(self, key: str, message: str) -> None:
        self.problems.append(f"{key}: {message}")

    def required_int(self, key: str, low: int, high: int) -> int | None:
        value = self.data.get(key)
        if value is None:
            self.fail(key, f"required; give a whole number from {low} to {high}.")
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(key, f"{value!r} is not a whole number from {low} to {high}.")
            return None
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.data.get(key, default)
        if value not in choices:
            self.fail(key, f"{value!r} is not one of {', '.join(choices)}.")
            return default
        return str(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, f"{value!r} is not true or false.")
            return default
        return value

    def path(self, value: Any, key: str) -> Path | None:
        if not isinstance(value, str) or not value.strip() or _CONTROL.search(value):
            self.fail(key, f"{value!r} is not a path (text without control characters such as newlines).")
            return None
        try:
            path = Path(value).expanduser()
        except RuntimeError:  # ~someone with no such user
            self.fail(key, f"{value!r}: cannot expand its ~; write the path out.")
            return None
        return path if path.is_absolute() else (self.base_dir / path).resolve()

    def mapping(self, key: str) -> dict[str, Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping (see docs/vm.md), not {type(value).__name__}.")
            return None
        return value

    def unknown(self, data: dict[str, Any], known: tuple[str, ...], prefix: str) -> None:
        for key in sorted(set(data) - set(known), key=str):
            self.fail(f"{prefix}{key}", f"unknown key; the keys are {', '.join(known)}.")


def _gpus(r: _Reader) -> str | None:
    value = r.data.get("gpus")
    if value is None:
        return None
    if isinstance(value, bool):
        r.fail("gpus", f"{value!r} is not a GPU selector; write one such as 'all', '4x10de:15f8' or '0000:3b:00.0'.")
        return None
    if isinstance(value, int):
        if not 1 <= value <= MAX_GPU_COUNT:
            r.fail("gpus", f"{value} is not a GPU count from 1 to {MAX_GPU_COUNT}; write 'none' for no GPU.")
            return None
        return str(value)
    if isinstance(value, str):
        if not value.strip():
            r.fail("gpus", "is empty; write a selector such as 'all' or '2xP100', or 'none' for no GPU.")
            return None
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value) if value else None
    r.fail("gpus", f"{value!r} is not a GPU selector; write e.g. 'all', '4x10de:15f8' or a list of PCI addresses.")
    return None


def _housekeeping(r: _Reader) -> tuple[int, ...] | None:
    value = r.data.get("housekeeping_cpus")
    if value is None:
        return None
    fix = "write host CPUs as '0,40' or '0-1' (or a list such as [0, 40])."
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        cpus = tuple(value)
    elif isinstance(value, str) and _CPULIST.fullmatch(value.replace(" ", "")):
        text = value.replace(" ", "")
        if any(int(lo) > int(hi) for lo, _, hi in (p.partition("-") for p in text.split(",")) if hi):
            r.fail("housekeeping_cpus", f"{value!r} has a range that runs backwards; {fix}")
            return None
        cpus = parse_cpulist(text)
    else:
        r.fail("housekeeping_cpus", f"{value!r} is not a CPU list; {fix}")
        return None
    if any(not 0 <= c <= MAX_HOST_CPU for c in cpus):
        r.fail("housekeeping_cpus", f"{value!r} names a CPU outside 0-{MAX_HOST_CPU}; {fix}")
        return None
    return tuple(sorted(set(cpus)))


def _disk(r: _Reader) -> DiskSpec | None:
    raw = r.mapping("disk")
    if raw is None:
        return None
    r.unknown(raw, ("base", "path", "dir", "size_gib", "format"), "disk.")
    base = r.path(raw["base"], "disk.base") if "base" in raw else None
    path = r.path(raw["path"], "disk.path") if "path" in raw else None
    if ("base" in raw) == ("path" in raw):  # by key: a bad value is reported once, by r.path
        r.fail("disk", "give exactly one of `base` (an image to overlay) or `path` (a disk to use as it is).")
    directory = r.path(raw["dir"], "disk.dir") if "dir" in raw else DEFAULT_IMAGE_DIR
    size = raw.get("size_gib")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_DISK_GIB):
        r.fail("disk.size_gib", f"{size!r} is not a whole number of GiB from 1 to {MAX_DISK_GIB}.")
        size = None
    if size is not None and base is None:
        r.fail("disk.size_gib", "only applies to an overlay on `base`; resize a given `path` disk yourself.")
    fmt = raw.get("format")
    if fmt is not None and fmt not in ("qcow2", "raw"):
        r.fail("disk.format", f"{fmt!r} is not qcow2 or raw.")
        fmt = None
    if fmt is not None and path is None:
        r.fail("disk.format", "only applies to `path`; an overlay on `base` is always qcow2.")
    return DiskSpec(base=base, path=path, dir=directory or DEFAULT_IMAGE_DIR, size_gib=size, format=fmt)


def _cloud_init(r: _Reader, vm_name: str) -> CloudInitSpec | None:
    raw = r.mapping("cloud_init")
    if raw is None:
        return None
    r.unknown(raw, ("hostname", "user", "ssh_authorized_keys", "ssh_authorized_key_files"), "cloud_init.")
    hostname = raw.get("hostname", vm_name.replace("_", "-").replace(".", "-"))
    if not isinstance(hostname, str) or not _HOSTNAME.fullmatch(hostname):
        r.fail(
            "cloud_init.hostname",
            f"{hostname!r} is not a host name (ASCII letters, digits and '-', not at either end; up to 63).",
        )
    user = raw.get("user", "gpulab")
    if not isinstance(user, str) or not _USER.fullmatch(user):
        r.fail(
            "cloud_init.user",
            f"{user!r} is not a Linux user name (a lower-case ASCII letter or '_', then lower case, digits, "
            "'_', '-'; up to 32).",
        )
    keys: list[str] = []
    listed = raw.get("ssh_authorized_keys", [])
    if not isinstance(listed, list) or not all(isinstance(k, str) for k in listed):
        r.fail("cloud_init.ssh_authorized_keys", "must be a list of public key lines ('ssh-ed25519 AAAA... user').")
        listed = []
    # Surrounding whitespace is dropped (a YAML block scalar ends in a newline); inside, none is allowed.
    keys.extend(k.strip() for k in listed)
    files = raw.get("ssh_authorized_key_files", [])
    if not isinstance(files, list):
        r.fail("cloud_init.ssh_authorized_key_files", "must be a list of .pub files.")
        files = []
    for item in files:
        path = r.path(item, "cloud_init.ssh_authorized_key_files")
        if path is None:
            continue
        try:
            text = read_input_text(
                path, "SSH public key file", "give the .pub file of an OpenSSH key.", limit=MAX_SPEC_BYTES
            )
        except GpulabError as err:
            r.fail("cloud_init.ssh_authorized_key_files", str(err))
            continue
        keys.extend(line.strip() for line in text.splitlines() if line.strip())
    for key in keys:
        if len(key) > MAX_KEY_LINE or not _SSH_KEY.fullmatch(key):
            shown = f"{key[:40]!r}..." if len(key) > 40 else repr(key)
            r.fail(
                "cloud_init.ssh_authorized_keys",
                f"{shown} is not an OpenSSH public key line ('ssh-ed25519 AAAA... comment', one line); "
                "copy it from the .pub file.",
            )
    if not keys:
        r.fail("cloud_init", "needs at least one SSH public key (ssh_authorized_keys or ssh_authorized_key_files).")
    return CloudInitSpec(hostname=str(hostname), user=str(user), ssh_authorized_keys=tuple(keys))


def _network(r: _Reader) -> NetworkSpec | None:
    value = r.data.get("network")
    if value is None:
        return None
    if isinstance(value, str):
        if not _NAME.fullmatch(value):
            r.fail("network", f"{value!r} is not a network name ({_NAME_RULE}).")
            return None
        return NetworkSpec(name=value)
    raw = r.mapping("network")
    if raw is None:
        return None
    r.unknown(raw, ("name", "address"), "network.")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        r.fail("network.name", f"{name!r} is not a network name ({_NAME_RULE}).")
        return None
    address = raw.get("address")
    if address is None:
        return NetworkSpec(name=name)
    try:
        iface = ipaddress.IPv4Interface(str(address))
    except ValueError:
        r.fail("network.address", f"{address!r} is not the host's address with prefix, e.g. 192.168.150.1/24.")
        return None
    if iface.network.prefixlen > 29 or iface.ip in (iface.network.network_address, iface.network.broadcast_address):
        r.fail("network.address", f"{address} leaves no room for DHCP; use a host address in a /24 to /29.")
        return None
    return NetworkSpec(name=name, address=iface)


def _kernel_boot(r: _Reader) -> KernelBoot | None:
    raw = r.mapping("kernel_boot")
    if raw is None:
        return None
    r.unknown(raw, ("kernel", "initrd", "cmdline"), "kernel_boot.")
    if "kernel" not in raw:
        r.fail("kernel_boot.kernel", "required: the guest kernel (vmlinuz) to boot directly.")
        return None
    kernel = r.path(raw["kernel"], "kernel_boot.kernel")
    initrd = r.path(raw["initrd"], "kernel_boot.initrd") if raw.get("initrd") is not None else None
    cmdline = raw.get("cmdline", "")
    if not isinstance(cmdline, str) or _CONTROL.search(cmdline) or len(cmdline) > MAX_CMDLINE:
        r.fail(
            "kernel_boot.cmdline",
            f"must be one line of text of at most {MAX_CMDLINE} characters, e.g. 'root=/dev/vda console=ttyS0'.",
        )
        cmdline = ""
    return None if kernel is None else KernelBoot(kernel=kernel, initrd=initrd, cmdline=cmdline)


def _kvm_hidden(r: _Reader) -> bool | None:
    value = r.data.get("kvm_hidden", "auto")
    if value == "auto":
        return None
    if not isinstance(value, bool):
        r.fail("kvm_hidden", f"{value!r} is not true, false or auto.")
        return None
    return value


def _guest_driver(r: _Reader) -> int | None:
    value = r.data.get("guest_driver")
    if value is None:
        return None
    text = str(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else ""
    try:
        return DriverBranch.parse(text).number
    except GpulabError:
        r.fail("guest_driver", f"{value!r} is not a driver branch or version; write e.g. R460, 460 or 460.91.03.")
        return None


def _gpu_rom(r: _Reader) -> RomSpec | None:
    raw = r.mapping("gpu_rom")
    if raw is None:
        return None
    r.unknown(raw, ("file", "bar"), "gpu_rom.")
    file = r.path(raw["file"], "gpu_rom.file") if raw.get("file") is not None else None
    bar = raw.get("bar", True)
    if not isinstance(bar, bool):
        r.fail("gpu_rom.bar", f"{bar!r} is not true or false (false hides the ROM BAR from the guest).")
        bar = True
    if file is not None and not bar:
        r.fail("gpu_rom", "a ROM file is shown through the ROM BAR; give `file` or `bar: false`, not both.")
    return RomSpec(file=file, bar=bar)


def _nvswitch(r: _Reader) -> NvswitchSpec | None:
    value = r.data.get("nvswitch")
    if value is None:
        return None
    raw = {"mode": value} if isinstance(value, str) else r.mapping("nvswitch")
    if raw is None:
        return None
    r.unknown(raw, ("mode", "partition", "partitions", "partitions_file"), "nvswitch.")
    mode = raw.get("mode")
    if mode not in NVSWITCH_MODES:
        r.fail("nvswitch.mode", f"{mode!r} is not passthrough (the whole fabric to this VM) or shared (a partition).")
        return None
    partition = raw.get("partition")
    if partition is not None and partition_id(partition) is None:
        r.fail("nvswitch.partition", f"{partition!r} is not a partition id (a whole number from 0).")
        partition = None
    partitions = None
    if "partitions" in raw:
        partitions = parse_partitions(raw["partitions"])
        if partitions is None:
            r.fail("nvswitch.partitions", f"is not {PARTITIONS_FORM}.")
    path = r.path(raw["partitions_file"], "nvswitch.partitions_file") if "partitions_file" in raw else None
    if path is not None:
        fix = "give the partition layout file (YAML, or the JSON `fmpm -l` prints)."
        try:
            partitions = parse_partitions(load_yaml(read_input_text(path, "partition layout", fix)))
            if partitions is None:
                r.fail("nvswitch.partitions_file", f"{shown(path)} is not {PARTITIONS_FORM}.")
        except GpulabError as err:
            r.fail("nvswitch.partitions_file", str(err))
        except yaml.YAMLError as err:
            r.fail("nvswitch.partitions_file", f"{shown(path)} is not YAML or JSON ({yaml_problem(err)}); {fix}")
    if mode == "shared":
        if "partition" not in raw:
            r.fail("nvswitch.partition", "shared mode needs the id of the partition this VM gets.")
        if "partitions" in raw and "partitions_file" in raw:
            r.fail("nvswitch", "give `partitions` or `partitions_file`, not both.")
        elif "partitions" not in raw and "partitions_file" not in raw:
            r.fail("nvswitch", "shared mode needs the partition layout: `partitions` or `partitions_file`.")
    elif partition is not None or "partitions" in raw or "partitions_file" in raw:
        r.fail("nvswitch", "partitions only apply to mode shared; passthrough gives this VM the whole fabric.")
    return NvswitchSpec(
        mode=str(mode),
        partition=partition_id(partition) if partition is not None else None,
        partitions=partitions,
        partitions_file=path,
    )


def _mmio_window(r: _Reader, data: dict[str, Any]) -> int | None:
    """mmio_window_gib: None for 'auto' (or when wrong), else a power of two in GiB (0 turns it off)."""
    mmio = data.get("mmio_window_gib", "auto")
    if mmio == "auto":
        return None
    if isinstance(mmio, bool) or not isinstance(mmio, int) or not 0 <= mmio <= MAX_MMIO_WINDOW_GIB or mmio & (mmio - 1):
        r.fail(
            "mmio_window_gib",
            f"{mmio!r} is not 'auto' or a power of two in GiB up to {MAX_MMIO_WINDOW_GIB} (0 turns the setting off).",
        )
        return None
    return mmio


def _p2p_clique(r: _Reader, data: dict[str, Any]) -> int | None:
    clique = data.get("p2p_clique")
    if clique is not None and (isinstance(clique, bool) or not isinstance(clique, int) or not 0 <= clique <= 15):
        r.fail("p2p_clique", f"{clique!r} is not a clique id from 0 to 15 (or leave it out).")
        return None
    return clique


def _extra_hostdevs(r: _Reader, data: dict[str, Any]) -> list[str]:
    """extra_hostdevs: PCI addresses of devices passed through beside the GPUs, each checked."""
    extra = data.get("extra_hostdevs", [])
    if not isinstance(extra, list) or not all(isinstance(e, str) for e in extra):
        r.fail("extra_hostdevs", "must be a list of PCI addresses ('0000:07:00.0').")
        extra = []
    for item in extra:
        try:
            PciAddress.parse(item)
        except GpulabError as err:
            r.fail("extra_hostdevs", str(err))
    return extra


def spec_from_dict(data: Any, where: str = "VM spec", base_dir: Path | None = None) -> VmSpec:
    """Check `data` (the parsed YAML) and build the spec; a GpulabError lists every problem."""
    if not isinstance(data, dict):
        got = "a list" if isinstance(data, list) else "text" if isinstance(data, str) else type(data).__name__
        raise GpulabError(
            f"{where}: must be a mapping of keys (name, vcpus, memory_mib, ...), not {got}; see docs/vm.md."
        )
    r = _Reader(data, where, base_dir or Path.cwd())
    r.unknown(data, _KEYS, "")
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        r.fail("name", f"{name!r} is not a VM name ({_NAME_RULE}).")
        name = "invalid"
    vcpus = r.required_int("vcpus", 1, MAX_VCPUS)
    memory = r.required_int("memory_mib", 256, MAX_MEMORY_MIB)
    domain_type = r.choice("domain_type", DOMAIN_TYPES, "kvm")
    cpu_mode = r.choice("cpu_mode", CPU_MODES, "host-passthrough" if domain_type == "kvm" else "maximum")
    if domain_type == "qemu" and cpu_mode in ("host-passthrough", "host-model"):
        r.fail("cpu_mode", f"{cpu_mode} needs hardware virtualisation; with domain_type qemu (TCG) use 'maximum'.")
    hugepage_size = r.choice("hugepage_size", tuple(HUGEPAGE_SIZES), "1G")
    hugepages = r.flag("hugepages", False)
    if hugepages and memory is not None and (memory * 1024) % HUGEPAGE_SIZES[hugepage_size]:
        r.fail("memory_mib", f"{memory} MiB is not a whole number of {hugepage_size} hugepages; round it.")
    mmio = _mmio_window(r, data)
    clique = _p2p_clique(r, data)
    extra = _extra_hostdevs(r, data)
    console_log = r.path(data["console_log"], "console_log") if data.get("console_log") is not None else None
    spec = VmSpec(
        name=name,
        vcpus=vcpus or 1,
        memory_mib=memory or 256,
        gpus=_gpus(r),
        extra_hostdevs=tuple(extra),
        domain_type=domain_type,
        cpu_mode=cpu_mode,
        firmware=r.choice("firmware", FIRMWARES, "efi"),
        hugepages=hugepages,
        hugepage_size=hugepage_size,
        numa_pinning=r.flag("numa_pinning", True),
        mmio_window_gib=mmio,
        p2p_clique=clique,
        kvm_hidden=_kvm_hidden(r),
        guest_driver=_guest_driver(r),
        gpu_rom=_gpu_rom(r),
        nvswitch=_nvswitch(r),
        secure_boot=r.flag("secure_boot", False),
        housekeeping_cpus=_housekeeping(r),
        disk=_disk(r),
        cloud_init=_cloud_init(r, name),
        network=_network(r),
        kernel_boot=_kernel_boot(r),
        console_log=console_log,
    )
    if spec.secure_boot and spec.firmware != "efi":
        r.fail(
            "secure_boot", "needs firmware: efi (SeaBIOS has no Secure Boot); set firmware: efi or drop secure_boot."
        )
    if spec.cloud_init is not None and spec.disk is None:
        r.fail("cloud_init", "needs a `disk` (the seed image goes next to it in disk.dir).")
    if len(r.problems) == 1:  # one problem, one line
        raise GpulabError(f"{where}: {r.problems[0]}")
    if r.problems:
        raise GpulabError(f"{where} has {len(r.problems)} problem(s):\n  " + "\n  ".join(r.problems))
    return spec


def load_spec(path: Path) -> VmSpec:
    """Read and check a VM spec file: a regular UTF-8 file holding one YAML (or JSON) mapping."""
    where = f"VM spec {shown(Path(path))}"
    text = read_input_text(
        path, "VM spec", "give the path of a VM spec file (YAML, see docs/vm.md).", limit=MAX_SPEC_BYTES
    )
    try:
        data = load_yaml(text)
    except yaml.YAMLError as err:
        raise GpulabError(f"{where} is not valid YAML: {yaml_problem(err)}; fix it (see docs/vm.md).") from None
    except RecursionError:
        raise GpulabError(f"{where} is nested too deeply to be a VM spec; see docs/vm.md.") from None
    if data is None:
        raise GpulabError(f"{where} is empty; write a mapping of keys (name, vcpus, memory_mib, ...), see docs/vm.md.")
    return spec_from_dict(data, where=where, base_dir=Path(path).resolve().parent)
