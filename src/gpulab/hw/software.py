"""The software stack: driver, CUDA toolkits, cuDNN, NCCL, Python, frameworks and the env that steers them.

Frameworks are imported lazily and every probe is guarded: a broken torch install is a finding to report,
not a crash. TensorFlow is probed in a child process because importing it is slow and it reserves GPU
memory in the process that lists devices.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from gpulab.records import FrameworkInfo, SoftwareInfo

ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "TF_ENABLE_ONEDNN_OPTS",
    "LD_LIBRARY_PATH",
)
TF_TIMEOUT_S = 120


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def driver_from_proc(root: Path = Path("/")) -> str | None:
    """ "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release ..." -> version."""
    text = _read(root / "proc/driver/nvidia/version") or ""
    m = re.search(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    return m.group(1) if m else None


def _toolkit_version(path: Path) -> str | None:
    raw = _read(path / "version.json")
    if raw:
        try:
            data = json.loads(raw)
            version = data.get("cuda", {}).get("version")
            if isinstance(version, str):
                return version
        except (ValueError, AttributeError):
            pass
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", _read(path / "version.txt") or "")
    if m:
        return m.group(1)
    # CUDA 11.1+ dropped version.txt and some installs (pip/conda layouts) lack version.json too.
    m = re.search(r"#define CUDA_VERSION\s+(\d+)", _read(path / "include/cuda.h") or "")
    if m:
        code = int(m.group(1))
        return f"{code // 1000}.{(code % 1000) // 10}"
    m = re.fullmatch(r"cuda-(\d+\.\d+)", path.name)
    return m.group(1) if m else None


def toolkits(root: Path = Path("/")) -> list[dict[str, str]]:
    """/usr/local/cuda* (the unversioned `cuda` link reported with where it points)."""
    found = []
    for path in sorted((root / "usr/local").glob("cuda*")):
        if not path.is_dir():
            continue
        entry = {"path": "/" + str(path.relative_to(root)), "version": _toolkit_version(path) or "unknown"}
        if path.is_symlink():
            entry["target"] = os.path.realpath(path)
        found.append(entry)
    return found


def parse_nvcc_version(text: str) -> str | None:
    m = re.search(r"release (\d+\.\d+)(?:, V(\d+\.\d+\.\d+))?", text)
    if not m:
        return None
    return m.group(2) or m.group(1)


def nvcc_version(root: Path = Path("/")) -> str | None:
    candidates = [shutil.which("nvcc")] if root == Path("/") else []
    candidates.append(str(root / "usr/local/cuda/bin/nvcc"))
    for nvcc in candidates:
        if not nvcc or not Path(nvcc).exists():
            continue
        try:
            done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        version = parse_nvcc_version(done.stdout)
        if version:
            return version
    return None


def parse_cudnn_header(text: str) -> str | None:
    parts = [re.search(rf"#define CUDNN_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCHLEVEL")]
    if not all(parts):
        return None
    return ".".join(m.group(1) for m in parts if m)


def _ldconfig_libs(name: str) -> list[str]:
    """Paths of lib<name>.so.* the dynamic loader knows about."""
    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if Path("/sbin/ldconfig").exists() else None)
    if not ldconfig:
        return []
    try:
        done = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return re.findall(rf"=>\s*(\S*lib{name}\.so\.[\d.]+)", done.stdout)


def _so_version(paths: list[str], name: str) -> str | None:
    """Longest version among lib<name>.so.X.Y.Z paths, resolving links ("libnccl.so.2" -> "...2.21.5")."""
    best: str | None = None
    for p in paths:
        for candidate in (p, os.path.realpath(p)):
            m = re.search(rf"lib{name}\.so\.([\d.]+)$", candidate)
            if m and (best is None or len(m.group(1)) > len(best)):
                best = m.group(1)
    return best


def _wheel_version(prefix: str) -> str | None:
    """Version of the first installed distribution named like nvidia-cudnn-cu12 / nvidia-nccl-cu13."""
    try:
        dists = list(importlib.metadata.distributions())
    except Exception:  # a broken site-packages must not stop discovery
        return None
    for dist in dists:
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith(prefix):
            return dist.version
    return None


def cudnn_version(root: Path = Path("/"), kits: list[dict[str, str]] | None = None) -> str | None:
    includes = [root / "usr/include"] + [root / k["path"].lstrip("/") / "include" for k in kits or []]
    for inc in includes:
        version = parse_cudnn_header(_read(inc / "cudnn_version.h") or "")
        if version:
            return version
    libs = _ldconfig_libs("cudnn") if root == Path("/") else []
    for k in kits or []:
        libs += [str(p) for p in (root / k["path"].lstrip("/")).glob("lib*/libcudnn.so.*")]
    return _so_version(libs, "cudnn") or _wheel_version("nvidia-cudnn-cu")


def nccl_version(root: Path = Path("/")) -> str | None:
    libs = _ldconfig_libs("nccl") if root == Path("/") else []
    libs += [str(p) for p in (root / "usr/lib").glob("*/libnccl.so.*")]
    return _so_version(libs, "nccl") or _wheel_version("nvidia-nccl-cu")


def probe_torch() -> FrameworkInfo | None:
    if importlib.util.find_spec("torch") is None:
        return None
    from gpulab.interrupts import import_torch

    try:
        torch = import_torch()  # a Ctrl-C during torch's import would otherwise be lost
    except Exception as err:  # ImportError, or a CUDA library that fails to load
        return FrameworkInfo(name="torch", version="unknown", error=f"{type(err).__name__}: {err}")
    info = FrameworkInfo(name="torch", version=str(getattr(torch, "__version__", "unknown")))
    errors: list[str] = []
    try:
        info.built_cuda = torch.version.cuda
    except Exception as err:
        errors.append(f"torch.version.cuda: {err}")
    try:
        cudnn = torch.backends.cudnn.version()
        if cudnn:
            # 90100 -> "9.1.0"; 8906 (pre-9 scheme) -> "8.9.6"
            major, rest = divmod(int(cudnn), 10000 if cudnn >= 90000 else 1000)
            minor, patch = divmod(rest, 100)
            info.built_cudnn = f"{major}.{minor}.{patch}"
    except Exception as err:
        errors.append(f"cudnn: {err}")
    try:
        if torch.cuda.is_available():
            nccl = torch.cuda.nccl.version()
            info.nccl = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
    except Exception as err:
        errors.append(f"nccl: {err}")
    try:
        info.sees_gpus = int(torch.cuda.device_count())
    except Exception as err:
        errors.append(f"device_count: {err}")
    info.error = "; ".join(errors) or None
    return info


_TF_SCRIPT = """
import json, os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
try:
    for g in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(g, True)
