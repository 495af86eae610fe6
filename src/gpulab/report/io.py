"""Reading and writing report JSON: validated against `schema.json`, written atomically.

`write_report` refuses a report that does not match the schema (that is a bug in whatever built it) and
never leaves a half-written file behind; `load_report` turns every way a file can be wrong into one
`ReportError` that names the file, the problem and what to do about it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulab.errors import GpulabError
from gpulab.paths import (
    JSON_MAX_DEPTH,
    DuplicateKeyError,
    InputFileError,
    json_depth_over,
    read_input_bytes,
    refuse_link,
    unique_object,
)
from gpulab.records import READABLE_SCHEMAS, SCHEMA_ID, Report

if TYPE_CHECKING:  # jsonschema loads when a report is checked, not with every worker process that imports this
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

SCHEMA_PREFIX = "gpulab.report/"
SCHEMA_VERSION = int(SCHEMA_ID.rsplit("/", 1)[1])


class ReportError(GpulabError):
    """A report file that cannot be used: missing, corrupt, foreign, too new or not matching the schema."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


@functools.lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The JSON Schema of `gpulab.report/1` (draft 2020-12)."""
    text = resources.files("gpulab.report").joinpath("schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    schema = load_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_errors(data: Any, *, rows_named: bool = False) -> list[str]:
    """Every schema violation in `data` as "JSON path: message", in document order; empty when valid. With
    `rows_named`, a path into a row of results, speedups or scaling names that row's key too."""
    errors = sorted(
        _validator().iter_errors(data),
        key=lambda e: [f"{p:09d}" if isinstance(p, int) else str(p) for p in e.absolute_path],
    )
    return [_describe(e, data if rows_named else None) for e in errors]


def _describe(err: ValidationError, data: Any = None) -> str:
    while err.context:  # a oneOf/anyOf failed: the deepest error inside it names the real problem
        deepest = max(len(e.absolute_path) for e in err.context)
        inside = [e for e in err.context if len(e.absolute_path) == deepest]
        err = next((e for e in inside if e.validator != "type"), inside[0])  # a bound over "is not null"
    where = _row_named(data, err.json_path)
    if err.validator in ("minimum", "exclusiveMinimum", "maximum"):
        bound = {"minimum": "at least", "exclusiveMinimum": "greater than", "maximum": "at most"}[str(err.validator)]
        return f"{where}: {err.instance!r} is out of range, it must be {bound} {err.validator_value:g}"
    message = err.message
    if len(message) > 300:
        message = message[:297] + "..."
    return f"{where}: {message}"


_ROW = re.compile(r"^(\$\.(results|speedups|scaling)\[(\d+)\])(.*)$")


def _row_named(data: Any, json_path: str) -> str:
    """`json_path` with the row it points into named by its key: `$.results[3] (resnet50 torch gpu n=1 bf16).value`."""
    m = _ROW.match(json_path)
    rows = data.get(m.group(2)) if m and isinstance(data, dict) else None
    index = int(m.group(3)) if m else 0
    row = rows[index] if isinstance(rows, list) and index < len(rows) else None
    if m is None or not isinstance(row, dict):
        return json_path
    parts = [
        f"n={v}" if k == "n" else str(v)
        for k in ("workload", "framework", "launcher", "from", "to", "n", "precision")
        if isinstance(v := row.get(k), (str, int)) and not isinstance(v, bool)
    ]
    label = "".join(c if c.isprintable() else "?" for c in " ".join(parts)[:120])  # the message stays one line
    return f"{m.group(1)} ({label}){m.group(4)}" if parts else json_path


