"""PyTorch workloads on the CPU at the tiny size: every workload trains, real-data formats load through workers,
bad inputs are GpulabErrors. The GPU paths (timing, no host syncs) run on GPU machines."""

import io
import itertools
import math
import os
import pathlib
import pickle
import re
import shlex
import shutil
import struct

import pytest

from gpulab.errors import GpulabError, UnknownValue
from gpulab.names import Precision
from gpulab.workloads import REGISTRY, RunConfig, build, default_sizes
from gpulab.workloads import data as wdata
from gpulab.workloads.cifar10 import data as cifar_data
from gpulab.workloads.mnist import data as mnist_data

torch = pytest.importorskip("torch")
NAMES = ["style_transfer", "mnist", "cifar10", "chexnet", "resnet50"]


def run(session, steps):
    return [float(session.step()) for _ in range(steps)]


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    pytest.importorskip("sklearn")
    root = tmp_path_factory.mktemp("digits")
    assert mnist_data.write_digits(root) == 1797
    return root


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar") / "cifar-10-batches-py"
    assert cifar_data.write_batches(root, per_batch=4) == 20
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
    assert list(REGISTRY) == NAMES
    sizes = default_sizes()
    assert sizes["style_transfer"]["full"] == (512, 1000) and sizes["resnet50"]["standard"] == (128, 100)
    assert all(list(table) == ["tiny", "quick", "standard", "full"] for table in sizes.values())
    with pytest.raises(UnknownValue) as err:
        build(RunConfig("vgg"), "cpu")
    assert (err.value.what, err.value.value, err.value.choices[:2]) == ("workload", "vgg", ("style_transfer", "mnist"))


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
    from gpulab.workloads.style_transfer import SIZES
    from gpulab.workloads.style_transfer.session import REFERENCE_ASPECT

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
        "import sys; from gpulab.workloads.images import default_image; "
        "img, desc = default_image('content'); print(desc, img.shape, 'sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["sample:china.jpg", "(427,", "640,", "3)", "False"]
    from sklearn.datasets import load_sample_image

    from gpulab.workloads.images import default_image

    assert (default_image("style")[0] == load_sample_image("flower.jpg")).all()


def test_style_transfer_images_and_options(tmp_path):
    from PIL import Image

    from gpulab.workloads.images import default_image

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
    from gpulab.workloads.style_transfer.vgg import vgg19_features

    path = tmp_path / "vgg19.pth"
    torch.save({f"features.{k}": v for k, v in vgg19_features(37, "max").state_dict().items()}, path)
    s = build(RunConfig("style_transfer", size="tiny", params={"width": 32, "vgg_weights": str(path)}), "cpu")
    assert s.info["weights"].startswith(f"{path} sha256:")
    s.finish()
    torch.save({"junk": torch.zeros(1)}, path)
    with pytest.raises(GpulabError, match=r"vgg19\.pth is not a VGG19 state dict \(no features\.0\.weight"):
        build(RunConfig("style_transfer", size="tiny", params={"vgg_weights": str(path)}), "cpu")


# ---------- style transfer: bad weights and image files are one line, named, with what to pass ----------

WEIGHTS_HINT = "pass vgg_weights=imagenet (torchvision's VGG19 weights, fetched on first use) or the file torchvision's"


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


def _weights_files(tmp_path):
    """name -> (path, what the message says is wrong) for files that are not VGG19 state dicts."""
    from gpulab.workloads.style_transfer.vgg import vgg19_features

    good = {f"features.{k}": v for k, v in vgg19_features(37, "max").state_dict().items()}
    files = {}

    def add(name, write, why):
        path = tmp_path / name
        write(path)
        files[name] = (path, why)

    add("random.pth", lambda p: p.write_bytes(bytes(range(256)) * 8), r"\(Unsupported operand \d+\)")
    add("text.pth", lambda p: p.write_text("not weights\n"), r"\(.+\)")
    add("truncated.pth", lambda p: torch.save(good, p) or p.write_bytes(p.read_bytes()[:4096]), r"\(.+\)")
    add("list.pth", lambda p: torch.save([torch.zeros(1)], p), r"\(it holds a list, not a dict of tensors\)")
    add("keys.pth", lambda p: torch.save({"fc.weight": torch.zeros(1)}, p), r"\(no features.0.weight; its keys start")
    add("intkeys.pth", lambda p: torch.save({0: torch.zeros(1)}, p), r"\(its keys are not all parameter names\)")
    add(
        "shape.pth",
        lambda p: torch.save({**good, "features.2.weight": torch.zeros(64, 64, 1, 1)}, p),
        r"\(features.2.weight has shape \[64, 64, 1, 1\], VGG19's has \[64, 64, 3, 3\]\)",
    )
    add(
        "notensor.pth",
        lambda p: torch.save({**good, "features.0.bias": [0.0] * 64}, p),
        r"\(features.0.bias is list, not a tensor\)",
    )
    return files


