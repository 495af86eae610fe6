"""gpulab.compat.resolve (the pre-flight's decision) called directly, `gpulab matrix resolve` on the command line,
and the one list of operating systems the roles' metadata must repeat."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from gpulab.compat import delivery, platforms
from gpulab.compat.data import cudnn_wheel_pins
from gpulab.compat.resolve import DEFAULT_SOURCES, SOURCE_VARS, Request, Resolution, resolve, summary
from playbook import REPO

PINS = cudnn_wheel_pins()
NVIDIA = {"driver": "cuda_repo", "cuda": "cuda_repo", "cudnn": "wheel"}
ARCHIVE = {**DEFAULT_SOURCES, "driver": "distro"}  # the driver's default, auto, is decided in test_driver_source_auto
GPUS = {"P100": "10de:15f8", "V100": "10de:1db5", "A100": "10de:20b2", "H200": "10de:2335", "B200": "10de:2901"}


def host(
    *names: str, os: str = "debian12", sources: dict[str, str] | None = None, profile: str = "auto", **stack: str
) -> Resolution:
    osr = platforms.operating_system(os)
    assert osr is not None
    return resolve(
        Request(
            gpus=[{"address": f"0000:0{i}:00.0", "pci_id": GPUS[n]} for i, n in enumerate(names)],
            profile=profile,
            stack=dict(stack),
            host_python="3.11",
            distribution=osr.family.capitalize(),
            distribution_version=osr.release,
            sources=sources or dict(DEFAULT_SOURCES),
            cudnn_wheels=PINS,
        )
    )


# -- the decision, by GPU generation and OS ---------------------------------------------------------------------
def test_a_pascal_gpu_on_debian_12_gets_the_archives_stack():
    res = host("P100", sources=ARCHIVE)
    assert res.ok and res.problems == []
    target = res.target
    assert (target["driver"], target["kernel_modules"], target["cuda"]) == ("535", "proprietary", ["11.8"])
    assert target["cudnn_by_cuda"] == {"11.8": "9.10"} and target["os"] == "debian12"
    assert target["gpus"][0]["architecture"] == "Pascal"
    assert summary(target).startswith("1x Tesla P100-PCIE-16GB; profile auto: driver=535, kernel_modules=proprietary")


def test_the_result_unpacks_as_target_and_problems():
    target, problems = host("V100")
    assert problems == [] and target["gpus"][0]["architecture"] == "Volta"


@pytest.mark.parametrize("os_name", ["debian12", "ubuntu24.04", "ubuntu22.04"])
def test_a_hopper_gpu_from_nvidias_repository_gets_open_modules_and_cuda_12_or_newer(os_name):
    target, problems = host("H200", os=os_name, sources=NVIDIA)
    assert problems == [], problems
    assert target["kernel_modules"] == "open"
    assert int(target["cuda"][0].split(".")[0]) >= 12
    assert target["driver_branch"] is not None and int(target["driver_branch"]) >= 550
    assert target["sources"] == NVIDIA


def test_a_hopper_gpu_from_debians_archive_is_refused_naming_the_source_to_switch_to():
    target, problems = host("H200", sources=ARCHIVE)
    assert len(problems) == 1 and problems[0].startswith("[driver] ")
    assert "nvidia_driver_source: cuda_repo" in problems[0]
    assert target["driver_branch"] is None  # not meaningful when refused


def test_mixed_generations_are_planned_for_every_gpu():
    target, problems = host("P100", "A100", os="ubuntu22.04", sources=NVIDIA)
    assert problems == [], problems
    assert [g["architecture"] for g in target["gpus"]] == ["Pascal", "Ampere"]
    assert target["kernel_modules"] == "proprietary"  # the open modules do not drive Pascal


def test_blackwell_with_proprietary_modules_is_refused():
    _, problems = host("B200", os="ubuntu24.04", sources=NVIDIA, kernel_modules="proprietary")
    assert "[kernel_modules] NVIDIA B200 are driven only by the open kernel modules." in problems[0]


def test_an_os_the_roles_do_not_provision_is_refused():
    _, problems = resolve(
        Request(gpus=[{"pci_id": GPUS["P100"]}], distribution="Debian", distribution_version="10", cudnn_wheels=PINS)
    )
    assert problems[0] == "[os] Debian 10 is not a release the roles support (11, 12, 13). Fix: use Debian 13."
    _, problems = resolve(Request(gpus=[], distribution="Fedora", distribution_version="40"))
    assert problems == [
        "[os] Fedora 40 is not supported by gpulab's provisioning roles. Fix: use Debian 11/12/13 or "
        "Ubuntu 20.04/22.04/24.04."
    ]


def test_a_named_profile_and_overrides_are_checked():
    _, problems = host("P100", profile="modern", sources=NVIDIA)
    assert problems and any(p.startswith("[") for p in problems)
    _, problems = host("P100", profile="nope")
    assert problems[0].startswith("[profile] unknown profile 'nope'")
    _, problems = host("P100", profile="none")
    assert problems[0].startswith("[driver] this host has 1 NVIDIA GPU(s) but no driver version was requested.")


def test_a_host_without_gpus_gets_nothing():
    target, problems = host()
    assert problems == [] and target["has_gpu"] is False and target["driver"] is None
    assert summary(target) == "no NVIDIA GPU; profile auto: python=3.11"


# -- the one list of operating systems --------------------------------------------------------------------------
ROLES = sorted(p.parent.parent.name for p in (REPO / "roles").glob("*/meta/main.yml"))


def test_the_supported_releases_come_from_the_matrix():
    assert platforms.supported_releases() == {"Debian": ("11", "12", "13"), "Ubuntu": ("20.04", "22.04", "24.04")}
    assert {o.os for o in platforms.provisioned()} == {
        f"{family.lower()}{release}"
        for family, releases in platforms.supported_releases().items()
        for release in releases
    }


@pytest.mark.parametrize("role", ROLES)
def test_every_roles_metadata_lists_the_matrixs_operating_systems(role):
    meta = yaml.safe_load((REPO / "roles" / role / "meta" / "main.yml").read_text())
    assert meta["galaxy_info"]["platforms"] == platforms.galaxy_platforms()


def test_the_roles_source_choices_are_the_packages():
    for component, var in SOURCE_VARS.items():
        role = {"driver": "nvidia_driver", "cuda": "cuda_toolkit", "cudnn": "cudnn"}[component]
        spec = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
        auto = {"auto"} if component == "driver" else set()
        assert set(spec["argument_specs"]["main"]["options"][var]["choices"]) == set(delivery.CHOICES[component]) | auto
    spec = yaml.safe_load((REPO / "roles" / "gpulab_preflight" / "meta" / "argument_specs.yml").read_text())
    options = spec["argument_specs"]["main"]["options"]["gpulab_preflight_sources"]["options"]
    expected = {c: set(v) | ({"auto"} if c == "driver" else set()) for c, v in delivery.CHOICES.items()}
    assert {c: set(o["choices"]) for c, o in options.items()} == expected


# -- gpulab matrix resolve ----------------------------------------------------------------------------------------
def gpulab(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulab", "matrix", "resolve", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_resolves_a_host_as_json():
    proc = gpulab(
        "--gpu", "P100", "--gpu", "10de:15f8", "--os", "debian12", "--host-python", "3.11", "--driver-source", "distro",
        "--vars", str(REPO / "inventory" / "group_vars" / "all.yml"), "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is True and out["problems"] == []
    expected, _ = host("P100", "P100", sources=ARCHIVE)
    assert {k: v for k, v in out["target"].items() if k != "gpus"} == {k: v for k, v in expected.items() if k != "gpus"}
    assert [g["pci_id"] for g in out["target"]["gpus"]] == ["10de:15f8", "10de:15f8"]
    assert out["summary"].startswith("2x Tesla P100-PCIE-16GB; profile auto: driver=535")


def test_cli_refusal_exits_1_listing_the_problems():
    archive = ("--driver-source", "distro")  # Debian's archive has no driver for an H200
    proc = gpulab("--gpu", "H200", "--os", "debian12", *archive, "--cudnn-wheel", "9.10-cu12", "--json")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["ok"] is False and out["summary"] is None
    assert out["problems"][0].startswith("[driver] ")
    text = gpulab("--gpu", "H200", "--os", "debian12", *archive)
    assert text.returncode == 1 and text.stdout.startswith("REFUSED: ") and "  fix: set " in text.stdout


def test_cli_options_reach_the_resolution():
    proc = gpulab(
        "--gpu", "H200", "--os", "ubuntu24.04", "--driver-source", "cuda_repo", "--cuda-source", "cuda_repo",
        "--cudnn-source", "cuda_repo", "--cuda", "12.8", "--python", "3.12",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("OK: 1x NVIDIA H200; profile auto: ")
    assert "  cuda        12.8\n" in proc.stdout and "  python      3.12\n" in proc.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu", "Radeon VII", "--os", "debian12"], "GPU 'Radeon VII' is not in the compatibility matrix."),
        (["--gpu", "P100", "--os", "debian10"], "--os 'debian10' is not an OS gpulab provisions; pass one of"),
        (["--gpu", "P100", "--os", "debian12", "--profile", "nope"], "--profile 'nope' is not a profile"),
        (["--gpu", "P100", "--os", "debian12", "--cuda", "twelve"], "--cuda 'twelve' is not a CUDA version"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv, message):
    proc = gpulab(*argv)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("gpulab: error: ") and message in proc.stderr
    assert proc.stderr.count("\n") == 1


# -- the collection's adapters ----------------------------------------------------------------------------------
def test_the_adapters_say_in_one_line_when_the_controller_lacks_gpulab():
    """In a child process (ansible patches the interpreter it is imported into), with gpulab made unimportable."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(REPO / 'collections')!r})\n"
        "sys.modules['gpulab'] = None\n"
        "from ansible.errors import AnsibleActionFail\n"
        "from ansible_collections.gpulab.provision.plugins.plugin_utils.controller import gpulab_required\n"
        "try:\n"
        "    with gpulab_required(AnsibleActionFail):\n"
        "        from gpulab.compat.resolve import resolve\n"
        "except AnsibleActionFail as err:\n"
        "    print(err.message)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("cannot import gpulab on the controller (No module named 'gpulab.compat'")
    assert proc.stdout.rstrip().endswith(
        "run ansible-playbook from gpulab's virtual environment (pip install gpulab; ./bootstrap.sh sets it up)."
    )
    assert proc.stdout.count("\n") == 1


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_cli_refuses_a_vars_file_that_is_a_device_or_a_pipe_without_waiting(tmp_path, special):
    path = special
    if special == "fifo":
        path = str(tmp_path / "vars.yml")
        os.mkfifo(path)
    started = time.monotonic()
    proc = gpulab("--gpu", "P100", "--os", "debian12", "--vars", path)
    assert proc.returncode == 2 and proc.stderr.startswith(f"gpulab: error: --vars {path} is a ")
    assert time.monotonic() - started < 60
