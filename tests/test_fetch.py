"""Weights and data sets fetched through the frameworks' own download code (torch.hub, torchvision.datasets), from a
real HTTP server on 127.0.0.1 serving small files made here: a good file, a wrong checksum, a truncated body and a
server that is gone each end in one `gpulab: error:` line and leave nothing in the cache."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulab.cli import main
from gpulab.errors import GpulabError
from gpulab.workloads import fetch
from gpulab.workloads.mnist import data as mnist_data

torch = pytest.importorskip("torch")
GPULAB = Path(sys.executable).parent / "gpulab"


class Files(http.server.ThreadingHTTPServer):
    """path -> bytes; a path in `truncate` announces its full length and sends half of it; one in `stall` sends half
    of it, sets `stalled`, and sends nothing more until the server is shut down (a download under way)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.truncate: set[str] = set()
        self.stall: set[str] = set()
        self.stalled = threading.Event()
        self.released = threading.Event()
        self.requested: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Files

    def do_HEAD(self) -> None:  # torchvision asks for redirects with HEAD first
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        if body:
            self.server.requested.append(self.path)
        content = self.server.files.get(self.path)
        if content is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if body:
            half = self.path in self.server.truncate or self.path in self.server.stall
            self.wfile.write(content[: len(content) // 2] if half else content)
            self.wfile.flush()
            self.close_connection = True
            if self.path in self.server.stall:
                self.server.stalled.set()
                self.server.released.wait(60)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Files]:
    files = Files()
    thread = threading.Thread(target=files.serve_forever, daemon=True)
    thread.start()
    yield files
    files.released.set()
    files.shutdown()
    files.server_close()


@pytest.fixture(autouse=True)
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """torch.hub's and gpulab's caches in the test's folder; no mirror unless a test sets one."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setenv(fetch.CACHE_ENV, str(tmp_path / "gpulab"))
    monkeypatch.delenv(fetch.MIRROR_ENV, raising=False)
    return tmp_path


def _checkpoints() -> list[str]:
    folder = fetch.torch_checkpoints()
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _weights_file(stem: str, state: dict[str, object] | None = None) -> tuple[str, bytes]:
    """A torch.save'd state dict named as torch.hub names files: STEM-<first 8 hex digits of its sha256>.pth."""
    buffer = io.BytesIO()
    torch.save(state or {"w": torch.arange(6.0).reshape(2, 3)}, buffer)
    content = buffer.getvalue()
    return f"{stem}-{hashlib.sha256(content).hexdigest()[:8]}.pth", content


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gpulab: error:")]
    assert len(lines) == 1, err
    return lines[0]


# ---------- torch weights ----------


def test_good_weights_are_fetched_once_into_torch_hubs_cache(server: Files) -> None:
    name, content = _weights_file("tiny")
    server.files[f"/w/{name}"] = content
    path = fetch.fetch_weights(fetch.weights_at(f"{server.url}/w/{name}", "test weights"), progress=False)
    assert path == fetch.torch_checkpoints() / name and path.read_bytes() == content
    assert torch.load(path, weights_only=True)["w"].sum() == 15
    server.files.clear()  # the second use reads the cache: the server has nothing any more
    again = fetch.fetch_weights(fetch.weights_at(f"{server.url}/w/{name}", "test weights"), progress=False)
    assert again == path and server.requested == [f"/w/{name}"]


@pytest.mark.parametrize("fault", ["wrong checksum", "truncated", "server gone", "not found"])
def test_a_bad_download_is_one_line_and_leaves_no_file(server: Files, fault: str) -> None:
    name, content = _weights_file("tiny")
    if fault == "wrong checksum":
        name = "tiny-deadbeef.pth"
    if fault == "truncated":
        server.truncate.add(f"/{name}")
    if fault != "not found":
        server.files[f"/{name}"] = content
    url = f"{server.url}/{name}"
    if fault == "server gone":
        server.shutdown()
        server.server_close()
    with pytest.raises(GpulabError) as caught:
        fetch.fetch_weights(fetch.weights_at(url, "test weights"), progress=False)
    message = str(caught.value)
    assert "\n" not in message and url in message and fetch.MIRROR_ENV in message
    expected = {
        "wrong checksum": "published checksum",
        "truncated": "published checksum",
        "server gone": "refused",
        "not found": "HTTP 404",
    }[fault]
    assert expected in message
    assert _checkpoints() == []  # no partial file, no temporary file


def test_a_url_without_a_checksum_in_its_name_is_refused_before_any_download(server: Files) -> None:
    with pytest.raises(GpulabError, match="carries no checksum"):
        fetch.weights_at(f"{server.url}/weights.pth", "test weights")
    assert server.requested == []


def test_named_weights_come_from_torchvisions_own_urls_through_the_mirror(server: Files, monkeypatch, tmp_path) -> None:
    from gpulab.workloads.tv import import_torchvision

    models = import_torchvision().models
    published = {
        "vgg19": models.VGG19_Weights.IMAGENET1K_V1.url,
        "densenet121": models.DenseNet121_Weights.IMAGENET1K_V1.url,
        "resnet50": models.ResNet50_Weights.IMAGENET1K_V1.url,
    }
    monkeypatch.setenv(fetch.MIRROR_ENV, f"{server.url}/mirror/")
    for model, url in published.items():
        assert fetch.torch_weights(model).url == url
        name = url.rsplit("/", 1)[1]
        # The mirror serves a file that is not the published one: its hash prefix (in the name) refuses it.
        server.files[f"/mirror/{name}"] = b"not the weights"
        with pytest.raises(GpulabError, match="published checksum"):
            fetch.resolve_weights("imagenet", model, "test")
    assert server.requested == [f"/mirror/{u.rsplit('/', 1)[1]}" for u in published.values()]
    assert _checkpoints() == []


def test_a_mirror_folder_serves_the_file_by_its_published_name(monkeypatch, tmp_path) -> None:
    name, content = _weights_file("tiny")
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / name).write_bytes(content)
    monkeypatch.setenv(fetch.MIRROR_ENV, str(tmp_path / "mirror"))
    path = fetch.fetch_weights(fetch.weights_at(f"https://example.invalid/models/{name}", "test"), progress=False)
    assert path.read_bytes() == content


