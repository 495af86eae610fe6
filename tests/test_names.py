"""gpulab.names: one vocabulary, and every layer that names things agrees with it."""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources

import pytest

from gpulab import names
from gpulab.compat.data import GpuSpec
from gpulab.errors import GpulabError, UnknownValue


def _schema() -> dict:
    return json.loads(resources.files("gpulab.report").joinpath("schema.json").read_text())


def test_precision_decoder_means_one_thing():
    fp32, tf32, bf16, fp16 = (names.Precision.parse(p) for p in ("fp32", "tf32", "bf16", "fp16"))
    assert (fp32.tf32, fp32.autocast, fp32.dtype) == (False, None, "float32")
    assert (tf32.tf32, tf32.autocast, tf32.dtype) == (True, None, "float32")
    assert (bf16.tf32, bf16.autocast, bf16.dtype) == (True, "bfloat16", "bfloat16")
    assert (fp16.dtype, fp16.autocast, fp16.loss_scaling, fp16.tf32) == ("float16", "float16", True, False)
    assert names.TRAINING_PRECISIONS == ("fp32", "tf32", "bf16", "fp16")


def test_precision_spec_fields_exist_on_the_gpu_spec():
    fields = {f.name for f in dataclasses.fields(GpuSpec)}
    assert {p.spec_field for p in names.Precision} <= fields


def test_precision_dtypes_are_torch_dtypes():
    torch = pytest.importorskip("torch")
    from gpulab.workloads.torch_precision import dtype_for

    for p in names.Precision:
        assert isinstance(dtype_for(p), torch.dtype)
    assert dtype_for(names.Precision.BF16) is torch.bfloat16


@pytest.mark.parametrize(
    ("call", "what", "value", "choices"),
    [
        (lambda: names.precision("fp8"), "precision", "fp8", names.PRECISIONS),
        (lambda: names.precision("int8", training=True, who="mnist"), "precision", "int8", names.TRAINING_PRECISIONS),
        (lambda: names.size("huge"), "size", "huge", names.SIZES),
        (lambda: names.tier("deep"), "tier", "deep", names.TIERS),
        (lambda: names.optimizer("rmsprop", who="--optimizer"), "optimizer", "rmsprop", names.OPTIMIZERS),
        (lambda: names.CommBackend.parse("mpi"), "DDP backend", "mpi", names.COMM_BACKENDS),
    ],
)
def test_bad_names_say_what_was_asked_and_the_choices(call, what, value, choices):
    with pytest.raises(UnknownValue) as err:
        call()
    assert (err.value.what, err.value.value, err.value.choices) == (what, value, tuple(choices))
    assert str(err.value).endswith(f"unknown {what} {value!r}; choose one of: {', '.join(err.value.choices)}") or (
        what == "DDP backend"  # its message shows each choice with what it is for
    )


def test_an_unknown_value_message_is_one_line_with_who_asked():
    with pytest.raises(GpulabError) as err:
        names.precision("fp8", training=True, who="mnist")
    assert str(err.value) == "mnist: unknown precision 'fp8'; choose one of: fp32, tf32, bf16, fp16"
    assert err.value.who == "mnist" and isinstance(err.value, UnknownValue)


def test_one_tier_table():
    assert names.TIERS == ("quick", "standard", "full") and names.DEFAULT_TIER in names.TIERS
    quick, standard, full = (names.tier(t) for t in names.TIERS)
    assert quick.workload_size is None and standard.workload_size == "standard" and full.workload_size == "full"
    assert all(t.workload_size is None or t.workload_size in names.SIZES for t in (quick, standard, full))
    # deeper tiers never do less work
    for a, b in ((quick, standard), (standard, full)):
        assert b.probe.matmul_iters >= a.probe.matmul_iters and b.probe.copy_mib >= a.probe.copy_mib
        assert b.allreduce_mib >= a.allreduce_mib and b.dcgm_level > a.dcgm_level


def test_the_report_schema_takes_its_names_from_gpulab_names():
    defs = _schema()["$defs"]
    assert defs["tier_name"]["enum"] == list(names.REPORT_TIERS)
    assert defs["launcher_name"]["enum"] == list(names.LAUNCHERS) == [m.value for m in names.Launcher]
    assert defs["reported_launcher_name"]["enum"] == list(names.REPORT_LAUNCHERS)
    assert defs["comm_backend_name"]["enum"] == list(names.COMM_BACKENDS) == [b.value for b in names.CommBackend]
    assert defs["precision_name"]["enum"] == list(names.REPORT_PRECISIONS)
    assert defs["framework_name"]["pattern"] == names.FRAMEWORK_PATTERN
    assert all(re.match(names.FRAMEWORK_PATTERN, f) for f in (*names.FRAMEWORKS, "nccl-tests"))
    for key, launcher in (("result", "reported_launcher_name"), ("scaling", "launcher_name")):
        props = defs[key]["properties"]
        assert props["launcher"] == {"$ref": f"#/$defs/{launcher}"}
        assert props["precision"] == {"$ref": "#/$defs/precision_name"}


def test_product_classes_are_named_once():
    """The report schema's product classes and the type's are gpu_names' PRODUCT_CLASSES."""
    from typing import get_args

    from gpulab.compat.gpu_names import PRODUCT_CLASSES, ProductClass

    assert get_args(ProductClass) == PRODUCT_CLASSES
    assert _schema()["$defs"]["gpu"]["properties"]["product_class"]["enum"] == [*PRODUCT_CLASSES, None]


@pytest.mark.parametrize(("field", "value"), [("precision", "fp8"), ("launcher", "horovod"), ("framework", "Torch!")])
def test_a_result_with_an_unknown_name_is_refused(field, value):
    from gpulab.records import Report, Result
    from gpulab.report.io import report_from_data
    from report_builders import minimal_fingerprint

    good = Report(fingerprint=minimal_fingerprint().to_dict(), tier="standard")
    good.results.append(Result("matmul", "torch", "gpu", 1, "bf16", 1.0, "TFLOP/s"))
    data = good.to_dict()
    assert report_from_data(data).tier == "standard"
    data["results"][0][field] = value
    with pytest.raises(GpulabError, match=field):
        report_from_data(data)


def test_the_command_line_offers_the_training_names():
    from gpulab.cli import build_parser

    parser = build_parser()
    run = parser.parse_args(["run", "mnist", "--precision", "tf32", "--launcher", "ddp"])
    assert run.precision == "tf32" and run.launcher == "ddp"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "mnist", "--precision", "fp8"])
