"""check_stack, plan_stack and the named profiles."""

from __future__ import annotations

import pytest

from gpulab.compat import Incompatibility, Stack, all_gpus, check_stack, plan_stack, profile, selected_torch_build
from gpulab.errors import GpulabError


def _components(problems: list[Incompatibility]) -> list[str]:
    return [p.component for p in problems]


def _only(problems: list[Incompatibility], component: str) -> Incompatibility:
    found = [p for p in problems if p.component == component]
    assert len(found) == 1, problems
    return found[0]


def test_p100_cuda13_refused_with_reason_and_fix():
    problems = check_stack(Stack(gpu="Tesla P100-PCIE-16GB", driver="580.95.05", cuda="13.0"))
    problem = _only(problems, "cuda")
    assert "13.0" in problem.reason and "6.0" in problem.reason and "P100" in problem.reason
    assert "12.9" in problem.fix
    assert "driver" not in _components(problems)  # 580.95.05 meets CUDA 13.0 (>= 580.65.06)


@pytest.mark.parametrize("driver", ["590.44.01", "590.48.01", "595.71.05", "R590"])
def test_gtx_1080_ti_refused_after_r580(driver):
    problem = _only(check_stack(Stack(gpu="GTX 1080 Ti", driver=driver)), "driver")
    assert "Pascal" in problem.reason and "R580" in problem.reason
    assert "R580" in problem.fix and "580." in problem.fix


def test_p100_any_branch_after_r580_refused_but_r580_ok():
    assert check_stack(Stack(gpu="P100", driver="580.95.05")) == []
    assert _components(check_stack(Stack(gpu="10de:15f8", driver="595.71.05"))) == ["driver"]


def test_h200_r580_cuda13_torch_2_11_ok():
    stack = Stack(gpu="NVIDIA H200", driver="580.159.04", cuda="13.0", torch="2.11")
    assert check_stack(stack) == []
    build = selected_torch_build(stack)
    assert build is not None and build.tag == "cu130"
    assert build.index_url == "https://download.pytorch.org/whl/cu130"


def test_driver_too_old_for_cuda():
    problem = _only(check_stack(Stack(gpu="H200", driver="550.54.14", cuda="12.8")), "driver")
    assert "550.54.14" in problem.reason and "12.8" in problem.reason
    assert "570.26" in problem.fix and "R570" in problem.fix


def test_driver_too_old_without_gpu():
    problem = _only(check_stack(Stack(driver="575.57.08", cuda="13.0")), "driver")
    assert problem.fix.startswith("install driver >= 580.65.06 (R580)")


def test_torch_cu128_on_p100_refused_with_cu126_fix():
    stack = Stack(gpu="Tesla P100-PCIE-16GB", driver="580.95.05", cuda="12.9", torch="2.9+cu128")
    problem = _only(check_stack(stack), "torch")
    assert "cu128" in problem.reason and "6.0" in problem.reason
    assert "cu126 build of torch 2.9" in problem.fix
    assert "https://download.pytorch.org/whl/cu126" in problem.fix


@pytest.mark.parametrize("tag", ["cu128", "cu130"])
def test_torch_2_10_newer_builds_refused_on_p100(tag):
    problem = _only(check_stack(Stack(gpu="P100", torch=f"2.10.0+{tag}")), "torch")
    assert "https://download.pytorch.org/whl/cu126" in problem.fix


def test_torch_without_build_tag_picks_the_cu126_build_for_p100():
    stack = Stack(gpu="P100", driver="580.95.05", cuda="12.9", torch="2.9")
    assert check_stack(stack) == []
    build = selected_torch_build(stack)
    assert build is not None and build.tag == "cu126"


def test_torch_on_p100_with_cuda13_explains_both():
    problems = check_stack(Stack(gpu="P100", driver="580.95.05", cuda="13.0", torch="2.9"))
    assert set(_components(problems)) == {"cuda", "torch"}
    assert "cu126" in _only(problems, "torch").fix


