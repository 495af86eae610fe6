"""Debian root filesystems for the tests: built once per suite with debootstrap, cached as a tarball, unpacked per
test. Debian 12 (bookworm) is the default and the booted guest's; Debian 13 (trixie) is built the same way.

The cache lives outside the clone, under ${GPULAB_CI_CACHE:-/var/cache/gpulab-ci}/guest/, keyed by the suite and a
hash of this file (which holds the package list and every build step), so changing the recipe rebuilds it. Builds
are atomic (temp dir + rename) and serialised by a file lock, so parallel test sessions never see half an image.
Downloaded packages are cached by suite (debootstrap's and apt's), so each is fetched once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

SUITE = "bookworm"  # the default suite, and the booted guest's
SUITES = {"bookworm": "12", "trixie": "13"}  # suite -> Debian release
MIRROR = os.environ.get("GPULAB_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get("GPULAB_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
COMPONENTS = ("main", "contrib", "non-free", "non-free-firmware")
PACKAGES = (
    "openssh-server",
    "python3",
    "python3-apt",
    "python3-venv",
    "linux-image-amd64",
    "linux-headers-amd64",
    "systemd-sysv",
    "udev",
    "iproute2",
    "dbus",
    "kmod",
    "pciutils",
    "initramfs-tools",
    "ca-certificates",
    "sudo",
)
# Installed by apt after debootstrap: debootstrap's resolver cannot satisfy their virtual dependencies.
APT_PACKAGES = ("cloud-init",)
HOSTNAME = "gpulab-guest"
FS_LABEL = "gpulab-root"  # the booted guest's root filesystem (tests/guest/disk.py)
# The login user of the booted guest: key-only SSH, passwordless sudo (Ansible's become).
GUEST_USER = "gpulab"

# Debian's mount points in a chroot, in mount order (unmounted in reverse).
_BIND_MOUNTS = ("proc", "sys", "dev", "dev/pts")


def cache_root() -> Path:
    return Path(os.environ.get("GPULAB_CI_CACHE", "/var/cache/gpulab-ci"))


def guest_cache() -> Path:
    return cache_root() / "guest"


def by_suite(name: str, suite: str) -> str:
    """A cache's name for a suite: the default suite's keeps the plain name."""
    if suite not in SUITES:
        raise ValueError(f"no Debian root recipe for suite {suite!r} (known: {', '.join(SUITES)})")
    return name if suite == SUITE else f"{name}-{suite}"


def apt_archive_cache(suite: str = SUITE) -> Path:
    """Downloaded .debs of one suite, shared by every chroot's apt of that suite (seeded_archives)."""
    return cache_root() / by_suite("apt-archives", suite)


def recipe_key(suite: str = SUITE) -> str:
    """Hash of what builds the image: this file, the suite and the mirror layout it writes."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(f"{suite} {' '.join(COMPONENTS)}".encode())
    return h.hexdigest()[:16]


def run(
    cmd: list[str], *, timeout: float = 1800, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise with its output so the test log shows why."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def in_chroot(root: Path, *cmd: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LANG": "C.UTF-8",
        "HOME": "/root",
    }
    return run(["chroot", str(root), *cmd], timeout=timeout, env=env)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below root, deepest first."""
    prefix = str(root.resolve())
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        target = line.split()[1].replace("\\040", " ")
        if target == prefix or target.startswith(prefix + "/"):
            found.append(target)
    return sorted(found, key=len, reverse=True)


def unmount_all(root: Path) -> None:
    for target in mounts_under(root):
        if subprocess.run(["umount", target], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def remove_root(root: Path) -> None:
    """Delete an unpacked root; never crosses into a mount (a leftover bind of /dev must not be emptied)."""
    if not root.exists():
        return
    unmount_all(root)
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=True)


@contextlib.contextmanager
def chroot_mounts(root: Path, apt_cache: Path | None = None) -> Iterator[Path]:
    """Mount /proc, /sys, /dev, /dev/pts and resolv.conf into root (and the shared apt archive cache when given).

    Services are kept from starting inside the chroot (policy-rc.d) while mounted. Everything is unmounted on
    exit, also when the body fails.
    """
    root = root.resolve()
    policy = root / "usr/sbin/policy-rc.d"
    own_policy = not policy.exists()
    try:
        for sub in _BIND_MOUNTS:
            (root / sub).mkdir(parents=True, exist_ok=True)
            run(["mount", "--bind", f"/{sub}", str(root / sub)])
        resolv = root / "etc/resolv.conf"
        if resolv.is_symlink():
            resolv.unlink()
        resolv.touch()
        run(["mount", "--bind", "/etc/resolv.conf", str(resolv)])
        if apt_cache is not None:
            apt_cache.mkdir(parents=True, exist_ok=True)
            (apt_cache / "partial").mkdir(exist_ok=True)
            archives = root / "var/cache/apt/archives"
            archives.mkdir(parents=True, exist_ok=True)
            run(["mount", "--bind", str(apt_cache), str(archives)])
        if own_policy:
            policy.write_text("#!/bin/sh\n# gpulab test chroot: no daemons start here\nexit 101\n")
            policy.chmod(0o755)
        yield root
    finally:
        if own_policy:
            policy.unlink(missing_ok=True)
        unmount_all(root)


