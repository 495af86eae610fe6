"""The training precision per GPU: chosen from the matrix for every GPU it lists, never one the GPU lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulab import compat, names
from gpulab.errors import GpulabError, UnknownValue
from gpulab.hw.discover import fingerprint
from gpulab.names import Architecture, Precision, ValidationTier
from gpulab.validation.expectations import SPEEDUP_WORKLOADS, scaling_plans, speedup_config
from gpulab.validation.session import Lab, Options
from gpulab.workloads import precision_plan

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("spec", compat.all_gpus(), ids=lambda s: s.name)
def test_every_gpu_in_the_matrix_gets_a_precision_it_has(spec):
    plan = precision_plan.for_spec(spec)
    cc = float(spec.compute_capability)
    for framework in names.FRAMEWORKS:
        for workload in SPEEDUP_WORKLOADS:
            choice = plan.training(workload, framework)
            assert plan.has(choice.precision), f"{spec.name} has no {choice.precision}"
            if cc >= 8.0:
                assert choice.precision == ("tf32" if workload == "style_transfer" else "bf16")
            else:
                assert choice.precision in ("fp16", "fp32")
                if choice.precision == "fp16":  # only where the datasheet shows fp16 faster, with loss scaling
                    assert spec.fp16_tflops and spec.fp16_tflops >= 1.5 * spec.fp32_tflops and framework == "torch"
                    assert names.precision("fp16").loss_scaling
            assert choice.channels_last == (framework == "torch" and workload != "mnist" and cc >= 7.0)


@pytest.mark.parametrize(
    ("name", "classifier", "style"),
    [
        ("Tesla P100-PCIE-16GB", "fp16", "fp32"),  # 2x fp16 rate, no tensor cores
        ("NVIDIA GeForce GTX 1080 Ti", "fp32", "fp32"),  # fp16 at 1/64 rate
        ("Tesla V100-SXM2-32GB", "fp16", "fp32"),
        ("Tesla T4", "fp16", "fp32"),
        ("NVIDIA A100-SXM4-80GB", "bf16", "tf32"),
        ("NVIDIA H100 80GB HBM3", "bf16", "tf32"),
    ],
)
def test_the_plan_a_practitioner_would_choose(name, classifier, style):
    plan = precision_plan.for_spec(compat.gpu_by_name(name))
    assert plan.training("resnet50").precision == classifier
    assert plan.training("style_transfer").precision == style
    assert plan.training("resnet50").reason  # each choice says why


def test_the_captured_p100_host_plans_fp16_with_loss_scaling():
    fp = fingerprint(smi_xml=FIXTURES / "p100x2-driver375" / "nvidia-smi-q-x.xml", probe_frameworks=False)
    lab = Lab(options=Options(tier=ValidationTier.STANDARD), fingerprint=fp, gpus=fp.gpus)
    plan = lab.precision_plan
    assert plan is not None and plan.architecture == "Pascal" and not plan.forced
    cfg = speedup_config("resnet50", "standard", plan=plan)
    assert (cfg.precision, cfg.channels_last) == ("fp16", False)
    assert speedup_config("style_transfer", "standard", plan=plan).precision == "fp32"
    assert {p.launcher: p.precision for p in scaling_plans(True, plan)} == {
        "ddp": "fp16",
        "dataparallel": "fp16",
        "sweep": "fp32",
    }
    print({w: plan.training(w).precision for w in SPEEDUP_WORKLOADS})


def test_a_plan_forced_to_an_architecture():
    fp = fingerprint(smi_xml=FIXTURES / "h200x4-firecracker" / "nvidia-smi-q-x.xml", probe_frameworks=False)
    lab = Lab(
        options=Options(tier=ValidationTier.STANDARD, precision_plan=Architecture.VOLTA),
        fingerprint=fp,
        gpus=fp.gpus[:1],
    )
    plan = lab.precision_plan
    assert plan.forced and plan.architecture == "Volta"
    assert speedup_config("resnet50", "standard", plan=plan).precision == "fp16"
    assert precision_plan.for_architecture(Architecture.PASCAL).training("cifar10").precision == "fp16"
    assert precision_plan.architectures()[0] == "pascal" and "hopper" in precision_plan.architectures()
    with pytest.raises(UnknownValue) as err:
        precision_plan.plan_architecture("kepler")
    assert (err.value.what, err.value.value, err.value.choices) == (
        "architecture",
        "kepler",
        precision_plan.architectures(),
    )


def test_a_gpu_known_only_by_its_compute_capability():
    old = precision_plan.for_gpu(None, "7.5", Architecture.TURING)
    assert old.training("resnet50").precision == "fp16" and "tensor cores" in old.training("resnet50").reason
    assert not old.has(Precision.BF16) and not old.has(Precision.TF32) and old.has(Precision.FP16)
    assert precision_plan.for_gpu(None, "9.0", None).training("mnist").precision == "bf16"
    assert precision_plan.for_gpu(None, None, None) is None


def test_fp16_training_with_loss_scaling_converges_on_the_cpu():
    pytest.importorskip("torch")
    from gpulab.launch import run_cpu
    from gpulab.records import RunConfig

    result = run_cpu(RunConfig("mnist", precision=Precision.FP16, size="tiny", steps=30, warmup=2), threads=1)
    params = result.params
    assert (params["autocast"], params["loss_scaling"], params["tf32"]) == ("fp16", True, False)
    assert params["loss_finite"] and params["loss_falling"], (params["first_loss"], params["final_loss"])


def test_tensorflow_refuses_fp16():
    from gpulab.records import RunConfig
    from gpulab.workloads.tf.session import TF_PRECISIONS, tf_precision

    assert TF_PRECISIONS == ("fp32", "tf32", "bf16")
    with pytest.raises(GpulabError, match="TensorFlow rows train fp32, tf32, bf16; fp16 runs with --framework torch"):
        tf_precision(RunConfig("mnist", precision=Precision.FP16).precision)
