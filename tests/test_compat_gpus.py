"""The GPUs people run today are in the matrix, each with its source and product class."""

from __future__ import annotations

import pytest

from gpulab.compat.gpu_names import product_class
from gpulab.compat.gpus import all_gpus, gpu_by_name, gpu_for

# Driver-reported name -> (PCI id, architecture, compute capability, product class).
ADDED = {
    "Tesla V100S-PCIE-32GB": ("10de:1df6", "Volta", "7.0", "data-centre"),
    "NVIDIA A10G": ("10de:2237", "Ampere", "8.6", "data-centre"),
    "NVIDIA A10": ("10de:2236", "Ampere", "8.6", "data-centre"),
    "NVIDIA L4": ("10de:27b8", "Ada", "8.9", "data-centre"),
    "NVIDIA RTX A5000": ("10de:2231", "Ampere", "8.6", "workstation"),
    "NVIDIA RTX A6000": ("10de:2230", "Ampere", "8.6", "workstation"),
    "NVIDIA RTX 6000 Ada Generation": ("10de:26b1", "Ada", "8.9", "workstation"),
    "NVIDIA GeForce RTX 3060": ("10de:2503", "Ampere", "8.6", "consumer"),
    "NVIDIA GeForce RTX 3070": ("10de:2484", "Ampere", "8.6", "consumer"),
    "NVIDIA GeForce RTX 3080": ("10de:2206", "Ampere", "8.6", "consumer"),
    "NVIDIA GeForce RTX 3080 Ti": ("10de:2208", "Ampere", "8.6", "consumer"),
    "NVIDIA GeForce RTX 4080": ("10de:2704", "Ada", "8.9", "consumer"),
    "NVIDIA GeForce GTX 1050": ("10de:1c81", "Pascal", "6.1", "consumer"),
    "GeForce GTX 1070 Ti": ("10de:1b82", "Pascal", "6.1", "consumer"),  # as older drivers name it
    "NVIDIA GeForce GTX 1660 Ti": ("10de:2182", "Turing", "7.5", "consumer"),
    "NVIDIA GeForce RTX 5090": ("10de:2b85", "Blackwell", "12.0", "consumer"),
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": ("10de:2bb1", "Blackwell", "12.0", "workstation"),
    "NVIDIA B200": ("10de:2901", "Blackwell", "10.0", "data-centre"),
}


@pytest.mark.parametrize("name", sorted(ADDED))
def test_gpu_is_found_by_name_and_pci_id(name):
    pci, arch, cc, cls = ADDED[name]
    spec = gpu_by_name(name)
    assert spec is not None, name
    assert gpu_for("Graphics Device", pci) == spec  # a pre-release name is resolved by the id
    assert (spec.architecture, spec.compute_capability, spec.product_class) == (arch, cc, cls)
    assert "https://" in spec.source


def test_every_entry_cites_a_document_and_has_a_class():
    for spec in all_gpus():
        assert "http" in spec.source, spec.name
        assert spec.product_class in ("data-centre", "workstation", "consumer")


def test_unstated_figures_are_null_not_guessed():
    a10g = gpu_by_name("A10G")
    assert a10g is not None
    assert (a10g.fp32_tflops, a10g.fp16_tflops, a10g.memory_bandwidth_gbs) == (None, None, None)
    assert "no A10G datasheet" in a10g.source


@pytest.mark.parametrize(
    ("name", "brand", "cls"),
    [
        ("NVIDIA GeForce RTX 4090", None, "consumer"),
        ("GeForce GTX 1070 Ti", None, "consumer"),
        ("NVIDIA TITAN RTX", None, "consumer"),
        ("NVIDIA RTX A5000", None, "workstation"),
        ("Quadro P400", None, "workstation"),
        ("NVIDIA RTX 4000 SFF Ada Generation", None, "workstation"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", None, "workstation"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", None, "data-centre"),
        ("NVIDIA H200", "NVIDIA", "data-centre"),
        ("Tesla T4", "Tesla", "data-centre"),
        ("Graphics Device", "GeForce", "consumer"),
        ("Graphics Device", "NVIDIA RTX", "workstation"),
    ],
)
def test_product_class_from_name_then_brand(name, brand, cls):
    assert product_class(name, brand) == cls


def test_pci_id_wins_over_name():
    spec = gpu_for("NVIDIA GeForce RTX 3080", "10de:2184")
    assert spec is not None and spec.name == "NVIDIA GeForce GTX 1660"
    assert gpu_for("NVIDIA Imaginary X1", "10de:fff0") is None