def test_style_transfer_loads_fetched_weights_and_a_failed_fetch_is_one_cli_line(server: Files, tmp_path, capsys):
    """`vgg_weights=URL` goes through the fetch and the same VGG19 loader as the real file; a small file stands in
    for the 548 MB one (VGG19's features in half precision, as many layers as the run uses)."""
    from gpulab.workloads.style_transfer.vgg import vgg19_features

    features = vgg19_features(32, "max")
    name, content = _weights_file("vgg19feat", {k: v.half() for k, v in features.state_dict().items()})
    server.files[f"/{name}"] = content
    report = tmp_path / "report.json"
    argv = ["run", "style_transfer", "--launcher", "cpu", "--threads", "1", "--size", "tiny", "--warmup", "0"]
    assert main([*argv, "--steps", "2", "--param", f"vgg_weights={server.url}/{name}", "--report", str(report)]) == 0
    from gpulab.report.io import load_report

    (row,) = load_report(report).results
    assert row.params["weights"].startswith(str(fetch.torch_checkpoints() / name))
    assert "stand_ins" not in row.params or not any("weights" in s for s in row.params["stand_ins"])
    capsys.readouterr()
    assert main([*argv, "--steps", "1", "--param", f"vgg_weights={server.url}/vgg19-deadbeef.pth"]) != 0
    line = _one_error_line(capsys)
    assert "HTTP 404" in line and "vgg_weights" not in _checkpoints()


# ---------- data sets ----------


