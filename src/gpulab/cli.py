"""`gpulab` command line: info | matrix | validate | report | compare | run | sweep | study | vm (each package
registers its own subcommands)."""

from __future__ import annotations

import argparse
import contextlib
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpulab", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpulab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Imported here so `gpulab --version` stays fast and one broken optional part cannot break the others.
    from gpulab.compat import commands as compat_commands
    from gpulab.hw import commands as hw_commands
    from gpulab.launch import commands as launch_commands
    from gpulab.report import commands as report_commands
    from gpulab.studies import commands as study_commands
    from gpulab.validation import commands as validation_commands
    from gpulab.vm import commands as vm_commands

    hw_commands.add_commands(sub)
    compat_commands.add_commands(sub)
    validation_commands.add_commands(sub)
    report_commands.add_commands(sub, report_baselines())
    for module in (launch_commands, study_commands, vm_commands):
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
        parser = build_parser()
        args = parser.parse_args(argv)
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