def test_vgg_weights_that_are_not_a_state_dict_are_one_line(tmp_path):
    from gpulab.workloads.style_transfer.vgg import load_vgg_weights, vgg19_features

    features = vgg19_features(30, "max")
    for path, why in _weights_files(tmp_path).values():
        with pytest.raises(GpulabError) as caught:
            load_vgg_weights(features, path)
        message = _one_line(caught)
        assert re.fullmatch(rf"style_transfer: {re.escape(str(path))} is not a VGG19 state dict {why}.*", message)
        assert message.endswith("(vgg19-dcbb9e9d.pth in ~/.cache/torch/hub/checkpoints)") and WEIGHTS_HINT in message
        assert "weights_only" not in message  # torch's advice to load without it would run the file's code


def test_vgg_weights_pickle_code_does_not_run(tmp_path):
    from gpulab.workloads.style_transfer.vgg import load_vgg_weights, vgg19_features

    marker, path = tmp_path / "ran", tmp_path / "evil.pth"
    path.write_bytes(pickle.dumps({"features.0.weight": _Touch(marker, "open")}, protocol=2))
    pickle.loads(path.read_bytes())  # the payload is live
    assert marker.exists()
    marker.unlink()
    with pytest.raises(GpulabError, match=r"evil\.pth is not a VGG19 state dict"):
        load_vgg_weights(vgg19_features(30, "max"), path)
    assert not marker.exists()


def _bad_paths(tmp_path):
    """(value of the parameter, what the message says) for paths that cannot be input files."""
    (tmp_path / "folder").mkdir(parents=True)
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "zero-link").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    device, pipe = "is a character device, not a file", "is a named pipe, not a file"
    return [
        ("", "the path is empty"),
        ("   ", "the path is empty"),
        (3, "3 is not a file path"),
        ({"a": 1}, r"\{'a': 1\} is not a file path"),
        (str(tmp_path / "missing"), f"{re.escape(str(tmp_path / 'missing'))} does not exist"),
        (str(tmp_path / "folder"), f"{re.escape(str(tmp_path / 'folder'))} is a directory, not a file"),
        (str(tmp_path / "empty"), f"file {re.escape(str(tmp_path / 'empty'))} is empty"),
        ("/dev/zero", f"/dev/zero {device}"),
        (str(tmp_path / "zero-link"), f"{re.escape(str(tmp_path / 'zero-link'))} {device}"),
        (str(tmp_path / "fifo"), f"{re.escape(str(tmp_path / 'fifo'))} {pipe}"),
    ]


@pytest.mark.parametrize("param", ["vgg_weights", "content", "style"])
def test_style_transfer_input_paths_are_checked_before_reading(tmp_path, param):
    hint = WEIGHTS_HINT if param == "vgg_weights" else "pass an image file Pillow reads"
    for value, why in _bad_paths(tmp_path / param):
        with pytest.raises(GpulabError) as caught:
            build(RunConfig("style_transfer", size="tiny", params={param: value}), "cpu")
        message = _one_line(caught)
        assert re.match(rf"style_transfer: parameter {param}: {why}; ", message), message
        assert hint in message
    if param == "style":  # each of several style images is checked, not only the first
        from PIL import Image

        Image.new("RGB", (40, 40)).save(tmp_path / "ok.png")
        styles = [str(tmp_path / "ok.png"), str(tmp_path / "missing.png")]
        with pytest.raises(GpulabError, match=r"parameter style: .*missing\.png does not exist"):
            build(RunConfig("style_transfer", params={param: styles}), "cpu")