def test_torch_build_tag_not_offered():
    problem = _only(check_stack(Stack(torch="2.9+cu121")), "torch")
    assert "no cu121 build" in problem.reason and "cu126" in problem.fix


def test_torch_cuda_major_mismatch():
    problem = _only(check_stack(Stack(gpu="H100", cuda="13.0", torch="2.5")), "torch")
    assert "CUDA 13.x" in problem.reason and "torch 2.13" in problem.fix


def test_torch_wheel_needs_newer_driver():
    problem = _only(check_stack(Stack(gpu="H100", driver="575.57.08", torch="2.11+cu130")), "torch")
    assert "580" in problem.fix


def test_python_unsupported():
    problem = _only(check_stack(Stack(torch="2.9", python="3.9")), "python")
    assert "3.10–3.14" in problem.reason and "3.9" in problem.reason


def test_cudnn_not_built_for_cuda_or_arch():
    problem = _only(check_stack(Stack(cuda="12.9", cudnn="8.6")), "cudnn")
    assert "not built for CUDA 12.9" in problem.reason and "cuDNN 9.20" in problem.fix
    problem = _only(check_stack(Stack(gpu="P100", cuda="12.9", cudnn="9.17")), "cudnn")
    assert "6.0" in problem.reason and "cuDNN 9.10" in problem.fix
    problem = _only(check_stack(Stack(gpu="B200", cuda="12.6", cudnn="9.10")), "cudnn")
    assert problem.fix  # Blackwell needs a CUDA 12.8+ build


def test_tensorflow_checks():
    # TF 2.20 is built with CUDA 12.5, which cannot target Blackwell.
    problem = _only(check_stack(Stack(gpu="B200", tensorflow="2.20")), "tensorflow")
    assert "10.0" in problem.reason
    # TF 1.12 needs the CUDA 9.0 libraries and cuDNN 7.
    problems = check_stack(Stack(gpu="P100", driver="410.79", cuda="10.0", cudnn="8.0", tensorflow="1.12"))
    reasons = " ".join(p.reason for p in problems if p.component == "tensorflow")
    assert "CUDA 9.0" in reasons and "cuDNN 7" in reasons
    # [and-cuda] releases ignore the system toolkit.
    assert check_stack(Stack(gpu="H200", driver="580.95.05", cuda="13.0", tensorflow="2.20", python="3.12")) == []
    assert _components(check_stack(Stack(tensorflow="2.20", python="3.14"))) == ["python"]


def test_os_checked_for_ubuntu_and_the_debian_releases_gpulab_provisions():
    problem = _only(check_stack(Stack(cuda="9.0", os="ubuntu18.04")), "os")
    assert "18.04" in problem.reason and "16.04" in problem.fix
    assert check_stack(Stack(cuda="13.0", os="Ubuntu 24.04")) == []
    assert check_stack(Stack(cuda="13.0", os="rhel9")) == []
    # On an OS gpulab provisions, any source it installs from counts: Debian's own 11.8, NVIDIA's 12.2 and newer.
    assert check_stack(Stack(driver="535", cuda="11.8", os="debian12")) == []
    assert check_stack(Stack(driver="580.95.05", cuda="12.9", os="debian12")) == []
    assert check_stack(Stack(cuda="11.5", os="ubuntu22.04")) == []  # Ubuntu's archive, not NVIDIA's
    problem = _only(check_stack(Stack(cuda="10.0", os="debian12")), "os")
    assert problem.reason.startswith("CUDA 10.0 is not available on Debian 12")
    problem = _only(check_stack(Stack(driver="410.79", os="debian12")), "os")
    assert problem.reason.startswith("driver 410.79 (R410) is not available on Debian 12")


def test_a_gpu_newer_than_its_architectures_first_driver_needs_its_own():
    problem = _only(check_stack(Stack(gpu="H200", driver="535.309.01")), "driver")
    assert problem.reason == "driver 535.309.01 (R535) predates NVIDIA H200, which needs driver >= 550.54.14."
    assert check_stack(Stack(gpu="H100", driver="535")) == []
    assert check_stack(Stack(gpu="H200", driver="550")) == []


