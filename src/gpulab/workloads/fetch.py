"""Published weights and data sets, fetched on first use by the frameworks' own download code, with its checksums.

- torch weights: torchvision's URL for the named weights (read from torchvision at run time), downloaded by
  `torch.hub.download_url_to_file` with the SHA-256 prefix torch.hub reads from the file name (`vgg19-dcbb9e9d.pth`)
  into torch.hub's own cache (`$TORCH_HOME/hub/checkpoints`), where torchvision itself would put them.
- data sets: torchvision.datasets' URLs and MD5 sums (MNIST.resources, CIFAR10.tgz_md5), downloaded and unpacked by
  `torchvision.datasets.utils.download_and_extract_archive` into `$GPULAB_CACHE/data/<name>` (default
  ~/.cache/gpulab).
- Keras weights (TF side): the applications' own `get_file` calls, with their file_hash (see `keras_weights`).

Offline sites set GPULAB_WEIGHTS_MIRROR to a URL prefix or a folder holding the same files under their published
names; every fetch then reads from there, checked against the same checksums. A fetch that fails leaves nothing in
the cache: files are written into a temporary name beside their place and renamed there only once they check out.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.workloads import checking
from gpulab.workloads.registry import load

MIRROR_ENV = "GPULAB_WEIGHTS_MIRROR"
CACHE_ENV = "GPULAB_CACHE"
IMAGENET = "imagenet"  # the value that asks for a model's published ImageNet weights

# gpulab's model name -> torchvision's weights enum and member: the URL comes from torchvision at run time.
TORCH_WEIGHTS = {
    "vgg19": ("VGG19_Weights", "IMAGENET1K_V1"),
    "densenet121": ("DenseNet121_Weights", "IMAGENET1K_V1"),
    "resnet50": ("ResNet50_Weights", "IMAGENET1K_V1"),
}
# The data sets torchvision can download: name -> "MODULE:FUNCTION" of its archives, in its workload's data module
DATASETS = {"mnist": "gpulab.workloads.mnist.data:archives", "cifar10": "gpulab.workloads.cifar10.data:archives"}
URL_SCHEMES = ("http", "https", "file", "ftp")  # a mirror given as one of these is a URL prefix, else a folder
HASH_NAME = re.compile(r"-([a-f0-9]*)\.")  # torch.hub.HASH_REGEX: the SHA-256 prefix a download is checked against
MAX_ARCHIVE_BYTES = 4 << 30  # a data set archive (CIFAR-10's is 170 MB)
PROBE_S = 10.0  # how long a study's pre-flight waits for a weights URL to answer


def cache_root() -> Path:
    """gpulab's download cache: $GPULAB_CACHE, else $XDG_CACHE_HOME/gpulab, else ~/.cache/gpulab."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpulab"


def mirror() -> str | None:
    """The mirror set in GPULAB_WEIGHTS_MIRROR (a URL prefix or a folder), or None."""
    value = os.environ.get(MIRROR_ENV, "").strip()
    return value or None


def _url_name(url: str) -> str:
    return Path(urllib.parse.urlparse(url).path).name


def mirrored(url: str) -> str:
    """Where `url`'s file is read from: the mirror's file of the same name when a mirror is set, else `url`."""
    base = mirror()
    if base is None:
        return url
    name = _url_name(url)
    folder = mirror_folder()
    if folder is None:
        return base.rstrip("/") + "/" + urllib.parse.quote(name)
    return folder.resolve().joinpath(name).as_uri()


def mirror_folder() -> Path | None:
    """The mirror when GPULAB_WEIGHTS_MIRROR names a folder rather than a URL prefix, else None."""
    base = mirror()
    if base is None or urllib.parse.urlparse(base).scheme in URL_SCHEMES:
        return None
    return Path(base).expanduser()


def _reason(err: BaseException) -> str:
    """What went wrong, in a few words, for the one-line error."""
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError):
        reason = err.reason
        if isinstance(reason, OSError):
            return reason.strerror or str(reason)
        return str(reason)
    if isinstance(err, OSError):
        return err.strerror or str(err)
    text = " ".join(str(err).split())
    if text.startswith("URL fetch failure on "):  # Keras's wrapper: "URL fetch failure on URL: errno -- reason"
        text = text.split(" -- ", 1)[-1]
    return (text[:200] + "…") if len(text) > 200 else text or type(err).__name__


def _failed(what: str, url: str, place: Path, err: BaseException, instead: str = "the file's path") -> GpulabError:
    reason = _reason(err)
    if "hash" in reason or "corrupted" in reason:
        reason = f"the download does not match its published checksum ({reason}): truncated or altered"
    elif "retrieval incomplete" in reason:
        reason = f"the download stopped short ({reason}): truncated"
    return GpulabError(
        f"cannot fetch {what} from {url}: {reason}; nothing was kept in {place}. Set {MIRROR_ENV} to a URL or "
        f"folder that holds {_url_name(url)}, or pass {instead} instead"
    )


# ---------- torch weights ----------


