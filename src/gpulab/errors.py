"""The one error type users see: a message that names the problem and the fix."""

from __future__ import annotations

# How a worker process reports a GpulabError on stderr, so that its parent passes the message on unchanged.
ERROR_PREFIX = "gpulab: error: "


class GpulabError(Exception):
    """A user-facing failure. `str(err)` is the whole message; the CLI prints it and exits non-zero."""

    exit_code = 2


def yaml_problem(err: BaseException) -> str:
    """PyYAML's several-line message as one line: the problem and where it is (for any YAML input file)."""
    problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    first = (str(err).strip().splitlines() or ["unreadable"])[0].rstrip(":")
    position = getattr(err, "position", None)  # a reader error: a character YAML does not allow
    return first + (f" at character {position + 1}" if isinstance(position, int) else "")
