"""A working GPU node's commands, as stand-ins in a Debian root: nvidia-smi printing a recorded census, Slurm's
scontrol and squeue, kubectl, and an apt hook and a runfile installer. Each appends a timestamped line with its
argv to the root's /var/log/gpulab-events.log, so a test reads what ran on each node and in which order across
nodes (every root shares this machine's clock)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IDLE = REPO / "tests/fixtures/h200x4-firecracker/nvidia-smi-q-x.xml"  # a real idle census (no process)
BUSY = REPO / "tests/fixtures/captures/v100s-pcie-x8-busy.xml"  # a real busy one: pid 37305 python on 8 GPUs
EVENTS = "var/log/gpulab-events.log"
STATE = "var/lib/stand-in"
_LOG = 'echo "$(date +%s.%N) $(basename "$0") $*" >> /var/log/gpulab-events.log\n'

NVIDIA_SMI = "#!/bin/sh\n" + _LOG + "cat /var/lib/stand-in/census.xml\n"
SCONTROL = "#!/bin/sh\n" + _LOG
# squeue lists the node's jobs once (the drain waits), then none: they ended.
SQUEUE = "#!/bin/sh\n" + _LOG + "f=/var/lib/stand-in/slurm-jobs\n[ -f $f ] && cat $f && rm -f $f\nexit 0\n"
# kubectl: the node's pods from a file; an eviction ends the GPU pod (and its process leaves the census).
KUBECTL = (
    "#!/bin/sh\n"
    + _LOG
    + "s=/var/lib/stand-in\n"
    + 'case "$1" in\n'
    + "  get) cat $s/pods.json ;;\n"
    + '  cordon|uncordon) echo "node/$2 $1ed" ;;\n'
    + "  create) cat >> $s/evictions.json; cp $s/pods-after.json $s/pods.json; cp $s/idle.xml $s/census.xml ;;\n"
    + '  *) echo "kubectl stand-in: unexpected $*" >&2; exit 1 ;;\n'
    + "esac\n"
)
# apt's hook: every package a dpkg run installs, by file name.
RECORD_INSTALL = (
    "#!/bin/sh\nwhile read -r deb; do\n"
    '  echo "$(date +%s.%N) install $(basename "$deb")" >> /var/log/gpulab-events.log\ndone\n'
)
APT_HOOK = 'DPkg::Pre-Install-Pkgs {"/usr/local/bin/record-install";};\n'


def _pod(name: str, gpus: str | None, owner: str) -> dict:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {
        "metadata": {"name": name, "namespace": "ml", "ownerReferences": [{"kind": owner, "name": name}]},
        "spec": {"containers": [{"name": name, "resources": resources}]},
        "status": {"phase": "Running"},
    }


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def working_node(root: Path, census: Path = IDLE, slurm_jobs: str = "", gpu_pod: bool = False) -> None:
    """The stand-ins in `root`: its census, the Slurm jobs squeue lists once, and a GPU pod kubectl lists until it is
    evicted (whose process is then gone from the census)."""
    bin_dir = root / "usr/local/bin"
    for name, body in (
        ("nvidia-smi", NVIDIA_SMI),
        ("scontrol", SCONTROL),
        ("squeue", SQUEUE),
        ("kubectl", KUBECTL),
        ("record-install", RECORD_INSTALL),
    ):
        _write(bin_dir / name, body, 0o755)
    _write(root / "etc/apt/apt.conf.d/00gpulab-events", APT_HOOK)
    state = root / STATE
    _write(state / "idle.xml", IDLE.read_text())
    _write(state / "census.xml", census.read_text())
    if slurm_jobs:
        _write(state / "slurm-jobs", slurm_jobs)
    device_plugin = _pod("nvidia-device-plugin", "1", "DaemonSet")
    pods = [_pod("train", "2", "Job"), _pod("web", None, "ReplicaSet"), device_plugin] if gpu_pod else [device_plugin]
    _write(state / "pods.json", json.dumps({"items": pods}))
    _write(state / "pods-after.json", json.dumps({"items": [p for p in pods if p["metadata"]["name"] != "train"]}))


def runfile_installer(directory: Path, version: str) -> tuple[Path, str]:
    """NVIDIA-Linux-x86_64-<version>.run as a stand-in: logs its call and leaves the library NVIDIA's installer
    leaves (the role's idempotence key). Returns its path and sha256."""
    path = directory / f"NVIDIA-Linux-x86_64-{version}.run"
    lib = f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}"
    _write(path, "#!/bin/sh\n" + _LOG.replace('$(basename "$0")', "runfile") + f"touch {lib}\n", 0o755)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def events(root: Path) -> list[tuple[float, str]]:
    """(time, what) of every line the stand-ins logged in `root`."""
    path = root / EVENTS
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        stamp, what = line.split(" ", 1)
        out.append((float(stamp), what))
    return out
