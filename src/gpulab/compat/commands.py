"""`gpulab matrix check | plan | gpus | show`: the compatibility matrix on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from gpulab.compat.check import Incompatibility, Stack, check_stack, selected_torch_build
from gpulab.compat.data import GpuSpec
from gpulab.compat.gpus import all_gpus
from gpulab.compat.plan import plan_stack, profile, profile_description, profile_names

_STACK_FLAGS = ("gpu", "driver", "cuda", "cudnn", "torch", "tensorflow", "python", "os")


def add_commands(sub: Any) -> None:
    """Register `matrix` and its sub-commands on the top-level subparsers object."""
    matrix = sub.add_parser("matrix", help="GPU/driver/CUDA/cuDNN/framework compatibility matrix")
    msub = matrix.add_subparsers(dest="matrix_command", required=True, metavar="SUBCOMMAND")

    check = msub.add_parser("check", help="check a stack; exit 1 listing every incompatibility")
    check.add_argument("--profile", help=f"start from a named stack ({', '.join(profile_names())})")
    for flag in _STACK_FLAGS:
        check.add_argument(f"--{flag}", help=_FLAG_HELP[flag])
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(func=cmd_check)

    plan = msub.add_parser("plan", help="newest coherent stack for a GPU")
    plan.add_argument("--gpu", required=True, help=_FLAG_HELP["gpu"])
    plan.add_argument("--os", help="Ubuntu release to plan for, e.g. ubuntu22.04")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan)

    gpus = msub.add_parser("gpus", help="list the GPUs the matrix knows")
    gpus.add_argument("--json", action="store_true", help="machine-readable output")
    gpus.set_defaults(func=cmd_gpus)

    show = msub.add_parser("show", help="show a named stack and whether it checks out")
    show.add_argument("profile", metavar="PROFILE", help=", ".join(profile_names()))
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=cmd_show)


_FLAG_HELP = {
    "gpu": "NVML name, alias or PCI id: 'Tesla P100-PCIE-16GB', 'P100', '10de:2335'",
    "driver": "NVIDIA driver version, e.g. 580.95.05",
    "cuda": "CUDA toolkit(s), e.g. 12.9 or 9.0,10.0",
    "cudnn": "cuDNN version, e.g. 9.10",
    "torch": "torch version, optionally with its build: 2.9 or 2.9.0+cu126",
    "tensorflow": "TensorFlow version, e.g. 2.20",
    "python": "Python version, e.g. 3.12",
    "os": "operating system, e.g. ubuntu22.04 (only Ubuntu is checked)",
}


def _stack_line(stack: Stack) -> str:
    return ", ".join(f"{k}={v}" for k, v in stack.to_dict().items() if v)


def _report(stack: Stack, problems: list[Incompatibility], as_json: bool) -> int:
    build = selected_torch_build(stack) if not problems else None
    if as_json:
        payload = {
            "ok": not problems,
            "stack": stack.to_dict(),
            "torch_index_url": build.index_url if build else None,
            "incompatibilities": [p.__dict__ for p in problems],
        }
        print(json.dumps(payload, indent=2))
        return 1 if problems else 0
    if not problems:
        print(f"OK: {_stack_line(stack)}")
        if build:
            print(f"  torch wheels: pip install torch --index-url {build.index_url}")
        return 0
    print(f"INCOMPATIBLE: {_stack_line(stack)}")
    for problem in problems:
        print(f"- [{problem.component}] {problem.reason}")
        print(f"  fix: {problem.fix}")
    return 1


def cmd_check(args: argparse.Namespace) -> int:
    base = profile(args.profile) if args.profile else Stack()
    stack = base.override(**{flag: getattr(args, flag) for flag in _STACK_FLAGS})
    if stack == Stack():
        print("nothing to check: pass --profile or at least one of --gpu/--driver/--cuda/...", file=sys.stderr)
        return 2
    return _report(stack, check_stack(stack), args.json)


def cmd_plan(args: argparse.Namespace) -> int:
    stack = plan_stack(args.gpu, args.os)
    build = selected_torch_build(stack)
    if args.json:
        out = {"stack": stack.to_dict(), "torch_index_url": build.index_url if build else None}
        print(json.dumps(out, indent=2))
        return 0
    print(f"Newest coherent stack for {stack.gpu}:")
    for key, value in stack.to_dict().items():
        print(f"  {key:<11} {value if value else '-'}")
    if build and stack.torch:
        version = stack.torch.split("+")[0]
        print(f"  pip install 'torch=={version}.*' --index-url {build.index_url}")
    if stack.tensorflow:
        print(f"  pip install 'tensorflow[and-cuda]=={stack.tensorflow}.*'")
    else:
        print("  (no TensorFlow release in the matrix ships kernels for this GPU with this driver)")
    return 0


def _gpu_row(gpu: GpuSpec) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in gpu.__dict__.items()}


def cmd_gpus(args: argparse.Namespace) -> int:
    gpus = all_gpus()
    if args.json:
        print(json.dumps([_gpu_row(g) for g in gpus], indent=2))
        return 0
    table = Table(title="GPUs in the compatibility matrix")
    for col in ("Name", "Aliases", "PCI id", "Arch", "CC", "GiB", "Form", "BF16 TF/s", "GB/s"):
        table.add_column(col)
    for g in gpus:
        bf16 = "-" if g.bf16_tflops is None else f"{g.bf16_tflops:g}"
        table.add_row(
            g.name, ", ".join(g.aliases[:2]), ", ".join(g.pci_ids), g.architecture, g.compute_capability,
            f"{g.memory_gib:g}", g.form_factor, bf16, f"{g.memory_bandwidth_gbs:g}",
        )  # fmt: skip
    Console(width=200).print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    stack = profile(args.profile)
    if not args.json:
        print(f"{args.profile}: {profile_description(args.profile)}")
    return _report(stack, check_stack(stack), args.json)