def _bad_value_path(value: Any, path: str = "$") -> str | None:
    """The JSON path of the first value json cannot write faithfully (NaN, infinity, a non-JSON type)."""
    if isinstance(value, float):
        return path if not math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path}[{key!r}]"
            found = _bad_value_path(item, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = _bad_value_path(item, f"{path}[{i}]")
            if found:
                return found
        return None
    return path


def report_json(report: Report) -> str:
    """The report as validated JSON text; raises GpulabError naming the JSON path of the first problem."""
    data = report.to_dict()
    bad = _bad_value_path(data)
    if bad:
        raise GpulabError(
            f"cannot write report: {bad} is not a JSON value (NaN, infinity or a "
            "non-JSON type); this is a bug in the code that built the report"
        )
    problems = schema_errors(data)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise GpulabError(
            f"cannot write report: it does not match {SCHEMA_ID}: {problems[0]}{more}; "
            "this is a bug in the code that built the report"
        )
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def jsonable(value: Any) -> Any:
    """`value` made safe for the report: paths and other objects as strings, tuples as lists, NaN/inf as None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return jsonable(value.item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def atomic_write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` so readers see the old file or the whole new one, never a part.

    A temporary file in the same directory is written, flushed and fsync'ed, then renamed over `path`.
    Parent directories are created. A `path` that is a symbolic link is refused (OutputPathError): an output is
    never written through a link (`gpulab run --report` resolves its link first, by design).
    """
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """`atomic_write_text` for bytes (a pickle, an image)."""
    path = refuse_link(path)  # also at write time; a link planted after this is replaced by the rename, not followed
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o644
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)
    return path


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; best effort (not every platform or filesystem allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_report(report: Report, path: Path) -> Path:
    """Validate `report` against the schema, then write it atomically to `path`; returns `path`.

    An invalid report raises GpulabError (naming the JSON path of the problem) and leaves any existing
    file at `path` untouched.
    """
    text = report_json(report)
    return atomic_write_text(Path(path), text)


def load_report(path: Path) -> Report:
    """Read and validate a report; every problem becomes a ReportError naming the file and the fix."""
    path = Path(path)
    try:  # a regular file of sane size: a directory, device or pipe is refused before a byte is read
        raw = read_input_bytes(path, "report", "pass the report-*.json a validation run wrote")
    except InputFileError as err:
        raise ReportError(str(err), path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ReportError(
            f"{path} is not a gpulab report (not UTF-8 text: bad byte at offset {err.start}); "
            "pass the report-*.json a validation run wrote",
            path,
        ) from None
    if not text.strip():
        raise ReportError(
            f"{path} is empty (the run that wrote it probably stopped before finishing); "
            "re-run the validation or pick another report",
            path,
        )
    return report_from_data(_parse(path, text), path)


def _parse(path: Path, text: str) -> Any:
    """The JSON of a report file; a key given twice, nesting beyond JSON_MAX_DEPTH or bad JSON is a ReportError."""
    try:
        data = json.loads(text, parse_constant=_NonFinite, parse_float=_finite_float, object_pairs_hook=unique_object)
    except DuplicateKeyError as err:
        raise ReportError(
            f"{path} is not a usable report: {err}; remove one of them or restore the file", path
        ) from None
    except RecursionError:
        data, deep = None, True
    except json.JSONDecodeError as err:
        truncated = err.pos >= len(text.rstrip())
        what = "is truncated (the JSON ends early)" if truncated else "is not valid JSON"
        raise ReportError(
            f"{path} {what}: {err.msg} at line {err.lineno} column {err.colno}; "
            "re-run the validation to get a complete report, or restore the file",
            path,
        ) from None
    else:
        deep = json_depth_over(data)
    if deep:
        raise ReportError(
            f"{path} is nested more than {JSON_MAX_DEPTH} levels deep (the limit; a report needs a few); "
            "pass the report-*.json a validation run wrote",
            path,
        )
    return data


class _NonFinite:
    """Stands in for NaN, Infinity, -Infinity or an overflowing number while parsing, so the loader can say
    where it was (json.loads would turn them into floats the schema's bounds cannot catch: NaN < 0 is False)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _finite_float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(f"{text} (beyond the float range)")


def _non_finite(value: Any, path: str = "$") -> tuple[str, str] | None:
    """(JSON path, what it is) of the first NaN or infinite number in parsed or built report data."""
    if isinstance(value, _NonFinite):
        return path, value.text
    if isinstance(value, float) and not math.isfinite(value):
        return path, {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(value)]
    items: Any = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}")
        if found:
            return found
    return None


def report_from_data(data: Any, path: Path | str = "<data>") -> Report:
    """Check the `schema` tag and the schema, then build the Report; ReportError on any problem."""
    path = Path(path)
    bad = _non_finite(data)
    if bad:  # the writer refuses these too: a report holds finite numbers only
        raise ReportError(
            f"{path}: {_row_named(data, bad[0])} is {bad[1]}, not a finite number (gpulab never writes NaN or "
            "infinity); the run that produced it went wrong: re-run it, or fix or remove that value",
            path,
        )
    if not isinstance(data, dict):
        raise ReportError(
            f"{path} is not a gpulab report (schema: none; the JSON is a {type(data).__name__}, "
            f"not an object); pass a {SCHEMA_ID} report",
            path,
        )
    tag = data.get("schema")
    if not isinstance(tag, str) or not tag.startswith(SCHEMA_PREFIX):
        shown = "missing" if tag is None else json.dumps(tag)[:80]
        raise ReportError(
            f"{path} is not a gpulab report (schema {shown}; expected {SCHEMA_ID}); "
            "pass the report-*.json a validation run wrote",
            path,
        )
    version = _version(tag)
    if version is not None and version > SCHEMA_VERSION:
        raise ReportError(
            f"{path} was written by a newer gpulab: {tag}; upgrade gpulab (this one reads {SCHEMA_ID})",
            path,
        )
    if tag not in READABLE_SCHEMAS:
        raise ReportError(
            f"{path} has an unknown report schema {tag!r}; this gpulab reads {', '.join(READABLE_SCHEMAS)}", path
        )
    problems = schema_errors(data, rows_named=True)
    if problems:
        shown = "; ".join(problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ReportError(
            f"{path} does not match {SCHEMA_ID}: {shown}{more}; fix the file or re-run the validation",
            path,
        )
    try:
        return Report.from_dict(data)
    except (TypeError, KeyError, ValueError) as err:  # the schema should make this impossible
        raise ReportError(f"{path} cannot be read as a {SCHEMA_ID} report: {err}", path) from None


def _version(tag: str) -> int | None:
    m = re.fullmatch(re.escape(SCHEMA_PREFIX) + r"(\d+)(?:\.\d+)*", tag)
    return int(m.group(1)) if m else None


def default_report_path(directory: Path, hostname: str, now: _dt.datetime | None = None) -> Path:
    """`<directory>/report-<host>-<UTC timestamp>.json`, e.g. report-gpu01-20250101T120000Z.json."""
    when = (now or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    host = re.sub(r"[^A-Za-z0-9._-]+", "_", hostname).strip("._") or "host"
    return Path(directory) / f"report-{host}-{when.strftime('%Y%m%dT%H%M%SZ')}.json"
