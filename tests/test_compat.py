"""The matrix data file and the single-fact lookups over it."""

from __future__ import annotations

import pytest
import yaml

from gpulab.compat import (
    all_gpus,
    cuda_supports_cc,
    driver_branch,
    driver_supports_arch,
    gpu_by_name,
    gpu_by_pci_id,
    max_cuda_for_driver,
    min_driver_for_cuda,
    resolve_gpu,
)
from gpulab.compat.data import load_matrix, load_raw, parse_matrix
from gpulab.errors import GpulabError
from gpulab.names import Architecture

SECTIONS = ("gpus", "cuda", "drivers", "cudnn", "profiles", "operating_systems")


def _entries(raw):
    for name in SECTIONS:
        for entry in raw[name]:
            yield name, entry
    for name in ("torch", "tensorflow"):
        for entry in raw["frameworks"][name]:
            yield f"frameworks.{name}", entry


def test_matrix_loads_with_every_section():
    matrix = load_matrix()
    assert len(matrix.gpus) >= 20
    assert {c.version for c in matrix.cuda} >= {"9.0", "10.0", "11.8", "12.6", "12.9", "13.0"}
    assert {d.branch for d in matrix.drivers} >= {"R410", "R535", "R570", "R580", "R590"}
    assert {c.version for c in matrix.cudnn} >= {"7.6", "8.9", "9.10"}
    assert {t.version for t in matrix.torch} >= {"2.0", "2.9", "2.10", "2.11"}
    assert {t.version for t in matrix.tensorflow} >= {"1.12", "2.20"}


def test_every_entry_has_a_source():
    for section, entry in _entries(load_raw()):
        source = entry.get("source")
        assert isinstance(source, str) and len(source) > 10, f"{section}: {entry} has no source"


def test_every_cuda_minor_from_9_to_13_is_present():
    versions = {c.version for c in load_matrix().cuda}
    wanted = ["9.0", "9.1", "9.2", "10.0", "10.1", "10.2"] + [f"11.{i}" for i in range(9)]
    wanted += [f"12.{i}" for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)] + ["13.0", "13.1"]
    assert set(wanted) <= versions


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda raw: raw["gpus"][0].pop("source"), "missing key 'source'"),
        (lambda raw: raw["gpus"][0].update(pci_ids=["10DE-15F7"]), "10de:xxxx"),
        (lambda raw: raw["gpus"][1].update(aliases=["P100-12GB"]), "names both"),
        (lambda raw: raw["cuda"][0].update(min_driver="latest"), "not a version"),
        (lambda raw: raw.pop("drivers"), "'drivers' is missing"),
        (lambda raw: raw["drivers"][0].update(architectures=["Pascal", "Tesla"]), "unknown 'Tesla'"),
        (lambda raw: raw["frameworks"]["tensorflow"][0].update(cuda="8.0"), "does not list"),
        (lambda raw: raw["drivers"][0].update(recommended="999.1"), "not in branch"),
        (lambda raw: raw["operating_systems"][0].update(os="bookworm"), "must look like 'debian12'"),
        (lambda raw: raw["operating_systems"][0]["drivers"][0].update(branch="R536"), "does not list"),
        (lambda raw: raw["operating_systems"][0]["cuda"][0].update(version="11.9"), "does not list"),
        (lambda raw: raw["cuda"][0].pop("debian"), "missing key 'debian'"),
    ],
)
def test_malformed_matrix_is_a_clear_error(mutate, message):
    raw = load_raw()
    mutate(raw)
    with pytest.raises(GpulabError, match=message):
        parse_matrix(yaml.safe_load(yaml.safe_dump(raw)))


def test_load_matrix_from_a_path(tmp_path):
    bad = tmp_path / "matrix.yml"
    bad.write_text("gpus: [", encoding="utf-8")
    with pytest.raises(GpulabError, match="not valid YAML"):
        load_matrix(str(bad))
    with pytest.raises(GpulabError, match="cannot read"):
        load_matrix(str(tmp_path / "missing.yml"))


