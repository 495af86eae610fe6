"""cloud-init NoCloud seed: user-data and meta-data rendered from templates/cloud-init, packed in an ISO 9660
image labelled `cidata` that the guest reads from its CD drive on first boot."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpulab.errors import GpulabError
from gpulab.vm.identity import short_hash
from gpulab.vm.rendering import render
from gpulab.vm.spec import CloudInitSpec

VOLUME_ID = "cidata"  # the label cloud-init's NoCloud datasource looks for
# Tool -> arguments before the output file and the source directory; any one of them will do.
_ISO_TOOLS = {
    "xorriso": ["-as", "mkisofs", "-quiet", "-V", VOLUME_ID, "-J", "-r", "-o"],
    "genisoimage": ["-quiet", "-V", VOLUME_ID, "-J", "-r", "-o"],
    "mkisofs": ["-quiet", "-V", VOLUME_ID, "-J", "-r", "-o"],
}


@dataclass(frozen=True)
class Seed:
    user_data: str
    meta_data: str
    digest: str  # of both documents: part of the ISO's name, so a changed seed changes the domain XML

    def iso_path(self, directory: Path, vm_name: str) -> Path:
        return directory / f"{vm_name}-seed-{self.digest}.iso"


def render_seed(vm_name: str, ci: CloudInitSpec) -> Seed:
    user_data = render("cloud-init/user-data.j2", ci=ci)
    # A new instance-id whenever the user-data changes makes cloud-init apply it again.
    instance_id = f"{vm_name}-{short_hash(user_data)}"
    meta_data = render("cloud-init/meta-data.j2", ci=ci, instance_id=instance_id)
    return Seed(user_data=user_data, meta_data=meta_data, digest=short_hash(user_data, meta_data))


def iso_tool() -> str:
    for tool in _ISO_TOOLS:
        if shutil.which(tool):
            return tool
    raise GpulabError("no ISO 9660 tool to build the cloud-init seed: apt-get install xorriso (or genisoimage).")


def build_seed_iso(seed: Seed, path: Path) -> bool:
    """Write the seed ISO at `path` unless it is already there (its name carries the content digest).

    Returns True when a file was written. The ISO is built beside `path` and renamed into place, so no
    half-written seed is ever seen.
    """
    if path.is_file():
        return False
    tool = iso_tool()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".gpulab-seed-", dir=path.parent) as tmp:
        source = Path(tmp) / "cidata"
        source.mkdir()
        (source / "user-data").write_text(seed.user_data, encoding="utf-8")
        (source / "meta-data").write_text(seed.meta_data, encoding="utf-8")
        staged = Path(tmp) / path.name
        cmd = [tool, *_ISO_TOOLS[tool], str(staged), str(source)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0 or not staged.is_file():
            raise GpulabError(
                f"building the cloud-init seed with {tool} failed: {proc.stderr.strip() or proc.returncode}"
            )
        os.chmod(staged, 0o644)
        os.replace(staged, path)
    return True


def remove_stale_seeds(directory: Path, vm_name: str, keep: Path | None) -> list[Path]:
    """Delete this VM's older seed ISOs (other digests); returns what was removed."""
    removed = []
    for old in directory.glob(f"{vm_name}-seed-*.iso"):
        if keep is None or old != keep:
            with contextlib.suppress(OSError):
                old.unlink()
                removed.append(old)
    return removed
