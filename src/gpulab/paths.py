"""File arguments checked the same way by every command: inputs read whole and bounded, outputs checked up front.

An input must be a regular file (a directory, a character device such as /dev/zero or a FIFO is refused before
anything is read, so nothing is read without end), no larger than what such a file can be, and text inputs must be
UTF-8. An output is checked before the first step of the work that produces it, so hours of training or a whole
validation run are never thrown away because the result cannot be written, and never lands on one of the inputs.
Every problem is a GpulabError that names the file, what is wrong and what to do.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from gpulab.errors import GpulabError

MiB = 1024 * 1024
DEFAULT_INPUT_LIMIT = 256 * MiB
CAPTURE_LIMIT = 64 * MiB  # a tool's text capture; nvidia-smi -q -x of 8 GPUs is about 0.5 MiB


class InputFileError(GpulabError):
    """An input file that cannot be read as what it should be."""


class OutputPathError(GpulabError):
    """An output path that cannot be written."""


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "a special file")


def shown(path: Path | str) -> str:
    """A path for a one-line message: quoted when it holds control characters (a newline would break the line)."""
    text = str(path)
    return repr(text) if _CONTROL.search(text) else text


def os_error_reason(err: OSError, path: Path | str | None = None) -> str:
    """One phrase for an OSError, with the fix where there is an obvious one."""
    where = f"{path}: " if path is not None else (f"{err.filename}: " if err.filename else "")
    code = err.errno
    if code == errno.ENOENT:
        return f"{where}no such file or directory; check the path"
    if code == errno.ENOTDIR:
        return f"{where}a part of the path is a file, not a directory; check the path"
    if code == errno.EISDIR:
        return f"{where}is a directory; name a file"
    if code in (errno.EACCES, errno.EPERM):
        return f"{where}permission denied; fix the permissions or choose another path"
    if code == errno.EROFS:
        return f"{where}read-only file system; choose a writable path"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"{where}no space left on the device; free some space or choose another path"
    if code == errno.ENAMETOOLONG:
        return f"{where}the name is too long; choose a shorter path"
    if code == errno.ELOOP:
        return f"{where}too many levels of symbolic links; check the path"
    return f"{where}{err.strerror or err}"


def _refuse(what: str, problem: str, fix: str) -> InputFileError:
    return InputFileError(f"{what} {problem}; {fix}" if fix else f"{what} {problem}")


def _open_regular(path: Path, what: str, fix: str, limit: int) -> int:
    """A descriptor of `path`, checked to be a regular file of at most `limit` bytes.

    Opened non-blocking and checked on the descriptor itself, so a FIFO cannot hang the open and nothing can be
    swapped in between the check and the read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _refuse(what, f"{shown(path)} does not exist", fix) from None
    except NotADirectoryError:
        raise _refuse(what, f"{shown(path)}: a part of the path is a file, not a directory", fix) from None
    except IsADirectoryError:
        raise _refuse(what, f"{shown(path)} is a directory, not a file", fix) from None
    except OSError as err:
        raise _refuse(what, os_error_reason(err, shown(path)), fix) from None
    except ValueError:  # a NUL in the path
        raise _refuse(what, f"{shown(path)} is not a valid path (it holds a NUL byte)", fix) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _refuse(what, f"{shown(path)} is {_kind(st.st_mode)}, not a file", fix)
    if st.st_size > limit:
        os.close(fd)
        raise _refuse(
            what,
            f"{shown(path)} is {st.st_size / MiB:.0f} MiB, more than such a file can be ({limit / MiB:g} MiB)",
            fix,
        )
    return fd


def input_file(path: Path | str, what: str, fix: str = "", *, limit: int = DEFAULT_INPUT_LIMIT) -> Path:
    """Check that `path` is a readable regular file of at most `limit` bytes; returns it as a Path (for loaders
    that open the file themselves). `what` names the file's role ("nvidia-smi XML capture"), `fix` says how to get
    a right one."""
    os.close(_open_regular(Path(path), what, fix, limit))
    return Path(path)


def read_input_bytes(path: Path | str, what: str, fix: str = "", *, limit: int = DEFAULT_INPUT_LIMIT) -> bytes:
    """The bytes of a checked input file (never more than `limit` + 1 are read)."""
    path = Path(path)
    with os.fdopen(_open_regular(path, what, fix, limit), "rb") as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as err:
            raise _refuse(what, os_error_reason(err, shown(path)), fix) from None
    if len(data) > limit:  # it grew while we read it
        raise _refuse(what, f"{shown(path)} is larger than {limit / MiB:g} MiB", fix)
    return data