@pytest.mark.parametrize("param", ["content", "style"])
def test_style_transfer_files_that_are_not_images(tmp_path, param):
    from PIL import Image

    from gpulab.workloads.images import default_image

    png = tmp_path / "photo.png"
    Image.fromarray(default_image("content", use_samples=False)[0]).save(png)
    cases = {
        "notes.txt": (b"just text\n", "cannot identify image file"),
        "random.jpg": (bytes(range(256)) * 4, "cannot identify image file"),
        "cut.png": (png.read_bytes()[:200], r".+"),
    }
    for name, (content, why) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(GpulabError) as caught:
            build(RunConfig("style_transfer", size="tiny", steps=1, params={param: str(path)}), "cpu")
        message = _one_line(caught)
        expected = rf"style_transfer: parameter {param}: {re.escape(str(path))} is not an image Pillow can read \({why}"
        assert re.match(expected, message), message
        assert message.endswith("; pass an image file Pillow reads (JPEG, PNG, ...)")
    s = build(RunConfig("style_transfer", size="tiny", steps=1, params={param: str(png), "width": 32}), "cpu")
    assert str(png) in (s.info["content"], *s.info["style"])
    s.finish()


@pytest.mark.parametrize("bad", ["random.pth", "keys.pth", "shape.pth", "empty", "folder", "/dev/zero"])
def test_vgg_weights_errors_through_the_cli(tmp_path, bad, capsys):
    from gpulab.cli import main

    (tmp_path / "folder").mkdir()
    (tmp_path / "empty").write_bytes(b"")
    files = _weights_files(tmp_path)
    path = files[bad][0] if bad in files else bad if bad.startswith("/") else tmp_path / bad
    argv = ["run", "style_transfer", "--launcher", "cpu", "--threads", "1", "--size", "tiny", "--warmup", "0"]
    assert main([*argv, "--steps", "1", "--param", f"vgg_weights={path}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("gpulab: error: style_transfer: ") and str(path) in lines[0]
    assert WEIGHTS_HINT in lines[0]


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
        ({"content": "/nonexistent.jpg"}, "content: /nonexistent.jpg does not exist"),
    ],
)
def test_style_transfer_bad_params(params, message):
    with pytest.raises(GpulabError, match=message):
        build(RunConfig("style_transfer", size="tiny", params=params), "cpu")


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        (RunConfig("mnist", batch=0), "batch must be a positive integer"),
        (RunConfig("mnist", params={"optimizer": "adam"}), "optimizer='adam' is invalid; expected one of adadelta"),
        (RunConfig("resnet50", params={"num_classes": 1}), "num_classes=1 is invalid"),
        (RunConfig("style_transfer", batch=4), "batch must be 1"),
    ],
)
def test_bad_config(cfg, message):
    with pytest.raises(GpulabError, match=message):
        build(cfg, "cpu")


@pytest.mark.parametrize(
    ("cfg", "what", "value", "choices"),
    [
        (RunConfig("mnist", size="huge"), "size", "huge", ("tiny", "quick", "standard", "full")),
    ],
)
def test_bad_names_in_a_config(cfg, what, value, choices):
    with pytest.raises(UnknownValue) as err:
        build(cfg, "cpu")
    assert (err.value.what, err.value.value, err.value.choices) == (what, value, choices)


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
    for name in mnist_data.FILES:
        shutil.copy(digits / name, raw / name)
        shutil.copy(digits / name, raw / name.replace("train", "t10k"))
    ds = tv.datasets.MNIST(str(tmp_path), train=True, download=False)
    assert len(ds) == 1797 and ds.data.shape == (1797, 28, 28)
    images, labels = mnist_data.read(tmp_path)  # finds MNIST/raw too
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
    for name in cifar_data.FILES:
        (tmp_path / name).write_bytes(b"not a pickle")
    with pytest.raises(GpulabError, match="data_batch_1 is not a CIFAR-10 batch"):
        build(RunConfig("cifar10", data=tmp_path), "cpu")


# ---------- CIFAR-10 batches: only numpy arrays are built, nothing in the file runs ----------


def _py2_str(raw: bytes) -> bytes:
    """A Python 2 str as cPickle writes it (SHORT_BINSTRING / BINSTRING); it loads as bytes with encoding="bytes"."""
    if len(raw) < 256:
        return b"U" + bytes([len(raw)]) + raw
    return b"T" + struct.pack("<i", len(raw)) + raw


def _py2_int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if 0 <= value < 65536:
        return b"M" + struct.pack("<H", value)
    return b"J" + struct.pack("<i", value)


