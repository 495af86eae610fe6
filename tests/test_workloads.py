"""PyTorch workloads on the CPU at the tiny size: every workload trains, real-data formats load through workers,
bad inputs are GpulabErrors. The GPU paths (timing, no host syncs) run on GPU machines."""

import itertools
import math
import shutil

import pytest

from gpulab.errors import GpulabError
from gpulab.workloads import WORKLOADS, RunConfig, build, default_sizes
from gpulab.workloads import data as wdata

torch = pytest.importorskip("torch")
NAMES = ["style_transfer", "mnist", "cifar10", "chexnet", "resnet50"]


def run(session, steps):
    return [float(session.step()) for _ in range(steps)]


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    pytest.importorskip("sklearn")
    root = tmp_path_factory.mktemp("digits")
    assert wdata.write_digits_mnist(root) == 1797
    return root


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar") / "cifar-10-batches-py"
    assert wdata.write_cifar10_batches(root, per_batch=4) == 20
    return root.parent


@pytest.fixture(scope="module")
def xrays(tmp_path_factory):
    root = tmp_path_factory.mktemp("xrays")
    wdata.write_image_folder(root, 6, label_columns=14)
    return root


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    wdata.write_image_folder(root, 6, label_columns=1, classes=285)
    return root


def test_registry():
    assert list(WORKLOADS) == NAMES
    sizes = default_sizes()
    assert sizes["style_transfer"]["full"] == (512, 1000) and sizes["resnet50"]["standard"] == (128, 100)
    assert all(list(table) == ["tiny", "quick", "standard", "full"] for table in sizes.values())
    with pytest.raises(GpulabError, match="unknown workload 'vgg'; choose one of style_transfer, mnist"):
        build(RunConfig("vgg"), "cpu")


@pytest.mark.parametrize("name", NAMES)
def test_tiny_trains_on_synthetic_data(name):
    s = build(RunConfig(name, size="tiny"), "cpu")
    losses = run(s, 2)
    assert all(math.isfinite(v) for v in losses)
    assert s.steps >= 2 and s.samples_per_step >= 1
    assert s.info["workload"] == name and s.info["precision"] == "fp32" and s.info["tf32"] is False
    assert s.info["data"] in ("synthetic", "sample:china.jpg", "generated:content")
    assert (s.model is None) == (name == "style_transfer")
    assert s.finish()["steps_run"] == 2


def test_style_transfer_converges_and_writes_its_image(tmp_path):
    from PIL import Image

    out = tmp_path / "out" / "styled.png"
    s = build(RunConfig("style_transfer", size="tiny", params={"output": str(out)}), "cpu")
    assert s.steps == 10 and s.samples_per_step == 1
    assert s.info["image_hw"] == [66, 64] and s.info["weights"] == "random" and s.info["vgg_layers"] == 30
    losses = run(s, s.steps)
    assert losses[-1] < 0.5 * losses[0]
    assert all(b < a for a, b in itertools.pairwise(losses))
    facts = s.finish()
    assert facts["output"] == str(out) and facts["final_loss"] == pytest.approx(losses[-1])
    with Image.open(out) as img:
        assert img.size == (64, 66) and img.mode == "RGB"


def test_style_transfer_default_size_is_the_reference_shape():
    from gpulab.workloads.style_transfer import REFERENCE_ASPECT, SIZES

    assert SIZES["full"] == (512, 1000)
    assert round(512 * REFERENCE_ASPECT[0] / REFERENCE_ASPECT[1]) == 532


def test_style_transfer_weights_change_the_loss():
    def first_loss(**params):
        s = build(RunConfig("style_transfer", size="tiny", params={"width": 32, **params}), "cpu")
        loss = float(s.step())
        s.finish()
        return loss

    base = first_loss()
    assert first_loss(content_weight=50.0) > base
    assert first_loss(style_weight=0.0) < base
    assert first_loss(tv_weight=0.0) < base
    assert first_loss(content_weight_blend=0.5) != base
    assert first_loss(style_layer_weight_exp=2.0) != base