def _mnist_archives(tmp_path: Path) -> dict[str, bytes]:
    """scikit-learn's digits written as MNIST's four .gz IDX files (the test split a copy of the training one)."""
    raw = tmp_path / "raw"
    mnist_data.write_digits(raw)
    files = {}
    for train, test in zip(mnist_data.FILES, mnist_data.TEST_FILES, strict=True):
        packed = gzip.compress((raw / train).read_bytes(), mtime=0)
        files[f"{train}.gz"] = files[f"{test}.gz"] = packed
    return files


def _resources(server: Files, files: dict[str, bytes], *, wrong: str | None = None) -> list[fetch.Resource]:
    out = []
    for name, content in files.items():
        server.files[f"/mnist/{name}"] = content
        md5 = "0" * 32 if name == wrong else hashlib.md5(content).hexdigest()
        out.append(fetch.Resource((f"{server.url}/mnist/{name}",), name, md5))
    return out


def test_a_data_set_is_fetched_checked_unpacked_and_read(server: Files, tmp_path: Path) -> None:
    resources = _resources(server, _mnist_archives(tmp_path))
    root = fetch.fetch_dataset("mnist", resources)
    assert root == fetch.cache_root() / "data" / "mnist"
    images, labels = mnist_data.read(root)
    assert images.shape == (1797, 1, 28, 28) and int(labels.max()) == 9
    assert mnist_data.read_test(root) is not None
    assert sorted(p.name for p in root.parent.iterdir()) == ["mnist"]  # no staging folder left


@pytest.mark.parametrize("fault", ["wrong checksum", "truncated", "server gone"])
def test_a_data_set_that_fails_to_fetch_leaves_nothing(server: Files, tmp_path: Path, fault: str) -> None:
    files = _mnist_archives(tmp_path)
    last = list(files)[-1]
    resources = _resources(server, files, wrong=last if fault == "wrong checksum" else None)
    if fault == "truncated":
        server.truncate.add(f"/mnist/{last}")
    if fault == "server gone":
        server.shutdown()
        server.server_close()
    with pytest.raises(GpulabError) as caught:
        fetch.fetch_dataset("mnist", resources)
    message = str(caught.value)
    assert "\n" not in message and "data set mnist" in message
    assert ("refused" if fault == "server gone" else "published checksum") in message
    folder = fetch.cache_root() / "data"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_named_data_sets_use_torchvisions_urls_and_md5s() -> None:
    from gpulab.workloads.tv import import_torchvision

    datasets = import_torchvision().datasets
    mnist = fetch.dataset_resources("mnist")
    assert [(r.filename, r.md5) for r in mnist] == list(datasets.MNIST.resources)
    assert all(r.urls == tuple(m + r.filename for m in datasets.MNIST.mirrors) for r in mnist)
    (cifar,) = fetch.dataset_resources("cifar10")
    assert (cifar.urls, cifar.filename, cifar.md5) == (
        (datasets.CIFAR10.url,),
        datasets.CIFAR10.filename,
        datasets.CIFAR10.tgz_md5,
    )


def test_data_mnist_on_the_command_line_fetches_through_the_mirror(server: Files, tmp_path, monkeypatch, capsys):
    """`--data mnist` with the mirror set: the published file names, the published MD5s (so the digits the mirror
    serves here are refused), one error line and nothing kept."""
    for name, content in _mnist_archives(tmp_path).items():
        server.files[f"/m/{name}"] = content
    monkeypatch.setenv(fetch.MIRROR_ENV, f"{server.url}/m")
    argv = ["run", "mnist", "--launcher", "cpu", "--threads", "1", "--size", "tiny", "--warmup", "0", "--steps", "1"]
    assert main([*argv, "--data", "mnist"]) != 0
    line = _one_error_line(capsys)
    assert "published checksum" in line and "train-images-idx3-ubyte.gz" in line
    assert server.requested[:1] == ["/m/train-images-idx3-ubyte.gz"]
    assert not (fetch.cache_root() / "data" / "mnist").exists()