def py2_cifar_batch(data, labels: list[int], batch_label: bytes, filenames: list[bytes]) -> bytes:
    """A batch laid out like the real data_batch_N: a dict pickled by Python 2 with protocol 2, whose b"data" is a
    numpy 1.x uint8 array (numpy.core.multiarray._reconstruct of numpy.ndarray, numpy.dtype('u1'), then its state)."""
    ops = [b"\x80\x02}(", _py2_str(b"batch_label"), _py2_str(batch_label), _py2_str(b"labels"), b"]("]
    ops += [*(_py2_int(v) for v in labels), b"e"]
    ops += [_py2_str(b"data"), b"cnumpy.core.multiarray\n_reconstruct\n", b"cnumpy\nndarray\n"]
    ops += [_py2_int(0), b"\x85", _py2_str(b"b"), b"\x87R"]
    ops += [b"(", _py2_int(1), _py2_int(data.shape[0]), _py2_int(data.shape[1]), b"\x86"]
    ops += [b"cnumpy\ndtype\n", _py2_str(b"u1"), _py2_int(0), _py2_int(1), b"\x87R"]
    ops += [b"(", _py2_int(3), _py2_str(b"|"), b"NNN", _py2_int(-1), _py2_int(-1), _py2_int(0), b"tb"]
    ops += [b"\x89", _py2_str(data.tobytes()), b"tb"]
    ops += [_py2_str(b"filenames"), b"](", *(_py2_str(f) for f in filenames), b"e", b"u."]
    return b"".join(ops)


def _globals_of(raw: bytes) -> set[str]:
    """The globals a (trusted) pickle imports while it loads."""
    seen: set[str] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            seen.add(f"{module}.{name}")
            return super().find_class(module, name)

    Recording(io.BytesIO(raw), encoding="bytes").load()
    return seen


def _cifar_dir(root, first: bytes):
    """data_batch_1 = `first`, data_batch_2..5 genuine-shaped batches."""
    np = pytest.importorskip("numpy")
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i, name in enumerate(cifar_data.FILES):
        data = rng.integers(0, 256, size=(3, 3072), dtype=np.uint8)
        names = [b"a.png", b"b.png", b"c.png"]
        batch = py2_cifar_batch(data, [i, 9, 0], f"training batch {i + 1} of 5".encode(), names)
        (root / name).write_bytes(first if i == 0 else batch)
    return root


def test_cifar10_reads_batches_laid_out_like_the_real_ones(tmp_path):
    np = pytest.importorskip("numpy")
    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    raw = py2_cifar_batch(data, [3, 7], b"training batch 1 of 5", [b"x_s_000001.png", b"y_s_000002.png"])
    # The globals every real batch references, and the keys Python 2 wrote as str.
    assert _globals_of(raw) == {"numpy.core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype"}
    entry = pickle.loads(raw, encoding="bytes")
    assert set(entry) == {b"batch_label", b"labels", b"data", b"filenames"}
    images, labels = cifar_data.read(_cifar_dir(tmp_path / "cifar-10-batches-py", raw))
    assert images.shape == (2 + 4 * 3, 3, 32, 32) and str(images.dtype) == "torch.uint8"
    assert (images[:2].reshape(2, 3072).numpy() == data).all()
    assert labels[:2].tolist() == [3, 7] and str(labels.dtype) == "torch.int64"
    # numpy 2 names numpy._core.multiarray instead; batches written here load too.
    assert cifar_data.write_batches(tmp_path / "generated", per_batch=2) == 10
    generated = _globals_of((tmp_path / "generated" / "data_batch_1").read_bytes())
    assert generated == {"numpy._core.multiarray._reconstruct", "numpy.ndarray", "numpy.dtype"}
    assert cifar_data.read(tmp_path / "generated")[0].shape == (10, 3, 32, 32)


class _Touch:
    """Unpickling this creates `path`, the way a crafted batch would run its code."""

    def __init__(self, path, how: str) -> None:
        self.path, self.how = str(path), how

    def __reduce__(self):
        if self.how == "open":
            return (open, (self.path, "w"))
        if self.how == "system":
            return (os.system, (f"touch {shlex.quote(self.path)}",))
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


