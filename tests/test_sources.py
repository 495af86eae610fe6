"""The pre-flight's `auto` against the sources a host installs from: every OS the roles provision x GPU family x
source combination gives a stack each part of which its source delivers, or one refusal naming the source switch
that would deliver one (and that switch does). The table for the default sources is written out below.
"""

from __future__ import annotations

import itertools
import re

import pytest
import yaml

from gpulab.compat import check_stack, delivery, platforms, versions
from gpulab.compat.check import Stack
from gpulab.compat.data import cudnn_wheel_pins, load_matrix
from gpulab.compat.gpus import gpu_by_pci_id
from gpulab.compat.resolve import SOURCE_VARS, Request, resolve
from playbook import REPO

PINS = cudnn_wheel_pins()
GPUS = {
    "P100": "10de:15f8",  # Pascal
    "V100": "10de:1db5",  # Volta
    "T4": "10de:1eb8",  # Turing
    "A100": "10de:20b2",  # Ampere
    "H100": "10de:2330",  # Hopper
    "H200": "10de:2335",  # Hopper, R550 and newer
    "RTX 4090": "10de:2684",  # Ada, a consumer card
    "B200": "10de:2901",  # Blackwell, open kernel modules only
}
# Each OS with the Python its python3 is (the frameworks' venv is built from it).
OSES = {
    "debian12": ("Debian", "12", "3.11"),
    "debian11": ("Debian", "11", "3.9"),
    "ubuntu24.04": ("Ubuntu", "24.04", "3.12"),
    "ubuntu22.04": ("Ubuntu", "22.04", "3.10"),
    "ubuntu20.04": ("Ubuntu", "20.04", "3.8"),
}
COMBINATIONS = [
    dict(zip(("driver", "cuda", "cudnn"), c, strict=True))
    for c in itertools.product(delivery.DRIVER_SOURCES, delivery.CUDA_SOURCES, delivery.CUDNN_SOURCES)
]
NVIDIA = {"driver": "cuda_repo", "cuda": "cuda_repo", "cudnn": "wheel"}
ARCHIVE = {"driver": "distro"}


def preflight(os_name: str, gpu: str, sources: dict[str, str] | None = None, **stack: object):
    distribution, release, python = OSES[os_name]
    req = Request(
        gpus=[{"address": "0000:01:00.0", "pci_id": GPUS[gpu]}],
        profile=str(stack.pop("profile", "auto")),
        stack=dict(stack),
        host_python=python,
        distribution=distribution,
        distribution_version=release,
        sources=sources or {},
        cudnn_wheels=PINS,
    )
    return resolve(req)


def stack_of(target: dict) -> tuple[str, str, str]:
    return target["driver"], ",".join(target["cuda"]), ",".join(v or "-" for v in target["cudnn_by_cuda"].values())


def switch_in(problem: str) -> dict[str, str]:
    """The source settings a refusal's fix names ("set nvidia_driver_source: cuda_repo and ...")."""
    names = {var: component for component, var in SOURCE_VARS.items()}
    fix = problem.split(" Fix: ", 1)[1]
    if not fix.startswith("set "):
        return {}
    return {names[v]: s for v, s in re.findall(r"(\w+_source): (\w+)", fix.split(" (", 1)[0])}