except Exception:
    pass
b = tf.sysconfig.get_build_info()
print(json.dumps({"version": tf.__version__, "cuda": b.get("cuda_version"), "cudnn": b.get("cudnn_version"),
                  "gpus": len(tf.config.list_physical_devices("GPU"))}))
"""


def start_tensorflow_probe() -> subprocess.Popen[str] | FrameworkInfo | None:
    """TensorFlow's import in a process of its own, started now: it takes seconds, and the torch probe runs beside
    it (tensorflow_info() collects it). None where TensorFlow is not installed."""
    if importlib.util.find_spec("tensorflow") is None:
        return None
    try:
        return subprocess.Popen(
            [sys.executable, "-c", _TF_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    except OSError as err:
        return FrameworkInfo(name="tensorflow", version="unknown", error=str(err))


def tensorflow_info(
    started: subprocess.Popen[str] | FrameworkInfo | None, timeout_s: float = TF_TIMEOUT_S
) -> FrameworkInfo | None:
    """What the probe start_tensorflow_probe() started found (waiting at most `timeout_s` for it)."""
    if not isinstance(started, subprocess.Popen):
        return started
    try:
        stdout, stderr = started.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        started.kill()
        started.communicate()
        return FrameworkInfo(name="tensorflow", version="unknown", error=f"probe timed out after {timeout_s}s")
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if started.returncode != 0 or not lines:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return FrameworkInfo(name="tensorflow", version="unknown", error=f"import failed: {tail}")
    data = json.loads(lines[-1])
    return FrameworkInfo(
        name="tensorflow",
        version=str(data.get("version")),
        built_cuda=data.get("cuda"),
        built_cudnn=data.get("cudnn"),
        sees_gpus=data.get("gpus"),
    )


def probe_tensorflow(timeout_s: float = TF_TIMEOUT_S) -> FrameworkInfo | None:
    return tensorflow_info(start_tensorflow_probe(), timeout_s)


def relevant_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    return {k: v for k, v in sorted(env.items()) if k in ENV_KEYS or k.startswith("NCCL_")}


def software_info(
    *,
    driver_version: str | None = None,
    cuda_driver_version: str | None = None,
    probe_frameworks: bool = True,
    root: Path = Path("/"),
) -> SoftwareInfo:
    kits = toolkits(root)
    sw = SoftwareInfo(
        driver_version=driver_version or driver_from_proc(root),
        cuda_driver_version=cuda_driver_version,
        toolkits=kits,
        nvcc_version=nvcc_version(root),
        cudnn_version=cudnn_version(root, kits),
        nccl_version=nccl_version(root),
        python=sys.version.split()[0],
        env=relevant_env(),
    )
    if probe_frameworks:
        tensorflow = start_tensorflow_probe()  # its import runs while torch's does
        try:
            torch = probe_torch()
        except BaseException:  # Ctrl-C while torch imports: the TensorFlow probe goes too
            if isinstance(tensorflow, subprocess.Popen):
                tensorflow.kill()
                tensorflow.communicate()
            raise
        frameworks = [found for found in (torch, tensorflow_info(tensorflow)) if found is not None]
        sw.frameworks = frameworks
        torch_nccl = next((f.nccl for f in frameworks if f.name == "torch" and f.nccl), None)
        sw.nccl_version = sw.nccl_version or torch_nccl
    return sw
