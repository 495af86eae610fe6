"""`python -m gpulab` is the `gpulab` command (the console script calls `command`)."""

import atexit
import contextlib
import os
import signal
import sys
import threading
from types import FrameType


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    # Before main() takes over and after it is done, Ctrl-C ends the command as it does in between: one line and
    # 130, no traceback from the middle of an import or of the interpreter's teardown.
    os.write(2, b"gpulab: interrupted\n")
    os._exit(130)


def _finish(code: int) -> None:
    """Exit with `code` once the work is done, Ctrl-C still handled up to the last moment.

    The interpreter's own exit turns signal handling off before it tears the modules down (seconds with torch and
    TensorFlow loaded): a Ctrl-C then killed the process with no line and no 130. So do what that exit does for
    the program (wait for its threads, run the exit hooks, flush) and leave the teardown to the kernel."""
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    # threading's own shutdown: its exit hooks (idle thread pools told to stop), then every non-daemon thread joined
    getattr(threading, "_shutdown", lambda: None)()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that left (`| head`) or a closed stream
            stream.flush()
    os._exit(code)


def command() -> None:
    signal.signal(signal.SIGINT, _interrupted_while_starting)
    from gpulab.cli import main

    signal.signal(signal.SIGINT, signal.default_int_handler)  # main() turns KeyboardInterrupt into the same line
    _finish(main())


if __name__ == "__main__":
    command()