def read_input_text(path: Path | str, what: str, fix: str = "", *, limit: int = DEFAULT_INPUT_LIMIT) -> str:
    """The UTF-8 text of a checked input file; bytes that are not UTF-8 are an error naming the offset."""
    data = read_input_bytes(path, what, fix, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        problem = f"{shown(path)} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})"
        raise _refuse(what, problem, fix) from None


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same resolved path, or a hard link / bind mount of it."""
    try:
        if a.resolve() == b.resolve():
            return True
    except (OSError, RuntimeError):  # a symbolic link loop: samefile below has the last word
        pass
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def _writable(directory: Path) -> bool:
    # Effective ids: what the process can actually write, also when run set-uid or with a changed euid.
    if os.access in os.supports_effective_ids:
        return os.access(directory, os.W_OK | os.X_OK, effective_ids=True)
    return os.access(directory, os.W_OK | os.X_OK)


def _creatable(directory: Path, what: str, path: Path) -> None:
    """The nearest existing ancestor of `directory` must be a writable directory (the rest is created)."""
    probe = directory
    while not probe.exists() and not probe.is_symlink() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        kind = "a file" if probe.is_file() else "a broken symbolic link" if probe.is_symlink() else "a special file"
        raise OutputPathError(f"{what} {path}: {probe} is {kind}, not a directory; choose a path inside a directory")
    if not _writable(probe):
        raise OutputPathError(
            f"{what} {path}: directory {probe} is not writable; fix its permissions or choose another path"
        )


class Output(NamedTuple):
    path: Path
    what: str  # how the message names it: "--md", "the Markdown view"
    name: str = "out"  # a file name to suggest when `path` is a directory: "report.md"
    fix: str = "choose another path"  # the advice when `path` is an input
    follow_link: bool = False  # only `run --report`, which appends to the file a link names by design


def check_output(out: Output, inputs: Iterable[Path | str] = (), kind: str = "file") -> Path:
    """Refuse `out.path` when it is one of `inputs` (the input `kind`), a directory, not a regular file, or
    cannot be created (an ancestor is not a directory, or the nearest existing directory is not writable)."""
    path, what = Path(out.path), out.what
    for source in inputs:
        if same_file(path, Path(source)):
            raise OutputPathError(
                f"{what} {path} is the input {kind} {source}; writing it would destroy the {kind}: {out.fix}"
            )
    if not out.follow_link:  # checked before any work, so no run is thrown away at the end
        refuse_link(path, what)
    try:
        st: os.stat_result | None = path.stat()
    except (FileNotFoundError, NotADirectoryError):  # an ancestor that is a file is named below
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputPathError(f"{what} {path} is a directory; name a file inside it, e.g. {path / out.name}")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputPathError(f"{what} {path} exists and is not a regular file; choose another path")
    if st is not None and not os.access(path, os.W_OK):
        raise OutputPathError(f"{what} {path} is not writable; fix its permissions or choose another path")
    _creatable(path.parent, what, path)
    return path


def check_outputs(outputs: Iterable[Output], inputs: Iterable[Path | str] = (), kind: str = "file") -> None:
    """`check_output` for each output, and refuse two outputs that are the same file."""
    inputs = list(inputs)
    seen: list[Output] = []
    for out in outputs:
        check_output(out, inputs, kind)
        for other in seen:
            if same_file(Path(out.path), Path(other.path)):
                raise OutputPathError(f"{other.what} and {out.what} both name {out.path}; give each its own file")
        seen.append(out)


def output_file(path: Path | str, what: str, *, inputs: Iterable[Path | str] = ()) -> Path:
    """Check, before any work, that `path` can be written as a file and is none of `inputs`; returns it."""
    return check_output(Output(Path(path), what, "report.json"), inputs)


def output_dir(path: Path | str, what: str) -> Path:
    """Check, before any work, that `path` is (or can be created as) a writable directory; returns it."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{what} {path} is a file, not a directory; choose a directory")
    _creatable(path, what, path)
    return path


# -- symbolic links ------------------------------------------------------------------------------------------
def link_refusal(path: Path | str, what: str = "") -> OutputPathError:
    """The one-line refusal of an output that is a symbolic link (a link planted in a shared directory would
    otherwise turn the write onto whatever file it names)."""
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    label = f"{what} {shown(path)}" if what else shown(path)
    return OutputPathError(
        f"{label} is a symbolic link (to {shown(target)}): write to the target itself or remove the link"
    )