# -- the decision for the archives' sources (distro, distro, wheel; the driver's default, auto, is decided in
# tests/test_driver_source_auto.py) --------------------------------------------------------------------------------
# OS, GPU -> (driver, CUDA, cuDNN) the host gets, or (refused part, the source switch the refusal names).
DEFAULT_TABLE = {
    ("debian12", "P100"): ("535", "11.8", "9.10"),
    ("debian12", "V100"): ("535", "11.8", "9.10"),
    ("debian12", "T4"): ("535", "11.8", "9.10"),
    ("debian12", "A100"): ("535", "11.8", "9.10"),
    ("debian12", "H100"): ("535", "11.8", "9.10"),
    ("debian12", "H200"): ("driver", {"driver": "cuda_repo"}),
    ("debian12", "RTX 4090"): ("535", "11.8", "9.10"),
    ("debian12", "B200"): ("driver", {"driver": "cuda_repo", "cuda": "cuda_repo"}),
    ("debian11", "P100"): ("535", "11.2", "9.10"),
    ("debian11", "V100"): ("535", "11.2", "9.10"),
    ("debian11", "T4"): ("535", "11.2", "9.10"),
    ("debian11", "A100"): ("535", "11.2", "9.10"),
    ("debian11", "H100"): ("cuda", {"cuda": "cuda_repo"}),
    ("debian11", "H200"): ("driver", {"driver": "cuda_repo", "cuda": "cuda_repo"}),
    ("debian11", "RTX 4090"): ("cuda", {"cuda": "cuda_repo"}),
    ("debian11", "B200"): ("driver", {}),  # no source on Debian 11 has a Blackwell driver
    ("ubuntu24.04", "P100"): ("580", "12.0", "9.10"),
    ("ubuntu24.04", "V100"): ("580", "12.0", "9.10"),
    ("ubuntu24.04", "T4"): ("580", "12.0", "9.20"),
    ("ubuntu24.04", "A100"): ("580", "12.0", "9.20"),
    ("ubuntu24.04", "H100"): ("580", "12.0", "9.20"),
    ("ubuntu24.04", "H200"): ("580", "12.0", "9.20"),
    ("ubuntu24.04", "RTX 4090"): ("580", "12.0", "9.20"),
    ("ubuntu24.04", "B200"): ("cuda", {"cuda": "cuda_repo"}),
    ("ubuntu22.04", "P100"): ("580", "11.5", "9.10"),
    ("ubuntu22.04", "V100"): ("580", "11.5", "9.10"),
    ("ubuntu22.04", "T4"): ("580", "11.5", "9.10"),
    ("ubuntu22.04", "A100"): ("580", "11.5", "9.10"),
    ("ubuntu22.04", "H100"): ("cuda", {"cuda": "cuda_repo"}),
    ("ubuntu22.04", "H200"): ("cuda", {"cuda": "cuda_repo"}),
    ("ubuntu22.04", "RTX 4090"): ("cuda", {"cuda": "cuda_repo"}),
    ("ubuntu22.04", "B200"): ("cuda", {"cuda": "cuda_repo"}),
    ("ubuntu20.04", "P100"): ("cudnn", {"cuda": "cuda_repo"}),  # no cuDNN wheel exists for CUDA 10.1
    ("ubuntu20.04", "V100"): ("cudnn", {"cuda": "cuda_repo"}),
    ("ubuntu20.04", "T4"): ("cudnn", {"cuda": "cuda_repo"}),
    ("ubuntu20.04", "A100"): ("cuda", {"cuda": "cuda_repo"}),
    ("ubuntu20.04", "H100"): ("cuda", {"cuda": "cuda_repo"}),
    ("ubuntu20.04", "H200"): ("driver", {"driver": "cuda_repo", "cuda": "cuda_repo"}),
    ("ubuntu20.04", "RTX 4090"): ("cuda", {"cuda": "cuda_repo"}),
    ("ubuntu20.04", "B200"): ("driver", {"driver": "cuda_repo", "cuda": "cuda_repo"}),
}
# The same with the driver and toolkits from NVIDIA's repository (cuDNN still from the pinned wheels).
NVIDIA_TABLE = {
    **{("debian12", g): ("580.95.05", "12.9", "9.10") for g in ("P100", "V100")},
    **{("debian12", g): ("595.71.05", "13.2", "9.20") for g in ("T4", "A100", "H100", "H200", "RTX 4090", "B200")},
    **{("debian11", g): ("560.35.05", "12.6", "9.10") for g in ("P100", "V100")},
    **{("debian11", g): ("560.35.05", "12.6", "9.20") for g in ("T4", "A100", "H100", "H200", "RTX 4090")},
    ("debian11", "B200"): ("driver", {}),
    **{(o, g): ("580.95.05", "12.9", "9.10") for o in ("ubuntu24.04", "ubuntu22.04") for g in ("P100", "V100")},
    **{
        (o, g): ("595.71.05", "13.2", "9.20")
        for o in ("ubuntu24.04", "ubuntu22.04")
        for g in ("T4", "A100", "H100", "H200", "RTX 4090", "B200")
    },
    **{("ubuntu20.04", g): ("575.57.08", "12.9", "9.10") for g in ("P100", "V100")},
    **{("ubuntu20.04", g): ("575.57.08", "12.9", "9.20") for g in ("T4", "A100", "H100", "H200", "RTX 4090", "B200")},
}