# ---------- stopped downloads ----------


@pytest.mark.parametrize("what", ["weights", "data set"])
def test_a_download_stopped_by_sigterm_leaves_nothing_in_the_cache(server: Files, tmp_path: Path, what: str) -> None:
    """`gpulab run` SIGTERMed halfway through a download (the server has sent half the file and waits): one line,
    exit 143, and no partial file in torch.hub's cache or gpulab's, as a failed download leaves none."""
    run = ["run", "--launcher", "cpu", "--threads", "1", "--size", "tiny", "--warmup", "0", "--steps", "1"]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    if what == "weights":
        name = "vgg19feat-deadbeef.pth"
        server.files[f"/{name}"], server.stall = bytes(1 << 20), {f"/{name}"}
        argv = [run[0], "style_transfer", *run[1:], "--param", f"vgg_weights={server.url}/{name}"]
    else:
        for name, content in _mnist_archives(tmp_path).items():
            server.files[f"/m/{name}"] = content
        server.stall = {"/m/train-images-idx3-ubyte.gz"}
        env[fetch.MIRROR_ENV] = f"{server.url}/m"
        argv = [run[0], "mnist", *run[1:], "--data", "mnist"]
    proc = subprocess.Popen(
        [str(GPULAB), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    deadline = time.monotonic() + 120
    while not server.stalled.wait(0.1) and proc.poll() is None and time.monotonic() < deadline:
        pass
    assert server.stalled.is_set(), proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    lines = stderr.strip().splitlines()  # the download's progress, then the one line
    assert proc.returncode == 143 and [ln for ln in lines if "gpulab" in ln] == lines[-1:] == ["gpulab: terminated"]
    assert "Traceback" not in stderr, stderr
    caches = (tmp_path / "torch", tmp_path / "gpulab")
    assert [p for c in caches for p in c.rglob("*") if p.is_file() or ".partial" in p.name] == []


# ---------- Keras (TF side) ----------


@pytest.fixture
def keras_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pytest.importorskip("keras")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    return tmp_path / "keras"


@pytest.mark.parametrize("fault", [None, "wrong checksum", "truncated", "server gone"])
def test_keras_get_file_is_staged_and_checked(server: Files, keras_home: Path, fault: str | None) -> None:
    content = bytes(range(256)) * 64
    server.files["/k/w.h5"] = content
    md5 = "0" * 32 if fault == "wrong checksum" else hashlib.md5(content).hexdigest()
    if fault == "truncated":
        server.truncate.add("/k/w.h5")
    if fault == "server gone":
        server.shutdown()
        server.server_close()
    if fault is None:
        path = fetch.keras_file("w.h5", f"{server.url}/k/w.h5", md5)
        assert path == keras_home / "models" / "w.h5" and path.read_bytes() == content
        return
    with pytest.raises(GpulabError) as caught:
        fetch.keras_file("w.h5", f"{server.url}/k/w.h5", md5)
    assert "\n" not in str(caught.value)
    expected = {"wrong checksum": "published checksum", "truncated": "truncated", "server gone": "refused"}[fault]
    assert expected in str(caught.value)
    assert list((keras_home / "models").iterdir()) == []


def test_keras_vgg19_imagenet_uses_keras_own_url_and_hash_through_the_mirror(server: Files, keras_home, monkeypatch):
    """The application's own get_file call (its URL, its file_hash) goes through the mirror: a stand-in file there
    fails Keras's published hash; nothing is kept."""
    server.files["/m/vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5"] = b"not the weights"
    monkeypatch.setenv(fetch.MIRROR_ENV, f"{server.url}/m")
    with pytest.raises(GpulabError, match="published checksum"):
        fetch.keras_vgg19_notop()
    assert server.requested == ["/m/vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5"]
    assert list((keras_home / "models").iterdir()) == []


def test_chexnet_starts_from_fetched_densenet121_weights(server: Files, tmp_path: Path) -> None:
    """pretrained=URL: a DenseNet121 ImageNet-shaped file (1000 classes, the old key names torchvision's published
    file has, half precision to stay small) loads into CheXNet's model, all but its 14-finding classifier."""
    import re

    from gpulab.records import RunConfig
    from gpulab.workloads.chexnet import torch_model as chexnet
    from gpulab.workloads.tv import import_torchvision

    imagenet = import_torchvision().models.densenet121(weights=None)
    old = {
        re.sub(r"(denselayer\d+\.(?:norm|relu|conv))(\d)\.", r"\1.\2.", k): v.half()
        for k, v in imagenet.state_dict().items()
    }
    assert any(".norm.1." in k for k in old)
    name, content = _weights_file("densenet121", old)
    server.files[f"/{name}"] = content
    cfg = RunConfig(workload="chexnet", size="tiny", params={"pretrained": f"{server.url}/{name}"})
    session = chexnet.build(cfg, "cpu")
    assert "head classifier random" in session.info["weights"]
    assert session.info["weights"].startswith(str(fetch.torch_checkpoints() / name))
    conv = imagenet.state_dict()["features.denseblock1.denselayer1.conv1.weight"].half().float()
    assert torch.equal(session.model.state_dict()["features.denseblock1.denselayer1.conv1.weight"], conv)
    assert session.model.state_dict()["classifier.weight"].shape[0] == chexnet.CLASSES
    random = chexnet.build(RunConfig(workload="chexnet", size="tiny"), "cpu")
    assert random.info["weights"] == "random"


def test_a_mirror_folder_serves_a_data_set(tmp_path: Path, monkeypatch) -> None:
    """GPULAB_WEIGHTS_MIRROR as a folder: the archives are read from it by their published names, checked against
    their MD5s and unpacked (torchvision's own download code cannot read a file: URL)."""
    files = _mnist_archives(tmp_path)
    (tmp_path / "mirror").mkdir()
    resources = []
    for name, content in files.items():
        (tmp_path / "mirror" / name).write_bytes(content)
        resources.append(
            fetch.Resource((f"https://example.invalid/mnist/{name}",), name, hashlib.md5(content).hexdigest())
        )
    monkeypatch.setenv(fetch.MIRROR_ENV, str(tmp_path / "mirror"))
    root = fetch.fetch_dataset("mnist", resources)
    images, _ = mnist_data.read(root)
    assert images.shape == (1797, 1, 28, 28) and sorted(p.name for p in root.parent.iterdir()) == ["mnist"]


@pytest.mark.parametrize("held", ["nothing", "other files"])
def test_data_mnist_through_a_mirror_folder_is_one_clear_line(tmp_path: Path, held: str) -> None:
    """`gpulab run mnist --data mnist` with the mirror a folder: a missing file or one that is not the published
    archive (these digits are not MNIST) is one line naming the file, and nothing is kept."""
    import os
    import subprocess
    import sys

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    if held == "other files":
        for name, content in _mnist_archives(tmp_path).items():
            (mirror / name).write_bytes(content)
    env = {**os.environ, fetch.MIRROR_ENV: str(mirror), fetch.CACHE_ENV: str(tmp_path / "cache")}
    argv = ["run", "mnist", "--launcher", "cpu", "--threads", "1", "--size", "tiny", "--steps", "1", "--data", "mnist"]
    proc = subprocess.run(
        [sys.executable, "-m", "gpulab", *argv], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    expected = "does not exist" if held == "nothing" else "does not match its published checksum"
    assert f"{mirror}/train-images-idx3-ubyte.gz" in lines[0] and expected in lines[0], lines[0]
    assert "attribute" not in lines[0] and not (tmp_path / "cache" / "data" / "mnist").exists()
