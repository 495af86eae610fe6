"""Build gpulab's wheel on the controller from a checkout, labelled with a hash of its source.

The label (`0.1.0+g<hash>`) makes every change of the source a new version, so pip on the node replaces an
older build of the same release and keeps an identical one ("Requirement already satisfied": nothing changed).
The build runs in a clean copy of the tree (no stale build/ output can leak in), with SOURCE_DATE_EPOCH set so
the same source gives the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ansible_collections.gpulab.provision.plugins.plugin_utils.bundle import EPOCH, locked, tree_files

# What goes into the wheel: pyproject.toml names README.md as the long description; the package is under src/.
SOURCE_ITEMS = ("pyproject.toml", "README.md", "src")
_VERSION_LINE = re.compile(r'^version\s*=\s*"([^"+]+)"\s*$', re.MULTILINE)


class WheelError(Exception):
    pass


def source_files(source: Path) -> list[Path]:
    missing = [item for item in SOURCE_ITEMS if not (source / item).exists()]
    if missing:
        raise WheelError(
            f"{source} is not a gpulab checkout (missing {', '.join(missing)}). Fix: point "
            "dl_frameworks_gpulab_source at the checkout, or give a built wheel in dl_frameworks_gpulab_wheel."
        )
    files = [Path(item) for item in SOURCE_ITEMS if (source / item).is_file()]
    files += [Path("src") / rel for rel in tree_files(source / "src")]
    return sorted(files)


def source_hash(source: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for rel in files:
        h.update(str(rel).encode() + b"\0" + (source / rel).read_bytes() + b"\0")
    return h.hexdigest()[:12]


def labelled_version(pyproject: str, label: str) -> tuple[str, str]:
    """(new pyproject text, version) with `+g<label>` appended to the static version."""
    match = _VERSION_LINE.search(pyproject)
    if match is None:
        raise WheelError('pyproject.toml has no static `version = "X.Y.Z"` line to label.')
    version = f"{match.group(1)}+g{label}"
    return pyproject[: match.start()] + f'version = "{version}"' + pyproject[match.end() :], version


def build_wheel(source: Path, out_dir: Path, timeout: float = 900) -> tuple[Path, bool]:
    """The wheel for this source in `out_dir`, built unless it is there already; returns (path, built)."""
    files = source_files(source)
    label = source_hash(source, files)
    with locked(out_dir):
        existing = sorted(out_dir.glob(f"gpulab-*+g{label}-py3-none-any.whl"))
        if existing:
            return existing[0], False
        with tempfile.TemporaryDirectory(prefix="gpulab-wheel-") as tmp:
            tree, dist = Path(tmp) / "src-tree", Path(tmp) / "dist"
            for rel in files:
                (tree / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source / rel, tree / rel)
            text, version = labelled_version((tree / "pyproject.toml").read_text(), label)
            (tree / "pyproject.toml").write_text(text)
            env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH))
            cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(dist), str(tree)]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
            built = sorted(dist.glob("gpulab-*.whl"))
            if proc.returncode != 0 or len(built) != 1:
                raise WheelError(
                    f"building gpulab's wheel failed ({' '.join(cmd)}, exit {proc.returncode}):\n"
                    f"{(proc.stdout + proc.stderr)[-3000:]}\nFix: the controller's pip needs setuptools (from PyPI "
                    "or a mirror) to build; on an offline controller give a built wheel in dl_frameworks_gpulab_wheel."
                )
            dest = out_dir / built[0].name
            shutil.copyfile(built[0], out_dir / f".{dest.name}.tmp")
            os.replace(out_dir / f".{dest.name}.tmp", dest)
    if version not in dest.name:
        raise WheelError(f"built {dest.name}, expected version {version}")
    return dest, True


def wheel_version(wheel: Path) -> str:
    """'gpulab-0.1.0+gabc-py3-none-any.whl' -> '0.1.0+gabc'."""
    parts = wheel.name.split("-")
    if len(parts) < 5 or parts[0] != "gpulab" or wheel.suffix != ".whl":
        raise WheelError(f"{wheel} is not a gpulab wheel (gpulab-<version>-py3-none-any.whl).")
    return parts[1]