@dataclass(frozen=True)
class Weights:
    """A weights file at `url` whose name carries the first hex digits of its SHA-256, as torch.hub's do."""

    what: str  # "VGG19 ImageNet weights"
    url: str

    @property
    def name(self) -> str:
        return _url_name(self.url)


def torch_weights(model: str) -> Weights:
    """torchvision's published ImageNet weights of `model` (vgg19, densenet121, resnet50)."""
    from gpulab.workloads.tv import import_torchvision

    enum, member = TORCH_WEIGHTS[model]
    url = getattr(import_torchvision().models, enum)[member].url
    return Weights(f"{model} ImageNet weights ({enum}.{member})", url)


def weights_at(url: str, what: str) -> Weights:
    """Weights at an http(s) URL whose file name carries its hash prefix (NAME-<sha256 prefix>.pth)."""
    name = _url_name(url)
    if not urllib.parse.urlparse(url).hostname:
        raise GpulabError(f"{what}: {url!r} names no host; give the weights' URL (https://HOST/NAME-<hash>.pth)")
    if not HASH_NAME.search(name):
        raise GpulabError(
            f"{what}: the file name {name!r} of {url} carries no checksum; name it as torch.hub does, "
            "NAME-<first hex digits of its sha256>.pth, so the download can be checked"
        )
    return Weights(what, url)


def torch_checkpoints() -> Path:
    """torch.hub's checkpoint folder ($TORCH_HOME/hub/checkpoints), where torchvision keeps downloaded weights."""
    import torch.hub

    return Path(torch.hub.get_dir()) / "checkpoints"


def fetch_weights(weights: Weights, progress: bool = True) -> Path:
    """The weights file in torch.hub's cache, downloaded first (mirror-aware, hash-checked) when absent."""
    import torch.hub

    folder = torch_checkpoints()
    final = folder / weights.name
    if final.is_file():
        return final
    match = HASH_NAME.search(weights.name)
    source = mirrored(weights.url)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # torch.hub writes to a temporary file beside `final`, checks the hash prefix, then renames it.
        torch.hub.download_url_to_file(source, str(final), match.group(1) if match else None, progress=progress)
    except Exception as err:  # urllib, OSError, torch.hub's RuntimeError for a wrong hash (its temp file is gone)
        raise _failed(weights.what, source, folder, err) from None
    return final


def resolve_weights(value: Any, model: str, what: str) -> Path | None:
    """A weights parameter's file: `imagenet` fetches torchvision's published weights of `model`, an http(s) URL
    fetches that file (its name carrying its hash prefix); anything else is not a download (None). While settings
    are checked (gpulab.workloads.checking) nothing is fetched: a URL must answer, and the name stands in."""
    if not isinstance(value, str):
        return None
    if value == IMAGENET:
        return Path(IMAGENET) if checking.active() else fetch_weights(torch_weights(model))
    if urllib.parse.urlparse(value).scheme in ("http", "https"):
        weights = weights_at(value, what)
        if checking.active():
            if checking.files_here():
                _answers(weights)
            return Path(weights.name)
        return fetch_weights(weights)
    return None


def _answers(weights: Weights) -> None:
    """Weights a run will fetch, checked without fetching them: already in torch.hub's cache, or a HEAD request
    to where they come from (the mirror's file, or the URL) answers."""
    if (torch_checkpoints() / weights.name).is_file():
        return
    source = mirrored(weights.url)
    try:
        if source.startswith("file:"):
            if not Path(urllib.request.url2pathname(urllib.parse.urlparse(source).path)).is_file():
                raise FileNotFoundError(f"no {weights.name} in the mirror folder")
        else:
            urllib.request.urlopen(urllib.request.Request(source, method="HEAD"), timeout=PROBE_S).close()
    except urllib.error.HTTPError as err:
        if err.code in (405, 501):  # a server that answers GET only
            return
        raise _unreachable(weights, source, err) from None
    except (OSError, ValueError) as err:
        raise _unreachable(weights, source, err) from None


def _unreachable(weights: Weights, source: str, err: BaseException) -> GpulabError:
    return GpulabError(
        f"{weights.what}: {source} cannot be fetched ({_reason(err)}); fix the URL, set {MIRROR_ENV} to a URL or "
        f"folder that holds {weights.name}, or pass the file's path instead"
    )


# ---------- data sets ----------


@dataclass(frozen=True)
class Resource:
    """One archive of a data set: where it may be fetched (in order), its file name and MD5."""

    urls: tuple[str, ...]
    filename: str
    md5: str


def dataset_resources(name: str) -> list[Resource]:
    """The archives torchvision.datasets downloads for `name`, with its URLs and MD5 sums (as its workload's data
    module reads them from torchvision)."""
    spec = DATASETS.get(name)
    if spec is None:
        raise GpulabError(f"no download known for data set {name!r}; known: {', '.join(DATASETS)}")
    archives: Callable[[], list[Resource]] = load(spec, f"the archives of data set {name}")
    return archives()