def test_style_transfer_sample_photos_load_without_importing_scikit_learn():
    """A sweep pays every import once per run: the bundled photos are read from disk, pixel for pixel sklearn's."""
    import subprocess
    import sys

    code = (
        "import sys; from gpulab.workloads.style_transfer import default_image; "
        "img, desc = default_image('content'); print(desc, img.shape, 'sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["sample:china.jpg", "(427,", "640,", "3)", "False"]
    from sklearn.datasets import load_sample_image

    from gpulab.workloads.style_transfer import default_image

    assert (default_image("style")[0] == load_sample_image("flower.jpg")).all()


def test_style_transfer_images_and_options(tmp_path):
    from PIL import Image

    from gpulab.workloads.style_transfer import default_image

    generated, desc = default_image("style", use_samples=False)
    assert generated.shape == (427, 640, 3) and desc == "generated:style"
    assert (generated == default_image("style", use_samples=False)[0]).all()
    content, style2 = tmp_path / "c.png", tmp_path / "s.png"
    Image.fromarray(generated[:200, :300]).save(content)
    Image.fromarray(default_image("content", use_samples=False)[0]).save(style2)
    params = {
        "width": 48,
        "content": str(content),
        "style": [str(content), str(style2)],
        "style_scales": [1.0, 0.5],
        "pooling": "avg",
        "initial": "content",
        "content_weight_blend": 0.3,
    }
    s = build(RunConfig("style_transfer", size="tiny", steps=2, params=params), "cpu")
    assert s.info["image_hw"] == [32, 48] and s.info["style_hw"] == [[32, 48], [32, 48]]
    assert s.info["vgg_layers"] == 32 and s.info["data"] == f"real:{content}" and s.steps == 2
    assert all(math.isfinite(v) for v in run(s, 2))
    s.finish()


def test_style_transfer_loads_vgg_weights(tmp_path):
    from gpulab.workloads.style_transfer import vgg19_features

    path = tmp_path / "vgg19.pth"
    torch.save({f"features.{k}": v for k, v in vgg19_features(37, "max").state_dict().items()}, path)
    s = build(RunConfig("style_transfer", size="tiny", params={"width": 32, "vgg_weights": str(path)}), "cpu")
    assert s.info["weights"].startswith(f"{path} sha256:")
    s.finish()
    torch.save({"junk": torch.zeros(1)}, path)
    with pytest.raises(GpulabError, match="not a torchvision VGG19 state_dict"):
        build(RunConfig("style_transfer", size="tiny", params={"vgg_weights": str(path)}), "cpu")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"pooling": "min"}, "pooling='min' is invalid; expected one of max, avg"),
        ({"initial": "zeros"}, "initial='zeros' is invalid; expected one of noise, content"),
        ({"style_weight": "lots"}, "style_weight='lots' is invalid; expected a number ≥ 0"),
        ({"content_weight_blend": 2}, "content_weight_blend=2 is invalid"),
        ({"width": 8}, "width=8 is invalid; expected an integer ≥ 32"),
        ({"style_scales": [1.0, 2.0]}, "style_scales has 2 values for 1 style image"),
        ({"colour": 1}, "unknown parameter\\(s\\) colour; known: .*pooling"),
        ({"content": "/nonexistent.jpg"}, "content: file /nonexistent.jpg does not exist"),
    ],
)
def test_style_transfer_bad_params(params, message):
    with pytest.raises(GpulabError, match=message):
        build(RunConfig("style_transfer", size="tiny", params=params), "cpu")


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (RunConfig("mnist", precision="fp16"), "precision 'fp16' is not supported; choose one of fp32, tf32, bf16"),
        (RunConfig("mnist", size="huge"), "size 'huge' is not known; choose one of tiny, quick, standard, full"),
        (RunConfig("mnist", batch=0), "batch must be a positive integer"),
        (RunConfig("mnist", params={"optimizer": "adam"}), "optimizer='adam' is invalid; expected one of adadelta"),
        (RunConfig("resnet50", params={"num_classes": 1}), "num_classes=1 is invalid"),
        (RunConfig("style_transfer", batch=4), "batch must be 1"),
    ],
)
def test_bad_config(cfg, message):
    with pytest.raises(GpulabError, match=message):
        build(cfg, "cpu")


def test_mnist_learns_real_digits(digits):
    s = build(RunConfig("mnist", size="tiny", batch=64, data=digits, num_workers=2, seed=1), "cpu")
    assert s.info["data"] == f"real:{digits}"
    losses = run(s, 24)  # Adadelta, lr 1.0: the mean loss roughly halves (0.42-0.46 over seeds 0-5)
    assert sum(losses[-6:]) < 0.7 * sum(losses[:6])
    assert s.finish() == {"steps_run": 24, "epochs_completed": 0}


def test_digits_idx_files_are_mnist_format(digits, tmp_path):
    tv = pytest.importorskip("gpulab.workloads.tv").import_torchvision()
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in wdata.MNIST_FILES:
        shutil.copy(digits / name, raw / name)
        shutil.copy(digits / name, raw / name.replace("train", "t10k"))
    ds = tv.datasets.MNIST(str(tmp_path), train=True, download=False)
    assert len(ds) == 1797 and ds.data.shape == (1797, 28, 28)
    images, labels = wdata.read_mnist(tmp_path)  # finds MNIST/raw too
    assert (images[:, 0] == ds.data).all() and (labels == ds.targets).all()


def test_cifar10_pickles_through_workers(cifar):
    s = build(RunConfig("cifar10", size="tiny", batch=4, data=cifar, num_workers=2, channels_last=True), "cpu")
    assert s.info["data"] == f"real:{cifar}" and s.info["channels_last"]
    losses = run(s, 6)  # 20 images, 5 batches an epoch
    assert all(math.isfinite(v) for v in losses)
    assert s.finish() == {"steps_run": 6, "epochs_completed": 1}