@pytest.mark.parametrize(
    ("stack", "component", "text"),
    [
        (Stack(gpu="Radeon VII"), "gpu", "Known GPUs"),
        (Stack(driver="latest"), "driver", "not a driver branch or version"),
        (Stack(driver="340.108"), "driver", "predates"),
        (Stack(cuda="12.7"), "cuda", "known: 9.0"),
        (Stack(cudnn="7.1"), "cudnn", "known: 7.6"),
        (Stack(torch="3.1"), "torch", "known: 1.13"),
        (Stack(tensorflow="3.0"), "tensorflow", "known: 1.12"),
        (Stack(python="three"), "python", "not a version"),
    ],
)
def test_unknown_versions_are_incompatibilities(stack, component, text):
    problem = _only(check_stack(stack), component)
    assert text in problem.reason
    assert problem.fix


def test_every_problem_is_reported_not_just_the_first():
    stack = Stack(gpu="P100", driver="590.48.01", cuda="13.0", cudnn="9.17", torch="2.9+cu130", python="3.9")
    assert set(_components(check_stack(stack))) == {"driver", "cuda", "cudnn", "torch", "python"}


def test_empty_stack_is_ok():
    assert check_stack(Stack()) == []


@pytest.mark.parametrize("gpu", [g.name for g in all_gpus()])
def test_plan_passes_its_own_check(gpu):
    stack = plan_stack(gpu)
    assert check_stack(stack) == [], stack
    assert stack.gpu == gpu and stack.driver and stack.cuda and stack.cudnn and stack.torch


def test_plan_for_p100():
    stack = plan_stack("P100")
    assert stack.driver is not None and stack.driver.startswith("580.")
    assert stack.cuda == "12.9"
    assert stack.cudnn == "9.10"
    assert stack.torch is not None and stack.torch.endswith("+cu126")
    assert stack.tensorflow == "2.21"  # the newest TensorFlow the matrix knows
    build = selected_torch_build(stack)
    assert build is not None and build.index_url == "https://download.pytorch.org/whl/cu126"


def test_plan_for_h200_uses_stable_cuda13_build():
    stack = plan_stack("10de:2335")
    assert stack.cuda is not None and stack.cuda.startswith("13.")
    assert stack.torch is not None and stack.torch.endswith("+cu130")


@pytest.mark.parametrize("os_name", ["ubuntu18.04", "ubuntu20.04", "ubuntu22.04"])
def test_plan_respects_os(os_name):
    stack = plan_stack("V100", os=os_name)
    assert stack.os == os_name
    assert check_stack(stack) == [], stack


def test_plan_unknown_gpu():
    with pytest.raises(GpulabError, match="not in the compatibility matrix"):
        plan_stack("Radeon VII")


def test_plan_impossible_os():
    with pytest.raises(GpulabError, match="no CUDA release"):
        plan_stack("H200", os="ubuntu16.04")


def test_legacy_profile_passes_check():
    stack = profile("legacy-2018")
    assert stack.driver is not None and stack.driver.startswith("410.")
    assert stack.cuda_list() == ["9.0", "10.0"]
    assert (stack.cudnn, stack.tensorflow) == ("7.6", "1.12")
    assert check_stack(stack) == []


def test_modern_profile_passes_check():
    assert check_stack(profile("modern")) == []


def test_unknown_profile_lists_known():
    with pytest.raises(GpulabError, match="legacy-2018, modern"):
        profile("bleeding-edge")


def test_stack_override_and_str():
    stack = profile("legacy-2018").override(os="ubuntu18.04", torch=None)
    assert stack.os == "ubuntu18.04" and stack.torch is None
    problem = Incompatibility("driver", "too old.", "upgrade.")
    assert str(problem) == "[driver] too old. Fix: upgrade."
