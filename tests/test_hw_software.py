"""Software-stack discovery on fake trees and the real /proc/driver/nvidia/version capture."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gpulab.hw import software

FIX = Path(__file__).parent / "fixtures" / "h200x4-firecracker"


def test_driver_from_proc_capture(tmp_path):
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    shutil.copy(FIX / "proc-driver-nvidia-version.txt", tmp_path / "proc/driver/nvidia/version")
    assert software.driver_from_proc(tmp_path) == "580.159.04"
    assert software.driver_from_proc(tmp_path / "nowhere") is None


def test_toolkits_and_cudnn_header(tmp_path):
    kit = tmp_path / "usr/local/cuda-12.4"
    (kit / "include").mkdir(parents=True)
    (kit / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}))
    (kit / "include/cudnn_version.h").write_text(
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 0\n"
    )
    old = tmp_path / "usr/local/cuda-11.8/include"
    old.mkdir(parents=True)
    (old / "cuda.h").write_text("#define CUDA_VERSION 11080\n")
    (tmp_path / "usr/local/cuda").symlink_to(kit)
    kits = software.toolkits(tmp_path)
    assert [(k["path"], k["version"]) for k in kits] == [
        ("/usr/local/cuda", "12.4.1"),
        ("/usr/local/cuda-11.8", "11.8"),
        ("/usr/local/cuda-12.4", "12.4.1"),
    ]
    assert kits[0]["target"].endswith("cuda-12.4")
    assert software.cudnn_version(tmp_path, kits) == "9.1.0"


def test_parsers():
    nvcc = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
    assert software.parse_nvcc_version(nvcc) == "13.0.88"
    assert software.parse_nvcc_version("garbage") is None
    assert software.parse_cudnn_header("#define CUDNN_MAJOR 8\n") is None


def test_env_filter():
    env = {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "NVIDIA_TF32_OVERRIDE": "0",
        "HOME": "/root",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    }
    assert software.relevant_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "NCCL_DEBUG": "INFO",
        "NVIDIA_TF32_OVERRIDE": "0",
    }


def test_torch_probe_is_guarded():
    info = software.probe_torch()
    if info is None:  # torch not installed here
        return
    assert info.name == "torch" and info.version
    assert info.sees_gpus is not None or info.error


def test_software_info_without_frameworks(tmp_path):
    sw = software.software_info(driver_version="580.159.04", probe_frameworks=False, root=tmp_path)
    assert sw.driver_version == "580.159.04"
    assert sw.frameworks == []
    assert sw.python
