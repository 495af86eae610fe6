"""Random weights and stand-in data are named in the run's row, the run report and the study report."""

from __future__ import annotations

import markupsafe
import pytest

from gpulab.cli import main
from gpulab.records import Report, Result
from gpulab.report.formatting import stand_ins_summary as summary
from gpulab.report.io import load_report
from gpulab.report.render import to_html, to_markdown
from gpulab.workloads.stand_ins import stand_ins


@pytest.mark.parametrize(
    ("workload", "facts", "expected"),
    [
        ("style_transfer", {"weights": "random", "content": "sample:china.jpg"}, ["random VGG19 weights"]),
        ("style_transfer", {"weights": "/w/vgg19-dcbb9e9d.pth sha256:0123", "content": "sample:china.jpg"}, []),
        (
            "style_transfer",
            {"weights": "random", "content": "generated:content", "style": ["sample:flower.jpg"]},
            ["random VGG19 weights", "generated pictures for photos"],
        ),
        ("mnist", {"data": "digits"}, ["scikit-learn's 8×8 digits for MNIST"]),
        ("mnist", {"data": "/data/mnist"}, []),
        ("cifar10", {"data": None}, ["synthetic tensors for CIFAR-10"]),
        (
            "chexnet",
            {"weights": "random", "data": "real:/s/generated-data"},
            ["random DenseNet121 weights", "generated images for ChestX-ray14"],
        ),
        ("chexnet", {"data": "/x", "workload_params": {"pretrained": "imagenet"}}, []),
        ("chexnet", {"data": "/x", "workload_params": {}}, ["random DenseNet121 weights"]),
        ("resnet50", {"weights": "random", "data": "/imagenet"}, []),  # ResNet50 trains from scratch
        ("matmul", {}, []),
    ],
)
def test_what_stands_in(workload, facts, expected):
    assert stand_ins(workload, facts) == expected


def test_the_summary_counts_per_stand_in():
    rows = [("style_transfer", ["random VGG19 weights"])] * 3 + [("mnist", [])]
    assert summary(rows) == "random VGG19 weights (style_transfer; 3 runs)"
    assert summary([("mnist", [])]) is None


def test_a_run_on_digits_names_them_in_its_row_and_its_report(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    report = tmp_path / "r.json"
    argv = ["run", "mnist", "--launcher", "cpu", "--threads", "1", "--size", "tiny", "--warmup", "0", "--steps", "1"]
    assert main([*argv, "--data", "digits", "--report", str(report)]) == 0
    loaded = load_report(report)
    (row,) = loaded.results
    assert row.params["stand_ins"] == ["scikit-learn's 8×8 digits for MNIST"]
    line = "Stand-ins: scikit-learn's 8×8 digits for MNIST (mnist; 1 row)"
    assert line in to_markdown(loaded) and str(markupsafe.escape(line)) in to_html(loaded)


def test_a_report_without_stand_ins_says_nothing_of_them():
    row = Result("matmul", "torch", "gpu", 1, "bf16", 700.0, "TFLOP/s", params={})
    report = Report(fingerprint={"host": {"hostname": "h"}}, results=[row])
    assert "Stand-ins" not in to_markdown(report) and "Stand-ins" not in to_html(report)