def refuse_link(path: Path | str, what: str = "") -> Path:
    """Raise OutputPathError when the output `path` itself is a symbolic link; returns it as a Path."""
    if os.path.islink(path):
        raise link_refusal(path, what)
    return Path(path)


def open_output(path: Path | str, mode: int = 0o644) -> int:
    """A descriptor for writing `path` from its start, never through a symbolic link (O_NOFOLLOW), for outputs
    that are not written through a temporary file and a rename."""
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP and os.path.islink(path):
            raise link_refusal(path) from None
        raise OutputPathError(f"cannot write {os_error_reason(err, shown(path))}") from None


# -- parsing with limits -------------------------------------------------------------------------------------
YAML_MAX_ALIASES = 100  # a real study file or VM spec uses a handful; an alias bomb needs many
YAML_MAX_DEPTH = 64
YAML_MAX_NODES = 200_000
JSON_MAX_DEPTH = 200


class DuplicateKeyError(ValueError):
    """A JSON object or YAML mapping that gives one key twice (the parsers would keep the last one silently)."""


def unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """json's object_pairs_hook that refuses a key given twice in one object."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"the key {key!r} is given twice in one object")
        out[key] = value
    return out


def json_depth_over(value: object, limit: int = JSON_MAX_DEPTH) -> bool:
    """Whether parsed JSON nests deeper than `limit` (walked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def parse_json(text: str, where: str, fix: str) -> object:
    """The JSON of an input file; a key given twice, nesting deeper than JSON_MAX_DEPTH or text that is not JSON
    is a GpulabError naming `where` (the file) and saying `fix`."""
    import json

    deep = False
    try:
        data = json.loads(text, object_pairs_hook=unique_object)
    except DuplicateKeyError as err:
        raise GpulabError(f"{where}: {err}; {fix}") from None
    except RecursionError:  # json's parser recurses per level: far beyond the limit, it gives up first
        data, deep = None, True
    except ValueError as err:
        raise GpulabError(f"{where} is not JSON ({err}); {fix}") from None
    if deep or json_depth_over(data):
        raise GpulabError(f"{where} is nested more than {JSON_MAX_DEPTH} levels deep (the limit); {fix}")
    return data


def load_yaml(text: str) -> object:
    """YAML parsed by PyYAML's safe loader with limits: at most YAML_MAX_ALIASES aliases, YAML_MAX_NODES nodes
    and YAML_MAX_DEPTH levels of nesting (an alias bomb or a deep document is refused before it is built), and no
    key given twice in one mapping. Problems raise yaml.YAMLError, whose message names the limit."""
    import yaml

    return yaml.load(text, Loader=_limited_loader())  # a SafeLoader subclass


@functools.lru_cache(maxsize=1)
def _limited_loader() -> type:
    import yaml

    class LimitedLoader(yaml.SafeLoader):
        aliases = nodes = depth = 0

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > YAML_MAX_ALIASES:
                    raise yaml.YAMLError(f"more than {YAML_MAX_ALIASES} aliases (the limit); write the values out")
            self.nodes += 1
            if self.nodes > YAML_MAX_NODES:
                raise yaml.YAMLError(f"more than {YAML_MAX_NODES} values (the limit)")
            self.depth += 1
            try:
                if self.depth > YAML_MAX_DEPTH:
                    raise yaml.YAMLError(f"nested more than {YAML_MAX_DEPTH} levels deep (the limit)")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def compose_document(self) -> yaml.Node | None:
            node = super().compose_document()
            if _expanded_size(node, {}, set()) > YAML_MAX_NODES:
                raise yaml.YAMLError(
                    f"its aliases expand to more than {YAML_MAX_NODES} values (the limit); write the values out"
                )
            return node

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    repeated = key in seen
                except TypeError:  # an unhashable key: the base class reports it
                    break
                if repeated:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} is given twice", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return LimitedLoader


def _expanded_size(node: object, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many values a composed YAML node holds once its aliases are written out (each shared node counted
    once per use); a node that holds itself counts as too many. Depth is bounded by YAML_MAX_DEPTH."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        return YAML_MAX_NODES + 1
    open_nodes.add(key)
    value = getattr(node, "value", None)
    children = (
        [c for pair in value for c in pair]
        if isinstance(value, list) and value and isinstance(value[0], tuple)
        else value
        if isinstance(value, list)
        else []
    )
    total = 1
    for child in children:
        total += _expanded_size(child, sizes, open_nodes)
        if total > YAML_MAX_NODES:
            break
    open_nodes.discard(key)
    sizes[key] = total
    return total
