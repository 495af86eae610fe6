"""How a torch style-transfer session runs its step (the workload's `loop` parameter)."""

from __future__ import annotations

# How a torch session runs its step: eager (each op launched from Python); compile: torch.compile of the forward and
# the losses (fused elementwise work, the backward through AOTAutograd); compile-graphs: the same replayed as CUDA
# graphs (torch.compile's reduce-overhead mode; on a CPU the same as compile), which takes the launches off the host.
# Compiled once per process and shape: a study's long-lived worker pays for it in its first run. auto: compile-graphs
# on a GPU (H100, 1000 iterations at 512 px: 2.9 s, eager 5.2 s, same loss), eager on a CPU (compiling costs more).
LOOPS = ("eager", "compile", "compile-graphs", "auto")


def effective_loop(loop: str, device: str) -> str:
    """The loop a session on `device` runs for the `loop` setting."""
    return ("compile-graphs" if device.startswith("cuda") else "eager") if loop == "auto" else loop

