"""`gpulab` command line: info | matrix | report | compare (each package registers its own subcommands)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from gpulab import __version__
from gpulab.errors import GpulabError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpulab", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gpulab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Imported here so `gpulab --version` stays fast and one broken optional part cannot break the others.
    from gpulab.compat import commands as compat_commands
    from gpulab.hw import commands as hw_commands
    from gpulab.launch import commands as launch_commands
    from gpulab.report import commands as report_commands
    from gpulab.vm import commands as vm_commands

    for module in (hw_commands, compat_commands, report_commands, launch_commands, vm_commands):
        module.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GpulabError as err:
        print(f"gpulab: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("gpulab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