@pytest.mark.parametrize("name", ["chexnet", "resnet50"])
def test_image_folder_through_workers(name, xrays, photos):
    root = xrays if name == "chexnet" else photos
    s = build(RunConfig(name, size="tiny", batch=2, data=root, num_workers=2), "cpu")
    assert all(math.isfinite(v) for v in run(s, 4))  # 3 batches an epoch
    assert s.finish()["epochs_completed"] == 1
    assert s.info["data"] == f"real:{root}" and s.info["image_hw"] == [64, 64]


def test_labels_csv_given_directly(photos):
    s = build(RunConfig("resnet50", size="tiny", data=photos / "labels.csv", num_workers=0), "cpu")
    assert math.isfinite(run(s, 1)[0])
    s.finish()


def test_bad_data_paths(tmp_path, photos):
    cases = [
        (RunConfig("mnist", data=tmp_path / "absent"), "data path .*absent does not exist"),
        (RunConfig("mnist", data=tmp_path), "expected train-images-idx3-ubyte and train-labels-idx1-ubyte"),
        (RunConfig("cifar10", data=tmp_path), "expected data_batch_1, data_batch_2, .*data_batch_5"),
        (RunConfig("chexnet", data=tmp_path), "no labels.csv in .*columns path,l1..l14"),
        (RunConfig("chexnet", data=photos), "not a labels CSV with columns path,l1..l14"),
        (RunConfig("resnet50", data=photos, batch=7), "has 6 samples, fewer than one batch of 7"),
    ]
    for cfg, message in cases:
        with pytest.raises(GpulabError, match=message):
            build(cfg, "cpu")
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"garbage")
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(b"garbage!")
    with pytest.raises(GpulabError, match="train-images-idx3-ubyte is not a valid IDX file"):
        build(RunConfig("mnist", data=tmp_path), "cpu")
    for name in wdata.CIFAR_FILES:
        (tmp_path / name).write_bytes(b"not a pickle")
    with pytest.raises(GpulabError, match="data_batch_1 is not a CIFAR-10 python batch"):
        build(RunConfig("cifar10", data=tmp_path), "cpu")


@pytest.mark.parametrize("name", ["style_transfer", "mnist", "chexnet"])
def test_channels_last_and_bf16_on_cpu(name):
    s = build(RunConfig(name, size="tiny", precision="bf16", channels_last=True), "cpu")
    assert s.info["autocast"] == "bf16" and s.info["channels_last"] and s.info["tf32"]
    assert all(math.isfinite(v) for v in run(s, 2))
    if s.model is not None:
        conv = next(m for m in s.model.modules() if isinstance(m, torch.nn.Conv2d))
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    s.finish()


def test_tf32_setting_lasts_the_session():
    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):
        pytest.skip("torch without fp32_precision")
    before = matmul.fp32_precision
    s = build(RunConfig("mnist", size="tiny", precision="tf32"), "cpu")
    assert matmul.fp32_precision == "tf32"
    run(s, 1)
    s.finish()
    assert matmul.fp32_precision == before
    s = build(RunConfig("mnist", size="tiny", precision="fp32"), "cpu")
    assert matmul.fp32_precision == "ieee"
    s.finish()
    assert matmul.fp32_precision == before


@pytest.mark.parametrize("wrapper", [lambda m: m, torch.nn.DataParallel])
def test_wrap(wrapper):
    device = "cuda:0" if torch.cuda.is_available() else "cpu"  # DataParallel wants the model on the first GPU there
    s = build(RunConfig("mnist", size="tiny"), device)
    inner = s.model
    s.wrap(wrapper)
    assert all(math.isfinite(v) for v in run(s, 2))
    assert s.info["wrapper"] == type(s.model).__name__
    assert next(s.model.parameters()) is next(inner.parameters())
    s.finish()
    st = build(RunConfig("style_transfer", size="tiny", params={"width": 32}), device)
    st.wrap(wrapper)  # nothing to wrap
    assert st.model is None and math.isfinite(run(st, 1)[0])
    st.finish()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", NAMES)
def test_step_does_not_synchronise_on_cuda(name):
    s = build(RunConfig(name, size="tiny", precision="tf32", channels_last=True), "cuda:0")
    run(s, 2)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            s.step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    s.finish()


def test_torchvision_imports_with_or_without_its_compiled_ops():
    from gpulab.workloads.tv import import_torchvision, torchvision_status

    tv = import_torchvision()
    assert import_torchvision() is tv
    assert torchvision_status() in ("native", "without ops") or torchvision_status().startswith("shim:")
    model = tv.models.resnet18(num_classes=3).eval()
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 3)