@contextlib.contextmanager
def _staging(final: Path) -> Iterator[Path]:
    """A temporary folder beside `final`, renamed to it when the block succeeds and removed whatever happens."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # another process put the same data set there first: keep theirs
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch_dataset(
    name: str, resources: Sequence[Resource] | None = None, *, on_fetch: Callable[[str], None] | None = None
) -> Path:
    """The data set's folder in gpulab's cache, downloaded and unpacked first when absent."""
    from gpulab.workloads.tv import import_torchvision

    final = cache_root() / "data" / name
    if final.is_dir():
        return final
    utils = import_torchvision().datasets.utils
    items = list(resources) if resources is not None else dataset_resources(name)
    with _staging(final) as tmp:
        for item in items:
            local = mirror_folder()
            if local is not None:
                _unpack_from_folder(utils, local / item.filename, item, tmp, f"data set {name} ({item.filename})")
                continue
            sources = (mirrored(item.urls[0]),) if mirror() else item.urls
            last: tuple[str, BaseException] | None = None
            for url in sources:
                if on_fetch:
                    on_fetch(url)
                try:
                    utils.download_and_extract_archive(
                        url, download_root=str(tmp), filename=item.filename, md5=item.md5, remove_finished=True
                    )
                    last = None
                    break
                except Exception as err:  # urllib, OSError, torchvision's RuntimeError for a wrong MD5, tarfile
                    last = (url, err)
                    with contextlib.suppress(OSError):
                        (tmp / item.filename).unlink()
            if last is not None:
                folder = "the data set's folder with --data"
                raise _failed(f"data set {name} ({item.filename})", last[0], final.parent, last[1], folder)
    return final


def _unpack_from_folder(utils: Any, source: Path, item: Resource, tmp: Path, what: str) -> None:
    """The mirror folder's copy of `item` checked against its MD5 and unpacked into `tmp`. torchvision's download
    code cannot read a file: URL (its response has no length), so the archive is copied in first: torchvision then
    finds it there, checks it and only unpacks it."""
    from gpulab.paths import input_file

    fix = f"put the published {item.filename} in the {MIRROR_ENV} folder, or pass the data set's folder with --data"
    try:
        shutil.copyfile(
            input_file(source, f"{what}: the mirror's file", fix, limit=MAX_ARCHIVE_BYTES), tmp / item.filename
        )
    except OSError as err:
        raise _failed(what, str(source), tmp.parent, err, "the data set's folder with --data") from None
    if not utils.check_integrity(str(tmp / item.filename), item.md5):
        raise GpulabError(
            f"{what}: {source} does not match its published checksum (MD5 {item.md5}): not the published file, "
            f"truncated or altered; nothing was kept: {fix}"
        )
    utils.download_and_extract_archive(
        source.as_uri(), download_root=str(tmp), filename=item.filename, md5=item.md5, remove_finished=True
    )


# ---------- Keras weights (TF side) ----------


def keras_cache() -> Path:
    """Keras's own cache folder ($KERAS_HOME, else ~/.keras), where its applications keep downloaded weights."""
    return Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras").expanduser()


def keras_file(fname: str, origin: str, file_hash: str | None, cache_subdir: str = "models", what: str = "") -> Path:
    """Keras's `get_file` for one file, mirror-aware, into Keras's cache: downloaded into a temporary folder beside
    its place, checked against `file_hash` by Keras, and renamed into place only then."""
    from keras.utils import get_file

    folder = keras_cache() / cache_subdir
    final = folder / fname
    source = mirrored(origin)
    what = what or f"Keras file {fname}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{fname}.", suffix=".partial", dir=folder) as tmp:
            got = Path(get_file(fname, source, file_hash=file_hash, cache_dir=tmp, cache_subdir="."))
            os.replace(got, final)
    except GpulabError:
        raise
    except Exception as err:  # Keras wraps urllib's errors in Exception and raises ValueError for a wrong hash
        raise _failed(what, source, folder, err) from None
    return final


@contextlib.contextmanager
def keras_fetching() -> Iterator[list[Path]]:
    """While open, Keras's applications download their published weights through `keras_file` (their own URL and
    file_hash, the mirror, staged writes); the list collects the files they asked for."""
    from keras.src.utils import file_utils

    original = file_utils.get_file
    asked: list[Path] = []

    def get_file(fname: str, origin: str, **kwargs: Any) -> str:
        cache_dir = kwargs.get("cache_dir")
        subdir = kwargs.get("cache_subdir", "datasets")
        final = Path(cache_dir or keras_cache()) / subdir / fname
        expected = kwargs.get("file_hash")
        if not (final.is_file() and (expected is None or file_utils.validate_file(str(final), expected))):
            final = keras_file(fname, origin, expected, subdir)
        asked.append(final)
        return str(final)

    file_utils.get_file = get_file
    try:
        yield asked
    finally:
        file_utils.get_file = original


def keras_vgg19_notop() -> Path:
    """Keras's published VGG19 ImageNet weights without the top (as its VGG19 application downloads them)."""
    import keras

    with keras_fetching() as asked:
        keras.applications.VGG19(include_top=False, weights=IMAGENET)
    return asked[-1]
