"""The GPU-in-container check (gpulab.checks.containers) against fake `docker`, `podman` and `nvidia-ctk` executables.

No container can run on the CI machine (no GPU, no container daemon), so that boundary is faked: small shell
scripts on a PATH of the test's own answer as the real tools would, with the UUIDs and names of a real 4x H200
capture (tests/fixtures/h200x4-firecracker). Everything else is real: the subprocess, its timeout, PATH lookup and
the parsing of nvidia-smi's CSV.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from gpulab.checks import containers
from gpulab.hw.smi.xml import parse_smi_xml
from gpulab.records import GpuInfo

CAPTURE = Path(__file__).parent / "fixtures" / "h200x4-firecracker" / "nvidia-smi-q-x.xml"


@pytest.fixture(scope="module")
def h200() -> list[GpuInfo]:
    return parse_smi_xml(CAPTURE)[2]


def csv(gpus: list[GpuInfo]) -> str:
    return "".join(f"{g.uuid}, {g.name}\n" for g in gpus)


@pytest.fixture
def bin_dir(tmp_path, monkeypatch) -> Path:
    """A directory that is the whole PATH: only the fakes a test puts there exist."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    return path


def fake(bin_dir: Path, name: str, stdout: str = "", stderr: str = "", rc: int = 0, sleep: float = 0) -> Path:
    """An executable `name` that records its arguments in <name>.args and answers with stdout, stderr and rc."""
    (bin_dir / f"{name}.out").write_text(stdout)
    (bin_dir / f"{name}.err").write_text(stderr)
    script = bin_dir / name
    args = shlex.quote(str(bin_dir / f"{name}.args"))
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {args}\n'
        + (f"/bin/sleep {sleep}\n" if sleep else "")
        + f"/bin/cat {shlex.quote(str(bin_dir / f'{name}.out'))}\n"
        f"/bin/cat {shlex.quote(str(bin_dir / f'{name}.err'))} >&2\n"
        f"exit {rc}\n"
    )
    script.chmod(0o755)
    return script


def args_of(bin_dir: Path, name: str) -> list[str]:
    return (bin_dir / f"{name}.args").read_text().splitlines()


def test_docker_seeing_every_host_gpu_passes(bin_dir, h200):
    fake(bin_dir, "nvidia-ctk")
    fake(bin_dir, "docker", stdout=csv(h200))
    check = containers.gpu_in_container(h200)
    assert check.status == "pass", check.message
    assert check.message == (f"a docker container ({containers.DEFAULT_IMAGE}) sees all 4 GPUs of the host, same UUIDs")
    assert args_of(bin_dir, "docker") == [
        "run",
        "--rm",
        "--gpus",
        "all",
        containers.DEFAULT_IMAGE,
        "nvidia-smi",
        "--query-gpu=uuid,name",
        "--format=csv,noheader",
    ]
    assert check.evidence["container"] == {g.uuid: "NVIDIA H200" for g in h200}


def test_podman_uses_the_cdi_device_and_the_image_given(bin_dir, h200):
    fake(bin_dir, "nvidia-ctk")
    fake(bin_dir, "podman", stdout=csv(h200))
    check = containers.gpu_in_container(h200, image="localhost/cuda-base:12")
    assert check.status == "pass", check.message
    called = args_of(bin_dir, "podman")
    assert called[:5] == ["run", "--rm", "--device", "nvidia.com/gpu=all", "--security-opt=label=disable"]
    assert called[5] == "localhost/cuda-base:12"


def test_a_gpu_missing_inside_the_container_fails_naming_it(bin_dir, h200):
    fake(bin_dir, "nvidia-ctk")
    fake(bin_dir, "docker", stdout=csv(h200[:3]))
    check = containers.gpu_in_container(h200)
    assert check.status == "fail"
    assert "a docker container sees 3 of the host's 4 GPUs" in check.message
    assert f"missing inside the container: {h200[3].uuid} (NVIDIA H200)" in check.message
    assert "docker info | grep -i runtimes" in check.message


def test_a_uuid_the_host_does_not_have_fails_naming_it(bin_dir, h200):
    other = "GPU-00000000-1111-2222-3333-444444444444"
    fake(bin_dir, "nvidia-ctk")
    fake(bin_dir, "docker", stdout=csv(h200[1:]) + f"{other}, NVIDIA H200\n")
    check = containers.gpu_in_container(h200)
    assert check.status == "fail"
    assert f"missing inside the container: {h200[0].uuid} (NVIDIA H200)" in check.message
    assert f"not GPUs of this host: {other} (NVIDIA H200)" in check.message


