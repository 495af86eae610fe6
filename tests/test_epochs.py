"""Epoch training: real learning on the built-in digits, per-epoch records, time to target, DDP over gloo, the
class-per-folder reader, pretrained weights, metrics and the `gpulab run --epochs` options."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpulab.cli import main
from gpulab.errors import GpulabError, UnknownValue
from gpulab.names import CommBackend, Precision
from gpulab.records import RunConfig
from gpulab.report.io import load_report
from gpulab.training import EpochSpec, train_epochs
from gpulab.training.metrics import accuracy, mean_auc, roc_auc
from gpulab.workloads.data import ClassFolder, write_class_folder

pytestmark = pytest.mark.slow  # trainings and commands in child processes: the full lane only

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
DIGITS = Path("digits")
EPOCH_KEYS = {"epoch", "seconds", "samples", "samples_per_s", "train_loss", "val_loss", "val_metric"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """mnist on digits, 3 CPU epochs, its weights saved: (record, weights file, lines seen)."""
    weights = tmp_path_factory.mktemp("weights") / "mnist.pt"
    seen: list[dict] = []
    spec = EpochSpec(3, target_accuracy=0.8, save_weights=weights)
    record = train_epochs(RunConfig("mnist", data=DIGITS, batch=64), "cpu", spec, on_epoch=seen.append)
    return record, weights, seen


def test_mnist_on_digits_learns_and_records_each_epoch(trained):
    record, _, seen = trained
    assert record["workload"] == "mnist" and record["metric"] == "accuracy" and record["data"] == "digits"
    assert (record["train_samples"], record["val_samples"]) == (1438, 359)
    epochs = record["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3] and seen == epochs
    for e in epochs:
        assert set(e) >= EPOCH_KEYS
        assert e["samples"] == 1438 and e["seconds"] > 0  # every training sample once an epoch
        assert e["samples_per_s"] == pytest.approx(e["samples"] / e["seconds"])
        assert math.isfinite(e["train_loss"]) and math.isfinite(e["val_loss"]) and 0 <= e["val_metric"] <= 1
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    assert record["final_metric"] >= 0.8  # chance is 0.1
    assert record["best_metric"] == max(e["val_metric"] for e in epochs)
    assert record["optimizer"] == "Adadelta" and record["learning_rate"] == 1.0  # mnist's own
    assert record["total_s"] >= sum(e["seconds"] for e in epochs)
    assert 0 < record["time_to_target_s"] <= record["total_s"]
    json.dumps(record)


def test_an_unreached_or_absent_target_has_no_time():
    cfg = RunConfig("mnist", data=DIGITS, batch=128)
    record = train_epochs(cfg, "cpu", EpochSpec(1, target_accuracy=1.0, optimizer="sgd", learning_rate=1e-5))
    assert record["time_to_target_s"] is None and record["target"] == 1.0
    assert record["optimizer"] == "SGD" and record["learning_rate"] == 1e-5
    assert record["final_metric"] < 0.5  # a negligible rate from scratch: near chance


def test_weights_round_trip(trained):
    _, weights, _ = trained
    cfg = RunConfig("mnist", data=DIGITS, batch=128)
    spec = EpochSpec(1, optimizer="sgd", learning_rate=1e-5, weights=weights)  # the rate barely moves them
    record = train_epochs(cfg, "cpu", spec)
    assert record["epochs"][0]["val_metric"] >= 0.9 and record["weights"] == str(weights)
    assert record["time_to_target_s"] is None


def test_weights_refusals(tmp_path):
    from gpulab.training.weights import load_weights
    from gpulab.workloads.mnist import torch_model as mnist

    model = mnist.make_model()
    state = model.state_dict()
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a torch file")
    torch.save({"a": 1}, tmp_path / "ints.pt")
    torch.save({**state, "0.weight": torch.zeros(8, 1, 3, 3)}, tmp_path / "shape.pt")
    torch.save({k: v for k, v in state.items() if k != "2.bias"}, tmp_path / "missing.pt")
    torch.save({**state, "extra.weight": torch.zeros(1)}, tmp_path / "extra.pt")
    cases = [
        (tmp_path, "is a directory"),
        (tmp_path / "absent.pt", "does not exist"),
        (garbage, "does not load as a torch state_dict"),
        (tmp_path / "ints.pt", "not a state_dict of tensors"),
        (tmp_path / "shape.pt", "'0.weight' is (8, 1, 3, 3) in the file"),
        (tmp_path / "missing.pt", "it has no '2.bias'"),
        (tmp_path / "extra.pt", "the model has no 'extra.weight'"),
    ]
    for path, message in cases:
        with pytest.raises(GpulabError, match="--weights") as err:
            load_weights(mnist.make_model(), path, "mnist")
        assert message in str(err.value) and "\n" not in str(err.value)


def test_weights_with_another_head_start_it_fresh(tmp_path):
    from gpulab.training.weights import load_weights
    from gpulab.workloads.mnist import torch_model as mnist

    donor = mnist.make_model()
    donor[10] = torch.nn.Linear(128, 5)
    torch.save({f"module.{k}": v for k, v in donor.state_dict().items()}, tmp_path / "five.pt")  # a DDP save
    model = mnist.make_model()
    notes = load_weights(model, tmp_path / "five.pt", "mnist")
    assert len(notes) == 1 and "classifier head 10 is 5 classes" in notes[0]
    assert torch.equal(model[0].weight, donor[0].weight) and model[10].weight.shape == (10, 128)


def test_ddp_gloo_two_processes_train_and_agree(tmp_path, capsys):
    report = tmp_path / "report.json"
    argv = ["run", "mnist", "--launcher", "ddp", "--gpus", "2", "--epochs", "2", "--data", "digits"]
    assert main([*argv, "--batch", "32", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "epoch 1/2:" in out and "epoch 2/2:" in out and "val accuracy" in out
    (result,) = load_report(report).results  # the schema takes the epoch record
    assert [r["comm_backend"] for r in json.loads(report.read_text())["results"]] == ["gloo"]  # chosen: no GPU
    assert result.comm_backend is CommBackend.GLOO and "backend" not in result.params
    params = result.params
    first, second = params["rank_final_metrics"]
    assert first == second >= 0.8
    record = params["epochs"]
    assert record["world"] == 2 and [e["samples"] for e in record["epochs"]] == [1438, 1438]
    assert result.launcher == "ddp" and result.n == 2 and result.devices == ["cpu", "cpu"]
    assert result.value == pytest.approx(2 * 1438 / record["train_s"])


def test_cli_cpu_and_dataparallel_pass_through(tmp_path, capsys):
    report = tmp_path / "report.json"
    base = ["run", "mnist", "--epochs", "1", "--data", "digits", "--batch", "128", "--report", str(report)]
    assert main([*base, "--launcher", "cpu", "--target-accuracy", "0.5", "--optimizer", "adam"]) == 0
    out = capsys.readouterr().out
    assert "epoch 1/1:" in out and "time to accuracy 0.5:" in out
    assert main([*base, "--launcher", "dataparallel", "--gpus", "1", "--target-accuracy", "1"]) == 0
    assert "accuracy 1 not reached" in capsys.readouterr().out
    cpu, dp = load_report(report).results
    assert cpu.params["epochs"]["optimizer"] == "Adam" and cpu.params["epochs"]["final_metric"] >= 0.5
    assert dp.launcher == "dataparallel" and dp.params["pass_through"]
    for result in (cpu, dp):
        record = result.params["epochs"]
        assert result.value == pytest.approx(record["epochs"][0]["samples"] / record["train_s"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--epochs", "0"], "--epochs must be a whole number of at least 1"),
        (["--epochs", "two"], "--epochs 'two' is not a whole number"),
        (["--epochs", "1", "--val-fraction", "1.5"], "--val-fraction must be a number between 0 and 1"),
        (["--epochs", "1", "--val-fraction", "0"], "--val-fraction must be a number between 0 and 1"),
        (
            ["--epochs", "1", "--optimizer", "rmsprop"],
            "--optimizer: unknown optimizer 'rmsprop'; choose one of: adam, sgd",
        ),
        (["--optimizer", "rmsprop"], "unknown optimizer 'rmsprop'"),
        (["--epochs", "1", "--target-accuracy", "0"], "--target-accuracy must be a number in (0, 1]"),
        (["--epochs", "1", "--target-accuracy", "1.5"], "--target-accuracy must be a number in (0, 1]"),
        (["--epochs", "1", "--lr", "-1"], "--lr must be a positive number"),
        (["--lr", "nan"], "--lr 'nan' is not a finite number"),
        (["--val-fraction", "0.2"], "--val-fraction applies to epoch training: add --epochs N"),
        (["--epochs", "1", "--weights", "/nonexistent/w.pt"], "does not exist"),
        (["--epochs", "1", "--builder", "mymodule:build"], "--epochs trains gpulab's own workloads; drop --builder"),
    ],
)
def test_cli_bad_values_are_one_line(extra, message, capsys):
    assert main(["run", "mnist", "--launcher", "cpu", "--data", "digits", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("gpulab: error: ")


def test_an_unknown_optimizer_is_one_error_wherever_it_is_named():
    from gpulab.workloads.torch_session import choose_optimizer

    for ask, who in (
        (lambda: EpochSpec(1, optimizer="rmsprop"), "--optimizer"),
        (lambda: choose_optimizer(RunConfig("mnist", optimizer="rmsprop"), lambda p, lr: None), "mnist"),
    ):
        with pytest.raises(UnknownValue) as err:
            ask()
        assert (err.value.what, err.value.value, err.value.who) == ("optimizer", "rmsprop", who)


def test_style_transfer_and_missing_data_are_refused(capsys):
    assert main(["run", "style_transfer", "--launcher", "cpu", "--epochs", "1"]) == 2
    assert "style_transfer optimises one image" in capsys.readouterr().err
    assert main(["run", "mnist", "--launcher", "cpu", "--epochs", "1"]) == 2
    assert "needs real data: pass --data digits" in capsys.readouterr().err


def test_class_folder_reader(tmp_path):
    write_class_folder(tmp_path / "set", [3, 2, 4])
    found = ClassFolder.read(tmp_path / "set", "resnet50")
    assert found.classes == ["class_0", "class_1", "class_2"] and found.labels == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    data = found.dataset(16, [0, 5])
    x, y = data[1]
    assert x.shape == (3, 16, 16) and x.dtype == torch.uint8 and int(y) == 2 and len(data) == 2


def test_class_folder_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(GpulabError, match=r"empty has no class folders; expected ROOT/<class name>/"):
        ClassFolder.read(tmp_path / "empty", "resnet50")
    write_class_folder(tmp_path / "set", [2])
    (tmp_path / "set" / "cats").mkdir()
    (tmp_path / "set" / "cats" / "notes.txt").write_text("no images here")
    with pytest.raises(GpulabError, match=r"class folder .*set/cats holds no images"):
        ClassFolder.read(tmp_path / "set", "resnet50")
    (tmp_path / "set" / "cats" / "broken.jpg").write_bytes(b"not a jpeg")
    data = ClassFolder.read(tmp_path / "set", "resnet50").dataset(16)
    with pytest.raises(GpulabError, match=r"cannot read image .*cats/broken.jpg"):
        data[0]
    (tmp_path / "set" / "cats" / "notes.txt").unlink()
    for name in ("a.png", "b.png"):
        (tmp_path / "set" / "cats" / name).write_bytes(b"not a png either")
    cfg = RunConfig("cifar10", data=tmp_path / "set", batch=2, num_workers=1)
    with pytest.raises(GpulabError, match=r"^cannot read image .*cats/\w+\.(jpg|png)") as err:
        train_epochs(cfg, "cpu", EpochSpec(1, val_fraction=0.4))  # the loader worker's error, in one line
    assert "\n" not in str(err.value)


def test_class_folder_sets_the_classes_and_refuses_a_mismatch(tmp_path):
    root = tmp_path / "set"
    write_class_folder(root, [8, 8, 8], side=32)
    cfg = RunConfig("cifar10", data=root, batch=8, num_workers=0)
    record = train_epochs(cfg, "cpu", EpochSpec(1, val_fraction=0.25))
    assert record["classes"] == 3 and (record["train_samples"], record["val_samples"]) == (18, 6)
    assert record["validation"].startswith("held out 0.25")
    with pytest.raises(GpulabError, match="has 3 classes but num_classes=5"):
        train_epochs(RunConfig("resnet50", data=root, params={"num_classes": 5}), "cpu", EpochSpec(1))


def test_chexnet_reports_mean_auc(tmp_path):
    from gpulab.workloads.data import write_image_folder

    write_image_folder(tmp_path / "xrays", 10, label_columns=14, side=40)
    cfg = RunConfig("chexnet", size="tiny", data=tmp_path / "xrays", batch=4, num_workers=0, params={"image": 32})
    record = train_epochs(cfg, "cpu", EpochSpec(1, val_fraction=0.4))
    assert record["metric"] == "mean_auc" and record["val_samples"] == 4
    metric = record["final_metric"]
    assert metric is None or 0 <= metric <= 1


def test_metrics():
    import numpy as np

    assert accuracy(np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]), np.array([1, 0, 0])) == pytest.approx(2 / 3)
    assert roc_auc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    assert roc_auc([0.5, 0.5, 0.5, 0.5], [0, 1, 0, 1]) == 0.5
    assert roc_auc([0.1, 0.2], [1, 1]) is None
    rng = np.random.default_rng(0)
    scores, labels = rng.normal(size=(200, 3)), rng.integers(0, 2, size=(200, 3))
    scores[:, 0] += labels[:, 0]
    scores[:, 1] = np.round(scores[:, 1])  # ties
    labels[:, 2] = 1  # one class only: left out of the mean
    from sklearn.metrics import roc_auc_score

    expected = [roc_auc_score(labels[:, k], scores[:, k]) for k in range(2)]
    assert mean_auc(scores, labels) == pytest.approx(sum(expected) / 2)


def test_timed_runs_take_the_optimizer_digits_and_class_folders(tmp_path):
    from gpulab.workloads import build

    s = build(RunConfig("mnist", size="tiny", data=DIGITS, num_workers=0, optimizer="adam", learning_rate=0.002), "cpu")
    assert s.info["optimizer"] == "Adam" and s.info["learning_rate"] == 0.002 and s.info["data"] == "digits"
    assert math.isfinite(float(s.step()))
    s.finish()
    write_class_folder(tmp_path / "set", [4, 4])
    s = build(RunConfig("cifar10", size="tiny", batch=4, data=tmp_path / "set", num_workers=0), "cpu")
    assert s.model[-1].out_features == 2 and math.isfinite(float(s.step()))
    s.finish()


def test_epoch_rows_are_their_own_series():
    from gpulab.records import Result
    from gpulab.report.scaling import speedups

    def row(launcher, n, value, mode=None):
        params = {"mode": mode} if mode else {}
        return Result("mnist", "torch", launcher, n, "fp32", value, "samples/s", devices=[launcher], params=params)

    rows = [row("cpu", 1, 10.0), row("cpu", 1, 5.0, "epochs"), row("cpu", 2, 8.0, "epochs")]
    assert rows[1].key()[0] == "mnist (epochs)" and rows[0].key()[0] == "mnist"
    assert [(s.workload, s.from_, s.to) for s in speedups(rows)] == [("mnist (epochs)", "cpu:1", "cpu:2")]


def test_mnist_idx_uses_its_test_split_or_holds_out(tmp_path):
    import shutil

    from gpulab.workloads.mnist.data import write_digits

    root = tmp_path / "mnist"
    write_digits(root)
    cfg = RunConfig("mnist", data=root, batch=128)
    record = train_epochs(cfg, "cpu", EpochSpec(1, val_fraction=0.25))
    assert (record["train_samples"], record["val_samples"]) == (1348, 449) and record["validation"].startswith("held")
    for name in ("images-idx3-ubyte", "labels-idx1-ubyte"):
        shutil.copy(root / f"train-{name}", root / f"t10k-{name}")
    record = train_epochs(cfg, "cpu", EpochSpec(1))
    assert (record["train_samples"], record["val_samples"]) == (1797, 1797)
    assert record["validation"] == "the data set's test split" and record["data"] == f"real:{root}"


def test_bf16_autocast_trains():
    record = train_epochs(RunConfig("mnist", precision=Precision.BF16, data=DIGITS, batch=128), "cpu", EpochSpec(1))
    assert (record["precision"], record["autocast"], record["loss_scaling"]) == ("bf16", "bf16", False)
    assert record["final_metric"] >= 0.5


def test_digits_without_scikit_learn_is_one_line(monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # as on a GPU node without scikit-learn
    assert main(["run", "mnist", "--launcher", "cpu", "--epochs", "1", "--data", "digits"]) == 2
    err = capsys.readouterr().err
    assert "--data digits needs scikit-learn" in err and err.count("\n") == 1


def test_style_transfer_refuses_optimizer_choice(capsys):
    assert main(["run", "style_transfer", "--launcher", "cpu", "--lr", "0.1"]) == 2
    assert "--optimizer and --lr do not apply" in capsys.readouterr().err


def test_loader_workers_default_to_a_share_of_the_cores_per_training_process(monkeypatch):
    import os

    from gpulab.workloads.torch_session import loader_workers

    assert loader_workers(0) == 0 and loader_workers(12, processes=4) == 12  # asked for: as asked
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert [loader_workers(None, n) for n in (1, 2, 4, 8)] == [8, 7, 3, 2]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert loader_workers(None) == 2  # never fewer than 2: a small host keeps the old default
