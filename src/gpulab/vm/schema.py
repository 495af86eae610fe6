"""Validation of rendered XML against libvirt's RNG schemas (`virt-xml-validate`, from libvirt-clients).

libvirt's plain define silently "fixes" some invalid XML; validating first makes a template mistake an error
here instead of a VM that differs from what was rendered. Define also passes VIR_DOMAIN_DEFINE_VALIDATE.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from gpulab.errors import GpulabError

TOOL = "virt-xml-validate"
INSTALL_HINT = "apt-get install libvirt-clients libxml2-utils"


def available() -> bool:
    return shutil.which(TOOL) is not None


def schema_errors(xml: str, kind: str) -> list[str]:
    """Problems `virt-xml-validate` finds in `xml` as a libvirt `kind` (domain, network); empty when valid."""
    tool = shutil.which(TOOL)
    if tool is None:
        raise GpulabError(
            f"{TOOL} is not installed, so the XML cannot be checked against libvirt's schema: {INSTALL_HINT}."
        )
    with tempfile.TemporaryDirectory(prefix="gpulab-xml-") as tmp:
        path = Path(tmp) / f"{kind}.xml"
        path.write_text(xml, encoding="utf-8")
        proc = subprocess.run([tool, str(path), kind], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode == 0:
        return []
    lines = [line.replace(str(path), f"<{kind} XML>") for line in (proc.stderr + proc.stdout).splitlines()]
    return [line for line in lines if line.strip() and not line.endswith("fails to validate")] or [
        f"{TOOL} exited with status {proc.returncode}"
    ]