def test_a_failing_container_run_fails_with_its_stderr_and_the_fix(bin_dir, h200):
    stderr = (
        "Unable to find image 'debian:12-slim' locally\n"
        'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].\n'
    )
    fake(bin_dir, "nvidia-ctk")
    fake(bin_dir, "docker", stderr=stderr, rc=125)
    check = containers.gpu_in_container(h200)
    assert check.status == "fail"
    assert check.message.startswith(f"`docker run --rm --gpus all {containers.DEFAULT_IMAGE} nvidia-smi")
    assert "exited 125: Unable to find image 'debian:12-slim' locally | docker: Error response" in check.message
    assert "gpulab_containers: true" in check.message
    assert check.evidence["stderr"] == stderr


def test_podman_without_a_cdi_spec_names_the_spec_fix(bin_dir, h200):
    fake(bin_dir, "nvidia-ctk")
    fake(bin_dir, "podman", stderr="Error: unresolvable CDI devices nvidia.com/gpu=all\n", rc=126)
    check = containers.gpu_in_container(h200, requested="podman")
    assert check.status == "fail"
    assert "exited 126: Error: unresolvable CDI devices nvidia.com/gpu=all" in check.message
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in check.message


def test_a_hanging_container_run_is_stopped_by_the_timeout(bin_dir, h200):
    fake(bin_dir, "nvidia-ctk")
    fake(bin_dir, "docker", stdout=csv(h200), sleep=5)
    check = containers.gpu_in_container(h200, timeout_s=0.5)
    assert check.status == "fail"
    assert "did not finish in 0.5 s: pull the image beforehand (`docker pull" in check.message


@pytest.mark.parametrize(
    ("tools", "missing"),
    [
        ((), "the NVIDIA container toolkit (nvidia-ctk) and docker or podman not on PATH"),
        (("docker",), "the NVIDIA container toolkit (nvidia-ctk) not on PATH"),
        (("nvidia-ctk",), "docker or podman not on PATH"),
    ],
)
def test_absent_tools_skip_with_one_line(bin_dir, h200, tools, missing):
    for tool in tools:
        fake(bin_dir, tool)
    check = containers.gpu_in_container(h200)
    assert check.status == "skip"
    assert check.message == (
        f"no GPU-in-container check: {missing}: set gpulab_containers: true in the inventory and provision "
        "(ansible-playbook site.yml), or pass --container-runtime none"
    )
    assert "\n" not in check.message
    assert not (bin_dir / "docker.args").exists()  # nothing ran


def test_auto_prefers_docker_and_falls_back_to_podman(bin_dir, h200):
    fake(bin_dir, "nvidia-ctk")
    fake(bin_dir, "podman", stdout=csv(h200))
    assert containers.detect("auto").runtime == "podman"
    fake(bin_dir, "docker", stdout=csv(h200))
    assert containers.detect("auto").runtime == "docker"
    assert containers.gpu_in_container(h200).evidence["runtime"] == "docker"


def test_a_runtime_named_explicitly_runs_without_nvidia_ctk_and_fails_when_absent(bin_dir, h200):
    fake(bin_dir, "podman", stdout=csv(h200))
    assert containers.gpu_in_container(h200, requested="podman").status == "pass"
    check = containers.gpu_in_container(h200, requested="docker")
    assert check.status == "fail"
    assert check.message == (
        "docker is not on PATH (--container-runtime docker): install it, or choose another --container-runtime"
    )


def test_none_turns_the_check_off(bin_dir, h200):
    fake(bin_dir, "nvidia-ctk")
    fake(bin_dir, "docker", stdout=csv(h200))
    check = containers.gpu_in_container(h200, requested="none")
    assert check.status == "skip"
    assert check.message == "no GPU-in-container check: the container check is off (--container-runtime none)"
    assert not (bin_dir / "docker.args").exists()


def test_an_unknown_runtime_is_refused():
    with pytest.raises(ValueError, match="--container-runtime 'lxc': use one of auto, docker, podman, none"):
        containers.detect("lxc")


def test_parse_reads_nvidia_smis_csv_and_ignores_noise():
    text = "GPU-80f06605-83de-40d0-a702-4d4f54437f6f, NVIDIA H200\n\nWARNING: something\nNo devices were found\n"
    assert containers.parse(text) == [("GPU-80f06605-83de-40d0-a702-4d4f54437f6f", "NVIDIA H200")]
