"""`python -m gpulab` is the `gpulab` command (the console script calls `command`)."""

import atexit
import contextlib
import os
import signal
import sys
import threading
from types import FrameType


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    # Before main() takes over and after it is done, Ctrl-C and SIGTERM end the command as they do in between: one
    # line and 130 (143), no traceback from the middle of an import or of the interpreter's teardown.
    if signum == signal.SIGTERM:
        os.write(2, b"gpulab: terminated\n")
        os._exit(143)
    os.write(2, b"gpulab: interrupted\n")
    os._exit(130)


def _stop_at_once() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _interrupted_while_starting)


def _finish(code: int) -> None:
    """Exit with `code` once the work is done, Ctrl-C still handled up to the last moment.

    The interpreter's own exit turns signal handling off before it tears the modules down (seconds with torch and
    TensorFlow loaded): a Ctrl-C then killed the process with no line and no 130. So do what that exit does for
    the program (wait for its threads, run the exit hooks, flush) and leave the teardown to the kernel."""
    _stop_at_once()
    # threading's own shutdown: its exit hooks (idle thread pools told to stop), then every non-daemon thread joined
    getattr(threading, "_shutdown", lambda: None)()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader that left (`| head`) or a closed stream
            stream.flush()
    os._exit(code)


def command() -> None:
    _stop_at_once()
    from gpulab.interrupts import stop_on_signals, stop_with_parent

    stop_with_parent()  # started by a study's run: SIGTERM when that ends (now, if it has: one line, 143)
    from gpulab.cli import main

    stop_on_signals()  # KeyboardInterrupt and Terminated: main() turns them into the same lines
    _finish(main())


if __name__ == "__main__":
    command()