@pytest.mark.parametrize("pci_id", ["10de:2335", "10DE:2335", "0x233510DE", "233510DE", "233510de"])
def test_h200_by_pci_id(pci_id):
    gpu = gpu_by_pci_id(pci_id)
    assert gpu is not None
    assert gpu.name == "NVIDIA H200"
    assert gpu.architecture == "Hopper"
    assert gpu.compute_capability == "9.0"
    assert gpu.bf16_tflops == pytest.approx(989.4)
    assert gpu.memory_bandwidth_gbs == 4800
    assert (gpu.pcie_gen, gpu.pcie_width, gpu.nvlink_gbs) == (5, 16, 900)


@pytest.mark.parametrize(
    ("pci_id", "name"),
    [
        ("10de:15f7", "Tesla P100-PCIE-12GB"),
        ("10de:15f8", "Tesla P100-PCIE-16GB"),
        ("10de:15f9", "Tesla P100-SXM2-16GB"),
        ("10de:2330", "NVIDIA H100 80GB HBM3"),
        ("10de:1b06", "NVIDIA GeForce GTX 1080 Ti"),
        ("0x1E0710DE", "NVIDIA GeForce RTX 2080 Ti"),
    ],
)
def test_pci_ids(pci_id, name):
    gpu = gpu_by_pci_id(pci_id)
    assert gpu is not None and gpu.name == name


def test_p100_16gb_details():
    gpu = gpu_by_pci_id("10de:15f8")
    assert gpu is not None
    assert (gpu.architecture, gpu.compute_capability, gpu.memory_gib) == ("Pascal", "6.0", 16)
    assert gpu.tf32_tflops is None and gpu.bf16_tflops is None


def test_unknown_or_malformed_pci_id_is_none():
    assert gpu_by_pci_id("10de:ffff") is None
    assert gpu_by_pci_id("not-a-pci-id") is None


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Tesla P100-PCIE-16GB", "Tesla P100-PCIE-16GB"),
        ("tesla p100-pcie-16gb", "Tesla P100-PCIE-16GB"),
        ("P100", "Tesla P100-PCIE-16GB"),
        ("p100-16gb", "Tesla P100-PCIE-16GB"),
        ("H200", "NVIDIA H200"),
        ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),  # pre-R470 NVML name without the NVIDIA prefix
        ("GeForce GTX 1080 Ti", "NVIDIA GeForce GTX 1080 Ti"),
        ("NVIDIA T4", "Tesla T4"),
    ],
)
def test_gpu_by_name(text, name):
    gpu = gpu_by_name(text)
    assert gpu is not None and gpu.name == name


def test_gpu_by_name_unknown_is_none():
    assert gpu_by_name("Radeon VII") is None
    assert gpu_by_name("") is None


def test_resolve_gpu_accepts_names_aliases_and_pci_ids():
    assert resolve_gpu("0x233510DE").name == "NVIDIA H200"
    assert resolve_gpu("H200 NVL").name == "NVIDIA H200 NVL"
    assert resolve_gpu("l40s").name == "NVIDIA L40S"


def test_resolve_gpu_ambiguous_lists_candidates():
    with pytest.raises(GpulabError) as err:
        resolve_gpu("P100 PCIe")
    assert "Tesla P100-PCIE-12GB" in str(err.value) and "Tesla P100-PCIE-16GB" in str(err.value)
    # "V100 PCIe" is the alias V100-PCIE (the 16 GB card): separators do not matter.
    assert resolve_gpu("V100 PCIe").name == "Tesla V100-PCIE-16GB"


def test_resolve_gpu_unknown_lists_known_gpus():
    with pytest.raises(GpulabError) as err:
        resolve_gpu("Radeon VII")
    assert "NVIDIA H200" in str(err.value) and "Tesla P100-PCIE-16GB" in str(err.value)
    with pytest.raises(GpulabError, match="10de:2335"):
        resolve_gpu("10de:ffff")


def test_all_gpus_have_consistent_specs():
    gpus = all_gpus()
    for gpu in gpus:
        assert gpu.pci_ids and all(p.startswith("10de:") for p in gpu.pci_ids)
        if gpu.architecture in ("Pascal", "Volta", "Turing"):
            assert gpu.bf16_tflops is None and gpu.tf32_tflops is None, gpu.name
        elif gpu.bf16_tflops is None or gpu.tf32_tflops is None:
            assert "not stated" in gpu.source or "null" in gpu.source, gpu.name  # a missing figure says why