@pytest.mark.parametrize(
    ("table", "sources"), [(DEFAULT_TABLE, ARCHIVE), (NVIDIA_TABLE, NVIDIA)], ids=["archive", "nvidia"]
)
def test_the_decision_table(table, sources):
    assert set(table) == set(itertools.product(OSES, GPUS))
    for (os_name, gpu), expected in table.items():
        target, problems = preflight(os_name, gpu, sources)
        if len(expected) == 3:
            assert problems == [], (os_name, gpu, problems)
            assert stack_of(target) == expected, (os_name, gpu)
            continue
        component, switch = expected
        assert len(problems) == 1 and problems[0].startswith(f"[{component}] "), (os_name, gpu, problems)
        assert switch_in(problems[0]) == switch, (os_name, gpu, problems[0])


def test_the_refusal_for_an_h200_on_debian_12_names_the_driver_source():
    _, problems = preflight("debian12", "H200", ARCHIVE)
    assert problems == [
        "[driver] Debian 12's archive has no driver for NVIDIA H200: it packages R535, R470, and NVIDIA H200 needs "
        "driver >= 550.54.14. Fix: set nvidia_driver_source: cuda_repo (NVIDIA's repository or a mirror of it), "
        "which delivers driver 595.71.05, CUDA 11.8, cuDNN 9.10."
    ]


def test_a_refusal_no_source_can_mend_says_where_it_would_work():
    _, problems = preflight("debian11", "B200", NVIDIA)
    assert problems == [
        "[driver] NVIDIA's repository for Debian 11 has no driver for NVIDIA B200: it has R495–R560, and NVIDIA B200 "
        "needs driver >= 570.133.20. Fix: no source gpulab installs from delivers a stack for these GPUs on Debian "
        "11; Debian 13, Debian 12, Ubuntu 24.04, Ubuntu 22.04, Ubuntu 20.04 would."
    ]


def test_a_missing_cudnn_wheel_is_named_with_where_to_pin_it():
    target, problems = resolve(
        Request(
            gpus=[{"address": "0000:01:00.0", "pci_id": GPUS["H200"]}],
            host_python="3.12",
            distribution="Ubuntu",
            distribution_version="24.04",
            sources=NVIDIA,
            cudnn_wheels={k: v for k, v in PINS.items() if not k.endswith("-cu13")},
        )
    )
    # Without CUDA 13 wheels the newest stack whose cuDNN is pinned is CUDA 12.9 with cuDNN 9.20.
    assert problems == [] and stack_of(target) == ("595.71.05", "12.9", "9.20")
    _, problems = resolve(
        Request(
            gpus=[{"address": "0000:01:00.0", "pci_id": GPUS["P100"]}],
            host_python="3.11",
            distribution="Debian",
            distribution_version="12",
            cudnn_wheels={},
        )
    )
    assert len(problems) == 1 and problems[0].startswith(
        "[cudnn] cudnn_wheels (the pinned cuDNN wheels) has no cuDNN for CUDA 11.8 on compute capability 6.0"
    )
    assert "pin nvidia-cudnn-cu11 9.10.x in cudnn_wheels as '9.10-cu11'" in problems[0]


