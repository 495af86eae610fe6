"""`gpulab validate [pytest options]`: the validation suite, run as `pytest validate/` runs it.

The command becomes pytest (the process is replaced), so the exit status, the output, Ctrl-C and every option are
pytest's own: `gpulab validate --tier standard -k health` is `pytest validate/ --tier standard -k health`, and
`gpulab validate --help` lists the suite's options among pytest's.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError

SUITE_ENV = "GPULAB_SUITE"
# The checkout this package was installed from (src/gpulab/validation/commands.py -> the checkout's root).
CHECKOUT = Path(__file__).resolve().parents[3]


def is_suite(path: Path) -> bool:
    """A directory holding the suite: its conftest loads gpulab's validation plugin."""
    try:
        return "gpulab.validation.plugin" in (path / "conftest.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False


def find_suite(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    """The validate/ directory to run: $GPULAB_SUITE, else the one beside this package's source (a checkout),
    else ./validate."""
    env = os.environ if env is None else env
    given = env.get(SUITE_ENV)
    if given:
        path = Path(given).expanduser()
        if not is_suite(path):
            raise GpulabError(
                f"{SUITE_ENV}={given}: not the validation suite (no conftest.py loading gpulab.validation.plugin "
                "there); point it at a gpulab checkout's validate/ directory, or unset it"
            )
        return path
    here = (cwd or Path.cwd()) / "validate"
    candidates = [CHECKOUT / "validate", here]
    for path in candidates:
        if is_suite(path):
            return path
    raise GpulabError(
        f"no validation suite found (looked in {' and '.join(str(p) for p in candidates)}): run it from a gpulab "
        f"checkout, or set {SUITE_ENV} to the suite's directory (a checkout's validate/)"
    )


def pytest_command(suite: Path, args: Sequence[str]) -> list[str]:
    """The command `./bootstrap.sh validate` runs: this Python's pytest on the suite, the options passed on."""
    return [sys.executable, "-m", "pytest", str(suite), "-p", "no:cacheprovider", *args]


def run_validate(args: argparse.Namespace) -> int:
    command = pytest_command(find_suite(), args.pytest_args)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(command[0], command)  # pytest from here on: its output, its exit status, its handling of Ctrl-C


def add_commands(sub: Any) -> None:
    """Register `validate` on the top-level subparsers object: every argument after it goes to pytest."""
    p = sub.add_parser(
        "validate",
        help="run the validation suite (pytest validate/; options go to pytest)",
        description=__doc__,
        add_help=False,  # --help goes to pytest: it lists the suite's options
        prefix_chars="\0",  # no option of its own, so every argument, `-k` or `--tier` alike, is passed on as given
    )
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="PYTEST_OPTIONS")
    p.set_defaults(func=run_validate)