@pytest.mark.parametrize(
    ("cuda", "driver"),
    [("9.0", "384.81"), ("10.0", "410.48"), ("11.8", "520.61.05"), ("12.0", "525.60.13"), ("12.9", "575.51.03"),
     ("13.0", "580.65.06"), ("cu126", "560.28.03"), ("12.9.1", "575.51.03")],
)  # fmt: skip
def test_min_driver_for_cuda(cuda, driver):
    assert min_driver_for_cuda(cuda) == driver


def test_min_driver_for_cuda_minor_compat():
    assert min_driver_for_cuda("12.9", minor_compat=True) == "525.60.13"
    assert min_driver_for_cuda("11.4", minor_compat=True) == "450.80.02"
    assert min_driver_for_cuda("10.2", minor_compat=True) == "440.33"  # no minor-version compat before 11


def test_min_driver_for_unknown_cuda_lists_known():
    with pytest.raises(GpulabError, match=r"CUDA 12\.7 is unknown.*12\.6, 12\.8"):
        min_driver_for_cuda("12.7")
    with pytest.raises(GpulabError, match="not a version"):
        min_driver_for_cuda("latest")


def test_cuda_supports_cc():
    assert cuda_supports_cc("12.9", "6.0")
    assert not cuda_supports_cc("13.0", "6.0")
    assert not cuda_supports_cc("13.0", "7.0")
    assert cuda_supports_cc("13.0", "7.5")
    assert cuda_supports_cc("9.0", "3.0") and cuda_supports_cc("9.0", "7.0")
    assert not cuda_supports_cc("9.0", "7.5")
    assert not cuda_supports_cc("12.6", "10.0") and cuda_supports_cc("12.8", "10.0")


def test_driver_branch():
    assert driver_branch("580.95.05") == "R580"
    assert driver_branch("R535") == "R535"
    with pytest.raises(GpulabError, match="driver version"):
        driver_branch("five-eighty")


reported = Architecture.parse_reported  # a driver's name for an architecture


def test_driver_supports_arch():
    assert driver_supports_arch("580.95.05", reported("Pascal"))
    assert not driver_supports_arch("590.48.01", reported("Pascal"))
    assert not driver_supports_arch("590.48.01", reported("volta"))
    assert driver_supports_arch("590.48.01", reported("Hopper"))
    assert not driver_supports_arch("535.230.02", reported("Blackwell"))
    assert driver_supports_arch("570.172.08", reported("Blackwell"))
    assert driver_supports_arch("410.79", reported("Pascal")) and not driver_supports_arch("410.79", reported("Ampere"))
    assert driver_supports_arch("999.1", reported("Hopper"))  # newer than the matrix: newest known branch applies
    assert driver_supports_arch("580.95.05", reported("Ada Lovelace"))


def test_driver_supports_arch_errors():
    with pytest.raises(GpulabError, match="architecture 'Tesla' is unknown"):
        driver_supports_arch("580.95.05", reported("Tesla"))
    with pytest.raises(GpulabError, match="predates"):
        driver_supports_arch("375.26", reported("Pascal"))


def test_max_cuda_for_driver():
    assert max_cuda_for_driver("580.95.05") == "13.0"
    assert max_cuda_for_driver("575.57.08") == "12.9"
    assert max_cuda_for_driver("410.79") == "10.0"
    assert max_cuda_for_driver("565.57.01") == "12.6"  # no 12.7 toolkit exists
    assert max_cuda_for_driver("R565") == "12.7"  # what nvidia-smi reports for the branch
    with pytest.raises(GpulabError, match="older than every CUDA"):
        max_cuda_for_driver("375.26")


def test_driver_branch_records_are_consistent():
    matrix = load_matrix()
    numbers = [d.number for d in matrix.drivers]
    assert numbers == sorted(numbers)
    for branch in matrix.drivers:
        # The recommended release runs every toolkit up to the CUDA its branch reports (R565's 12.7 aside).
        assert max_cuda_for_driver(branch.recommended) in {branch.max_cuda, "12.6"}, branch.branch
    after_580 = [d for d in matrix.drivers if d.number > 580]
    assert after_580 and all("Pascal" not in d.architectures for d in after_580)


def test_names_match_whatever_the_separators():
    assert gpu_by_name("GTX1080Ti") == gpu_by_name("NVIDIA GeForce GTX 1080 Ti")
    assert gpu_by_name("a100_sxm4_80gb") == gpu_by_name("NVIDIA A100-SXM4-80GB")