def _write(root: Path, rel: str, text: str, mode: int = 0o644) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _configure(root: Path, suite: str) -> None:
    """Turn a debootstrap tree into a bootable, SSH-reachable guest that Ansible can manage."""
    comps = " ".join(COMPONENTS)
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    _write(
        root,
        "etc/apt/sources.list.d/debian.sources",
        f"Types: deb\nURIs: {MIRROR}\nSuites: {suite} {suite}-updates\nComponents: {comps}\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        f"Types: deb\nURIs: {SECURITY_MIRROR}\nSuites: {suite}-security\nComponents: {comps}\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
    )
    _write(root, "etc/hostname", f"{HOSTNAME}\n")
    _write(root, "etc/hosts", f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME}\n::1 localhost ip6-localhost ip6-loopback\n")
    _write(root, "etc/fstab", f"LABEL={FS_LABEL} / ext4 defaults,errors=remount-ro 0 1\n")
    # DHCP on the first NIC via systemd-networkd (no ifupdown or NetworkManager in minbase). Every guest is a clone
    # with the image's machine id, from which networkd's default DHCP client id derives: two guests running at once
    # would get one lease, so they identify by MAC (an empty machine id instead would start systemd's first-boot
    # wizard, which prompts on the console).
    _write(
        root,
        "etc/systemd/network/80-gpulab-dhcp.network",
        "[Match]\nName=en* eth*\n\n[Network]\nDHCP=yes\n\n[DHCPv4]\nClientIdentifier=mac\n",
    )
    _write(root, "etc/ssh/sshd_config.d/gpulab.conf", "PasswordAuthentication no\nUseDNS no\n")
    # cloud-init reads only the NoCloud seed gpulab.vm attaches (probing cloud metadata services would stall boot)
    # and runs once, in its network stage, with the modules a gpulab seed uses: hostname, users and their keys,
    # SSH. Under TCG every cloud-init stage costs 10-70 s of Python start-up, so the local, config and final
    # stages are masked; the network is systemd-networkd's DHCP above, and the baked host keys are kept.
    _write(
        root,
        "etc/cloud/cloud.cfg.d/90-gpulab.cfg",
        "datasource_list: [NoCloud, None]\n"
        "network:\n  config: disabled\n"
        "locale: false\n"
        "ssh_deletekeys: false\n"
        "ssh_genkeytypes: []\n"
        "cloud_init_modules: [resizefs, set_hostname, update_hostname, update_etc_hosts, users-groups, ssh]\n"
        "cloud_config_modules: []\n"
        "cloud_final_modules: []\n",
    )
    _write(root, f"etc/sudoers.d/{GUEST_USER}", f"{GUEST_USER} ALL=(ALL) NOPASSWD:ALL\n", 0o440)
    in_chroot(root, "useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo", GUEST_USER)
    in_chroot(root, "systemctl", "enable", "systemd-networkd.service", "ssh.service")
    # Timers that would take the apt lock under an Ansible run, and a wait that only slows boot.
    in_chroot(
        root,
        "systemctl",
        "mask",
        "apt-daily.timer",
        "apt-daily-upgrade.timer",
        "systemd-networkd-wait-online.service",
    )
    with chroot_mounts(root, apt_cache=apt_archive_cache(suite)):
        in_chroot(root, "apt-get", "update", "-q")
        in_chroot(root, "apt-get", "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES)
    in_chroot(root, "apt-get", "clean")
    in_chroot(root, "systemctl", "mask", "cloud-init-local.service", "cloud-config.service", "cloud-final.service")
    _write(root, "etc/resolv.conf", "")  # the build host's resolver has no place in the image


def kernel_release(root: Path) -> str:
    """The release of the one kernel installed in root (from /boot/vmlinuz-<release>)."""
    kernels = sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise RuntimeError(f"expected one kernel in {root}/boot, found {kernels or 'none'}")
    return kernels[0]


def build_rootfs(dest_tarball: Path, debs_cache: Path | None = None, suite: str = SUITE) -> None:
    """debootstrap + configure into a temp dir beside dest, tar it, rename into place."""
    dest_tarball.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=dest_tarball.parent))
    root = work / "root"
    try:
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--components={','.join(COMPONENTS)}",
            f"--include={','.join(PACKAGES)}",
        ]
        if debs_cache is not None:
            debs_cache.mkdir(parents=True, exist_ok=True)
            cmd.append(f"--cache-dir={debs_cache}")
        try:
            run([*cmd, suite, str(root), MIRROR], timeout=3600)
        except RuntimeError as err:
            log = root / "debootstrap/debootstrap.log"
            detail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
            raise RuntimeError(f"{err}\ndebootstrap.log:\n{detail}") from err
        _configure(root, suite)
        kernel_release(root)  # exactly one kernel, or the boot tests could not pick one
        tmp_tar = work / "rootfs.tar.zst"
        run(
            [
                "tar",
                "--numeric-owner",
                "--xattrs",
                "--xattrs-include=*",
                "-I",
                "zstd -T0 -3",
                "-C",
                str(root),
                "-cf",
                str(tmp_tar),
                ".",
            ]
        )
        os.replace(tmp_tar, dest_tarball)
    finally:
        remove_root(root)
        shutil.rmtree(work, ignore_errors=True)


