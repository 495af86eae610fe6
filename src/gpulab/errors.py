"""The one error type users see: a message that names the problem and the fix."""

from __future__ import annotations

# How a worker process reports a GpulabError on stderr, so that its parent passes the message on unchanged.
ERROR_PREFIX = "gpulab: error: "


class GpulabError(Exception):
    """A user-facing failure. `str(err)` is the whole message; the CLI prints it and exits non-zero."""

    exit_code = 2