# -- every combination of sources --------------------------------------------------------------------------------
def _delivers(osr, component: str, source: str, value: str, cuda: str | None = None) -> bool:
    """Independently of the planner: does this source carry this driver branch / toolkit / cuDNN?"""
    if component == "driver":
        number = versions.parse(value)[0]
        if source == "distro":
            return f"R{number}" in {p.version for p in osr.drivers}
        return any(b.number == number for b in platforms.nvidia_branches(osr))
    if component == "cuda":
        if source == "distro":
            return any(versions.compare(p.version, value) == 0 for p in osr.cuda)
        published = {"debian": "debian", "ubuntu": "ubuntu"}[osr.family]
        return any(
            versions.compare(r.version, value) == 0 and osr.release in getattr(r, published) for r in load_matrix().cuda
        )
    assert cuda is not None
    if source == "wheel":
        return f"{value}-cu{versions.major(cuda)}" in PINS
    if source == "cuda_repo":
        return any(versions.compare(r.version, cuda) == 0 for r in platforms.nvidia_cuda(osr))
    return False  # no cuDNN archive is configured


@pytest.mark.parametrize(("os_name", "gpu"), list(itertools.product(OSES, GPUS)))
def test_every_source_combination_delivers_or_names_a_switch_that_does(os_name, gpu):
    osr = platforms.operating_system(os_name)
    spec = gpu_by_pci_id(GPUS[gpu])
    assert osr is not None and spec is not None
    refusals = []
    for sources in COMBINATIONS:
        target, problems = preflight(os_name, gpu, sources)
        if problems:
            refusals.append(problems[0])
            assert len(problems) == 1, (sources, problems)
            switch = switch_in(problems[0])
            if switch:
                _, still = preflight(os_name, gpu, {**sources, **switch})
                assert still == [], (sources, problems[0], still)
            continue
        driver, cudas, cudnn_by_cuda = target["driver"], target["cuda"], target["cudnn_by_cuda"]
        assert _delivers(osr, "driver", sources["driver"], driver), (sources, target)
        assert all(_delivers(osr, "cuda", sources["cuda"], c) for c in cudas), (sources, target)
        for cuda, cudnn in cudnn_by_cuda.items():
            assert cudnn and _delivers(osr, "cudnn", sources["cudnn"], cudnn, cuda), (sources, target)
            # The newest cuDNN the matrix builds for this toolkit and GPU: no pin is missing for what auto picks.
            assert cudnn == delivery.cudnn_candidates(cuda, [spec.compute_capability])[0].version, (sources, target)
        stack = Stack(
            gpu=spec.name,
            driver=driver,
            cuda=",".join(cudas),
            cudnn=target["cudnn"],
            torch=target["torch"],
            tensorflow=target["tensorflow"],
            python=target["python"],
        )
        assert check_stack(stack) == [], (sources, target)
        # Blackwell needs the open modules; before R560 the proprietary ones are the default.
        open_wanted = spec.architecture == "Blackwell" or (
            versions.parse(driver)[0] >= 560 and spec.architecture not in ("Pascal", "Volta")
        )
        assert target["kernel_modules"] == ("open" if open_wanted else "proprietary"), (sources, target)
    # A refusal that names no switch is one no combination of sources mends.
    if any(not switch_in(refusal) for refusal in refusals):
        assert len(refusals) == len(COMBINATIONS), refusals


# -- what the sources carry, and the roles' side ----------------------------------------------------------------
def test_the_operating_systems_the_roles_provision_come_from_the_matrix():
    assert platforms.supported_releases() == {"Debian": ("11", "12", "13"), "Ubuntu": ("20.04", "22.04", "24.04")}
    debian12 = platforms.operating_system("Debian 12")
    assert debian12 is not None and debian12.os == "debian12"
    assert [b.branch for b in platforms.archive_branches(debian12)] == ["R470", "R535"]
    assert [c.version for c in platforms.archive_cuda(debian12)] == ["11.8"]
    assert platforms.branch_span(platforms.nvidia_branches(debian12)) == "R535–R595"
    assert platforms.cuda_span(platforms.nvidia_cuda(debian12)) == "12.2–13.2"
    assert platforms.os_key("Ubuntu 24.04 LTS") == "ubuntu24.04" and platforms.os_key("rhel9") is None


