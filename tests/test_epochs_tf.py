"""Epoch training on TensorFlow: keras fit with validation, through the tensorflow backend's launchers."""

from __future__ import annotations

import pytest

from gpulab.cli import main
from gpulab.report.io import load_report

pytestmark = pytest.mark.slow  # trainings and commands in child processes: the full lane only

pytest.importorskip("tensorflow")
pytest.importorskip("sklearn")


def test_mnist_on_digits_learns_with_keras_fit(tmp_path, capsys):
    report = tmp_path / "report.json"
    argv = ["run", "mnist", "--framework", "tensorflow", "--launcher", "cpu", "--threads", "2", "--epochs", "3"]
    assert main([*argv, "--data", "digits", "--batch", "64", "--target-accuracy", "0.8", "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "epoch 3/3:" in out and "time to accuracy 0.8:" in out
    (result,) = load_report(report).results
    record = result.params["epochs"]
    assert result.framework == "tensorflow" and result.params["tensorflow"]
    assert [e["epoch"] for e in record["epochs"]] == [1, 2, 3]
    assert all(e["samples"] == 1438 and e["seconds"] > 0 for e in record["epochs"])
    assert record["final_metric"] >= 0.8 and 0 < record["time_to_target_s"] <= record["total_s"]
    assert record["optimizer"] == "Adadelta" and record["val_samples"] == 359
    assert result.value == pytest.approx(3 * 1438 / record["train_s"])


def test_mirrored_on_two_logical_cpus(capsys):
    argv = ["run", "mnist", "--framework", "tensorflow", "--launcher", "mirrored", "--gpus", "2", "--epochs", "1"]
    assert main([*argv, "--data", "digits", "--batch", "32", "--optimizer", "adam", "--json"]) == 0
    import json

    result = json.loads(capsys.readouterr().out)
    record = result["params"]["epochs"]
    assert result["devices"] == ["cpu:0", "cpu:1"] and record["world"] == 2 and record["optimizer"] == "Adam"
    assert record["final_metric"] >= 0.5


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["chexnet", "--data", "digits"], "--framework tensorflow --epochs trains mnist and resnet50, not chexnet"),
        (["mnist", "--data", "digits", "--weights", "w.pt"], "--weights and --save-weights are torch state_dicts"),
    ],
)
def test_refusals(argv, message, capsys):
    assert main(["run", *argv, "--framework", "tensorflow", "--launcher", "cpu", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_timed_tensorflow_run_takes_the_optimizer(capsys):
    argv = ["run", "mnist", "--framework", "tensorflow", "--launcher", "cpu", "--size", "tiny", "--warmup", "1"]
    assert main([*argv, "--optimizer", "sgd", "--lr", "0.05", "--json"]) == 0
    import json

    params = json.loads(capsys.readouterr().out)["params"]
    assert params["optimizer"] == "SGD" and params["learning_rate"] == pytest.approx(0.05)
