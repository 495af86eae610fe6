"""`python -m gpulab` is the `gpulab` command (the console script calls `command`)."""

import os
import signal
import sys
from types import FrameType


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    # Before main() takes over and after it is done, Ctrl-C ends the command as it does in between: one line and
    # 130, no traceback from the middle of an import or of the interpreter's teardown.
    os.write(2, b"gpulab: interrupted\n")
    os._exit(130)


def command() -> None:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    from gpulab.cli import main

    signal.signal(signal.SIGINT, signal.default_int_handler)  # main() turns KeyboardInterrupt into the same line
    code = main()
    # The work is done; a Ctrl-C while the interpreter and the frameworks tear down still ends in the one line.
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    sys.exit(code)


if __name__ == "__main__":
    command()
