"""`gpulab` command line: info | matrix | validate | report | compare | run | sweep | study | vm (each package
registers its own subcommands)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpulab import __version__
from gpulab.errors import ERROR_PREFIX, GpulabError
from gpulab.interrupts import stopped
from gpulab.paths import os_error_reason

if TYPE_CHECKING:
    from gpulab.report.commands import Baselines


# Each command and the package that registers it: a command imports its own package alone (`gpulab compare` does
# not load torch, libvirt or the study runner), and --help, a bad command or none loads them all to list them.
# tests/test_cli_startup.py holds this table to what the packages register.
COMMANDS = {
    "info": "hw",
    "matrix": "compat",
    "validate": "validation",
    "report": "report",
    "compare": "report",
    "run": "launch",
    "sweep": "launch",
    "study": "studies",
    "vm": "vm",
}
PACKAGES = tuple(dict.fromkeys(COMMANDS.values()))  # each once, in the order --help lists them


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`'s command (its package's commands only), or for every command without one."""
    parser = argparse.ArgumentParser(prog="gpulab", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpulab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    first = next(iter(argv or ()), None)
    wanted = COMMANDS.get(first) if first else None
    # Imported here so `gpulab --version` stays fast and one broken optional part cannot break the others.
    for package in (wanted,) if wanted else PACKAGES:
        module = importlib.import_module(f"gpulab.{package}.commands")
        if package == "report":
            module.add_commands(sub, report_baselines())
        else:
            module.add_commands(sub)
    return parser


def report_baselines() -> Baselines:
    """What `gpulab compare` may name as a baseline: a study's published figures (baseline:NAME) and a GPU
    model's known-good rows (--known-good)."""
    from gpulab.report.commands import Baselines
    from gpulab.studies import baselines
    from gpulab.validation import known_good

    return Baselines(baselines.PREFIX, baselines.resolve, known_good.as_report)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Whatever goes wrong ends in one line on stderr and an exit code, never a traceback:
    2 for a problem with the input or the machine, 1 for a failed check (the command's own), 130 on Ctrl-C, 143 on
    SIGTERM.
    GPULAB_TRACEBACK=1 shows the traceback of an unexpected error."""
    try:
        given = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(given).parse_args(given)
        return int(args.func(args) or 0)
    except GpulabError as err:
        return _fail(str(err), err.exit_code)
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (gpulab.interrupts.Terminated)
        word, code = stopped(stop)
        print(f"gpulab: {word}", file=sys.stderr)
        return code
    except BrokenPipeError:  # `gpulab ... | head`: the reader left; nothing more to say
        with contextlib.suppress(OSError, ValueError):  # so the flush at exit does not fail a second time
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as err:
        return _fail(os_error_reason(err), 2)
    except MemoryError:
        return _fail("out of memory; an input is far larger than expected: check the files given", 2)
    except UnicodeDecodeError as err:
        return _fail(f"an input is not UTF-8 text ({err.reason} at offset {err.start}); pass the right file", 2)
    except Exception as err:  # third-party errors too: one line, the traceback on request
        if os.environ.get("GPULAB_TRACEBACK"):
            raise
        where = type(err).__module__.split(".")[0]
        return _fail(
            f"unexpected {where}.{type(err).__name__}: {_first_line(err)}; "
            "re-run with GPULAB_TRACEBACK=1 to see where, and report it if the input looks right",
            2,
        )


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "(no message)"


def _fail(message: str, code: int) -> int:
    print(f"{ERROR_PREFIX}{message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
