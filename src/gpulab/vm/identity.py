"""Stable identities derived from names, so re-rendering a VM gives the same XML (and golden files hold)."""

from __future__ import annotations

import hashlib
import uuid

# A fixed namespace for gpulab's name-based UUIDs (uuid5 of "gpulab" in the URL namespace).
_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "gpulab")


def domain_uuid(name: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"domain/{name}"))


def network_uuid(name: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"network/{name}"))


def mac_address(name: str) -> str:
    """A MAC in QEMU's locally administered 52:54:00 range, fixed per VM name (stable DHCP leases)."""
    digest = hashlib.sha256(f"mac/{name}".encode()).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])


def short_hash(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]
