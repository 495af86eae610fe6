"""Opening libvirt connections, with the failures people actually hit turned into fixes."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from gpulab.errors import GpulabError

DEFAULT_URI = "qemu:///system"

_INSTALL = (
    "install it with `pip install -c constraints.txt -e '.[vm]'` "
    "(building it needs `apt-get install libvirt-dev pkg-config gcc python3-dev`)"
)


@functools.lru_cache(maxsize=1)
def libvirt_module() -> ModuleType:
    """The libvirt-python module, or a GpulabError saying how to install it."""
    try:
        # Imported by name: the repository's libvirt/ template directory would otherwise shadow it for type checkers.
        libvirt = importlib.import_module("libvirt")
    except ImportError as err:
        raise GpulabError(f"the libvirt Python binding is not installed: {_INSTALL}.") from err
    # A directory named `libvirt` on sys.path (this repository has one) imports as an empty namespace package.
    if not hasattr(libvirt, "open"):
        raise GpulabError(f"`import libvirt` found {list(libvirt.__path__)}, not libvirt-python: {_INSTALL}.")
    # libvirt prints every error to stderr by default; gpulab reports them itself.
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    return libvirt


def connect(uri: str = DEFAULT_URI) -> Any:
    """A read-write connection to `uri` (qemu:///system, qemu+ssh://host/system, test:///path/host.xml)."""
    libvirt = libvirt_module()
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as err:
        raise GpulabError(
            f"cannot connect to libvirt at {uri}: {err.get_error_message()}. Check that libvirtd runs "
            "(`systemctl start libvirtd`, or `virtlogd -d && libvirtd -d` without systemd) and that this user may "
            "use it (root, or a member of the libvirt group); pass another URI with --connect."
        ) from err


def is_remote(uri: str) -> bool:
    """True when the hypervisor is on another machine (qemu+ssh://host/system), so local files mean nothing to it."""
    parts = urlsplit(uri)
    return bool(parts.netloc) or "+" in parts.scheme


def is_local(uri: str) -> bool:
    """True when the URI drives this machine's hypervisor, so this machine's sysfs describes the host."""
    parts = urlsplit(uri)
    return not parts.netloc and "+" not in parts.scheme and parts.scheme not in ("test", "")


def error_text(err: Exception) -> str:
    """libvirt's own message without the 'libvirt: QEMU Driver error :' prefix."""
    getter = getattr(err, "get_error_message", None)
    message = getter() if callable(getter) else None
    return str(message or err)
