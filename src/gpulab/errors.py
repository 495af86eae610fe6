"""The one error type users see: a message that names the problem and the fix."""

from __future__ import annotations

from collections.abc import Iterable

# How a worker process reports a GpulabError on stderr, so that its parent passes the message on unchanged.
ERROR_PREFIX = "gpulab: error: "


class GpulabError(Exception):
    """A user-facing failure. `str(err)` is the whole message; the CLI prints it and exits non-zero."""

    exit_code = 2


class UnknownValue(GpulabError):
    """A value outside a closed vocabulary (a precision, a tier, a workload...). The message names what was asked,
    the value and the choices; the same three are fields, so a caller or a test reads them rather than the sentence.
    `labels` are the choices as the message shows them (the values, unless given)."""

    def __init__(
        self, what: str, value: object, choices: Iterable[str], *, who: str = "", labels: Iterable[str] = ()
    ) -> None:
        self.what, self.value, self.choices, self.who = what, value, tuple(choices), who
        shown = tuple(labels) or self.choices
        prefix = f"{who}: " if who else ""
        super().__init__(f"{prefix}unknown {what} {value!r}; choose one of: {', '.join(shown)}")


def yaml_problem(err: BaseException) -> str:
    """PyYAML's several-line message as one line: the problem and where it is (for any YAML input file)."""
    problem, mark = getattr(err, "problem", None), getattr(err, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    first = (str(err).strip().splitlines() or ["unreadable"])[0].rstrip(":")
    position = getattr(err, "position", None)  # a reader error: a character YAML does not allow
    return first + (f" at character {position + 1}" if isinstance(position, int) else "")