def test_every_pinned_cudnn_wheel_is_the_build_its_key_names():
    for key, pin in PINS.items():
        cudnn, cuda_major = re.fullmatch(r"(\d+\.\d+)-cu(\d+)", key).groups()  # type: ignore[union-attr]
        assert pin["version"].startswith(cudnn + "."), key
        assert re.fullmatch(r"[0-9a-f]{64}", pin["sha256"]), key
        name = f"nvidia_cudnn_cu{cuda_major}-{pin['version']}-py3-none-manylinux"
        assert pin["path"].startswith("packages/") and name in pin["path"] and pin["path"].endswith("x86_64.whl"), key


def test_the_preflight_reads_the_roles_sources_with_their_defaults():
    defaults = yaml.safe_load((REPO / "roles" / "gpulab_preflight" / "defaults" / "main.yml").read_text())
    roles = {
        "driver": ("nvidia_driver", "nvidia_driver_source"),
        "cuda": ("cuda_toolkit", "cuda_toolkit_source"),
        "cudnn": ("cudnn", "cudnn_source"),
    }
    for component, (role, var) in roles.items():
        role_default = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())[var]
        assert defaults["gpulab_preflight_sources"][component] == f"{{{{ {var} | default('{role_default}') }}}}"
        assert SOURCE_VARS[component] == var
    assert (
        defaults["gpulab_preflight_cudnn_wheels"]
        == "{{ cudnn_wheels | default(lookup('gpulab.provision.matrix', 'cudnn_wheels')) }}"
    )


def test_unknown_sources_are_refused_by_name():
    _, problems = preflight("debian12", "P100", {"driver": "ppa"})
    assert problems == ["[sources] nvidia_driver_source is 'ppa'. Fix: use one of auto, distro, cuda_repo, runfile."]


# -- the 2018 stack ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("os_name", list(OSES))
def test_the_legacy_profile_is_refused_on_every_provisioned_os(os_name):
    legacy = {"driver": "cuda_repo", "cuda": "cuda_repo", "cudnn": "archive"}  # what its stack would need
    _, problems = preflight(os_name, "P100", legacy, profile="legacy-2018")
    refusal = [p for p in problems if p.startswith("[profile] ")]
    assert len(refusal) == 1, problems
    assert refusal[0].startswith(
        f"[profile] legacy-2018 cannot be installed on {platforms.operating_system(os_name).name}: "
    )  # type: ignore[union-attr]
    assert "driver 410.79 (R410) is not available" in refusal[0] and "CUDA 9.0 is not available" in refusal[0]
    assert (
        "No OS gpulab provisions (Debian 13, Debian 12, Debian 11, Ubuntu 24.04, Ubuntu 22.04, Ubuntu 20.04) "
        "carries it." in (refusal[0])
    )
    assert refusal[0].endswith(
        "Fix: use gpulab_profile: auto (the newest stack this host's sources deliver); `gpulab matrix show "
        "legacy-2018` says what else runs it."
    )
    assert delivery.profile_installable_on("legacy-2018") == []
    # Overriding the parts no source carries makes it a stack like any other, checked part by part.
    archive_cuda = platforms.operating_system(os_name).cuda[0].version  # type: ignore[union-attr]
    _, problems = preflight(os_name, "P100", legacy, profile="legacy-2018", driver="535", cuda=archive_cuda)
    assert not [p for p in problems if p.startswith("[profile] ")], problems
    assert [o.os for o in delivery.profile_installable_on("modern")] == [
        "debian13",
        "debian12",
        "ubuntu24.04",
        "ubuntu22.04",
    ]