@pytest.mark.parametrize("how", ["open", "system", "touch"])
@pytest.mark.parametrize("where", ["whole file", "inside a batch"])
def test_cifar10_crafted_pickle_is_refused_without_running(tmp_path, how, where):
    np = pytest.importorskip("numpy")
    marker = tmp_path / "ran"
    payload = _Touch(marker, how)
    if where == "whole file":
        crafted = pickle.dumps(payload, protocol=2)
    else:
        entry = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"batch_label": payload}
        crafted = pickle.dumps(entry, protocol=4)
    # The payload is live: plain pickle runs it.
    pickle.loads(crafted)
    assert marker.exists()
    marker.unlink()
    root = _cifar_dir(tmp_path / "cifar", crafted)
    with pytest.raises(GpulabError) as caught:
        cifar_data.read(root)
    message = str(caught.value)
    expected = r"data_batch_1 is not a CIFAR-10 batch: it references \S+\.\S+, which a CIFAR-10 batch never does"
    assert re.search(expected, message), message
    assert "\n" not in message and "cifar-10-python.tar.gz" in message
    assert not marker.exists()


def test_cifar10_foreign_global_with_odd_name_stays_one_line(tmp_path):
    # STACK_GLOBAL takes any strings, newlines included; the message must still be one line.
    name = b"sys\ntem\x00" + b"x" * 200
    crafted = b"\x80\x04\x8c\x02os\x8c" + bytes([len(name)]) + name + b"\x93)R."
    root = _cifar_dir(tmp_path / "cifar", crafted)
    with pytest.raises(GpulabError, match=r"it references 'os\.sys\\ntem\\x00x+'…, which") as caught:
        cifar_data.read(root)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "Ran out of input"),
        (b"not a pickle at all", "UnpicklingError"),
        (b"\xff" * 64, "UnpicklingError"),
        ("truncated", "truncated|Ran out of input|EOFError"),
        ([1, 2, 3], "it holds a list, not a dict"),
        ({"data": 1}, "no b'data' entry \\(it has 'data'\\)"),
        ({b"data": [[1, 2]], b"labels": [0]}, "b'data' is int64 \\(1, 2\\), not uint8 N×3072"),
        ("no labels", "no b'labels' entry"),
        ("bad labels", "labels outside 0..9"),
        ("short labels", "b'labels' is int64 \\(1,\\) for 2 images"),
        ("text labels", "b'labels' is <U1"),
    ],
)
def test_cifar10_damaged_batches_are_one_line(tmp_path, content, reason):
    np = pytest.importorskip("numpy")
    good = py2_cifar_batch(np.zeros((2, 3072), np.uint8), [1, 2], b"b", [b"a", b"b"])
    specials = {
        "truncated": good[: len(good) // 2],
        "no labels": pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}, protocol=4),
        "bad labels": py2_cifar_batch(np.zeros((2, 3072), np.uint8), [1, 12], b"b", [b"a", b"b"]),
        "short labels": pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, protocol=4),
        "text labels": pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": ["a", "b"]}, protocol=4),
    }
    if isinstance(content, str):
        raw = specials[content]
    elif isinstance(content, bytes):
        raw = content
    else:
        raw = pickle.dumps(content, protocol=4)
    root = _cifar_dir(tmp_path / "cifar", raw)
    with pytest.raises(GpulabError, match=f"data_batch_1 is not a CIFAR-10 batch .*: .*({reason})") as caught:
        cifar_data.read(root)
    assert "\n" not in str(caught.value) and "cifar-10-python.tar.gz" in str(caught.value)


def test_cifar10_crafted_batch_through_the_cli(tmp_path, capsys):
    from gpulab.cli import main

    marker = tmp_path / "ran"
    root = _cifar_dir(tmp_path / "cifar", pickle.dumps(_Touch(marker, "open"), protocol=2))
    argv = ["run", "cifar10", "--launcher", "cpu", "--size", "tiny", "--data", str(root), "--steps", "1"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulab: error: cifar10: ")
    assert "which a CIFAR-10 batch never does" in lines[0]
    assert not marker.exists()


@pytest.mark.parametrize("name", ["style_transfer", "mnist", "chexnet"])
def test_channels_last_and_bf16_on_cpu(name):
    s = build(RunConfig(name, size="tiny", precision=Precision.BF16, channels_last=True), "cpu")
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
    s = build(RunConfig("mnist", size="tiny", precision=Precision.TF32), "cpu")
    assert matmul.fp32_precision == "tf32"
    run(s, 1)
    s.finish()
    assert matmul.fp32_precision == before
    s = build(RunConfig("mnist", size="tiny", precision=Precision.FP32), "cpu")
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
    s = build(RunConfig(name, size="tiny", precision=Precision.TF32, channels_last=True), "cuda:0")
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