STALE_AFTER_S = 24 * 3600


def prune_stale(keep: Path) -> None:
    """Delete other builds of the same kind beside `keep` (other recipes of its suite) that no session used for a
    day, so the cache does not grow; a checkout of another recipe that uses its build now keeps it."""
    stem = _kind(keep)
    for old in keep.parent.glob(f"{stem}-*"):
        if old != keep and _kind(old) == stem and _unused_for_a_day(old):
            if old.is_dir():
                remove_root(old)
            else:
                old.unlink(missing_ok=True)


def _kind(path: Path) -> str:
    """A build's name without its recipe key: rootfs-<suite>-<key>.tar.zst -> rootfs-<suite>, disk-<key> -> disk."""
    return path.name.split(".")[0].rsplit("-", 1)[0]


def _unused_for_a_day(path: Path) -> bool:
    try:
        return time.time() - path.stat().st_mtime > STALE_AFTER_S
    except FileNotFoundError:
        return False


def rootfs_tarball(suite: str = SUITE) -> Path:
    """The cached root tarball of the suite for the current recipe, built on first use (minutes) and reused
    afterwards (its time stamp says when it was last used, for prune_stale)."""
    cache = guest_cache()
    tarball = cache / f"rootfs-{suite}-{recipe_key(suite)}.tar.zst"
    if not tarball.exists():
        with file_lock(cache / f"{by_suite('rootfs', suite)}.lock"):
            if not tarball.exists():  # another session may have built it while this one waited
                build_rootfs(tarball, debs_cache=cache / by_suite("debootstrap-debs", suite), suite=suite)
                prune_stale(tarball)
    os.utime(tarball)
    return tarball


def unpack_root(dest: Path, suite: str = SUITE) -> Path:
    """Unpack a fresh copy of the suite's root into dest (created; must be empty or absent) and return it."""
    tarball = rootfs_tarball(suite)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise RuntimeError(f"{dest} is not empty: unpack_root needs an empty directory")
    run(
        [
            "tar",
            "--numeric-owner",
            "--xattrs",
            "--xattrs-include=*",
            "-I",
            "zstd -T0",
            "-C",
            str(dest),
            "-xpf",
            str(tarball),
        ]
    )
    return dest


@contextlib.contextmanager
def fresh_root(root: Path, suite: str = SUITE) -> Iterator[Path]:
    """A fresh Debian root of the suite (Debian 12 by default) unpacked at `root`, with /proc, /sys, /dev, /dev/pts
    and resolv.conf mounted and its apt archive seeded from the suite's shared cache (seeded_archives); unmounted and
    deleted afterwards."""
    try:
        unpack_root(root, suite)
        # A throwaway root: dpkg need not fsync every file it unpacks (thousands per driver or toolkit install).
        (root / "etc/dpkg/dpkg.cfg.d/gpulab-tests-unsafe-io").write_text("force-unsafe-io\n")
        with chroot_mounts(root), seeded_archives(root, suite):
            yield root
    finally:
        remove_root(root)


@contextlib.contextmanager
def seeded_archives(root: Path, suite: str = SUITE) -> Iterator[None]:
    """The root's own apt archive, seeded with hard links to every .deb the shared cache holds; what its apt
    downloaded goes back into the cache afterwards, each file renamed into place whole. Roots never share apt's
    archive lock, so tests on several pytest workers install into roots at once and still download a package once."""
    cache = apt_archive_cache(suite)
    cache.mkdir(parents=True, exist_ok=True)
    archives = root / "var/cache/apt/archives"
    (archives / "partial").mkdir(parents=True, exist_ok=True)
    for deb in cache.glob("*.deb"):
        _link_or_copy(deb, archives / deb.name)
    try:
        yield
    finally:
        for deb in archives.glob("*.deb"):  # complete files only: apt downloads into partial/
            dest = cache / deb.name
            if not dest.exists():
                staged = cache / f".{deb.name}.{os.getpid()}.tmp"
                _link_or_copy(deb, staged)
                os.replace(staged, dest)


def _link_or_copy(src: Path, dest: Path) -> None:
    try:
        os.link(src, dest)
    except FileExistsError:
        pass
    except OSError:  # another filesystem
        shutil.copy2(src, dest)
