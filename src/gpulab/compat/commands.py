"""`gpulab matrix check | plan | resolve | gpus | show`: the compatibility matrix on the command line."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from gpulab.compat import delivery, kernel_modules, platforms, resolve, versions
from gpulab.compat.check import Incompatibility, Stack, check_stack, selected_torch_build, ubuntu_release
from gpulab.compat.data import GpuSpec, cudnn_wheel_pins
from gpulab.compat.delivery import profile_installable_on
from gpulab.compat.gpus import all_gpus, normalize_pci_id, resolve_gpu
from gpulab.compat.plan import plan_stack, profile, profile_description, profile_names
from gpulab.compat.platforms import provisioned_names
from gpulab.errors import GpulabError, yaml_problem

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
    plan.add_argument("--os", help="OS to plan for, e.g. ubuntu22.04 or debian12 (what any source carries there)")
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    plan.set_defaults(func=cmd_plan)

    _add_resolve(msub)

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
    "os": "operating system, e.g. ubuntu22.04 or debian12 (Ubuntu and the Debian releases gpulab provisions)",
}


# What each option takes, and a value that works, for the one-line error a malformed value gets.
_EXPECTED = {
    "profile": ("a named stack", "legacy-2018"),
    "gpu": ("a GPU name, alias or PCI id", "P100"),
    "driver": ("an NVIDIA driver version or branch", "580.95.05"),
    "cuda": ("a CUDA version, or several separated by commas", "12.9"),
    "cudnn": ("a cuDNN version", "9.10"),
    "torch": ("a torch version, optionally with its build", "2.9.0+cu126"),
    "tensorflow": ("a TensorFlow version", "2.20"),
    "python": ("a Python version", "3.12"),
    "os": (
        "an operating system (Ubuntu releases and the Debian releases gpulab provisions are checked)",
        "ubuntu22.04",
    ),
}
_LOCAL_TAG = re.compile(r"[a-z0-9]+(?:\.[a-z0-9]+)*")
_CUDA_SEPARATORS = re.compile(r"\s*[,+]\s*|\s+")
_OS_NAME = re.compile(r"[A-Za-z][\w .-]*")


def _refuse(label: str, value: str, problem: str, name: str, usage: str | None = None) -> GpulabError:
    """One line naming the option (`label`), what is wrong, and a value that works (`usage` EXAMPLE)."""
    what, example = _EXPECTED[name]
    given = label if problem == "is empty" else f"{label} {value!r}"
    return GpulabError(f"{given} {problem}; pass {what}, e.g. {usage or label} {example}")


def _is_version(text: str) -> bool:
    try:
        versions.parse(text)
    except GpulabError:
        return False
    return True


def _is_cuda(text: str) -> bool:
    try:
        versions.cuda_version(text)
    except GpulabError:
        return False
    return True


def _syntax_problem(name: str, text: str) -> str | None:
    """Why `text` cannot be a value of option `name` at all (None when it can); whether the matrix knows the
    version is check_stack's question, answered as an incompatibility with its fix."""
    if name in ("driver", "cudnn", "tensorflow", "python"):
        return None if _is_version(text) else "is not a version number"
    if name == "cuda":
        # The same separators Stack.cuda_list splits on; an empty item means a stray separator.
        items = _CUDA_SEPARATORS.split(text)
        return None if all(item and _is_cuda(item) for item in items) else "is not a CUDA version"
    if name == "torch":
        base, plus, tag = text.partition("+")
        tag_ok = not plus or _LOCAL_TAG.fullmatch(tag.lower()) is not None
        return None if _is_version(base) and tag_ok else "is not a torch version"
    if name == "os" and (text.lower().startswith("ubuntu") or text[:1].isdigit()):
        # Other systems are not checked; this one was meant as Ubuntu, and would silently go unchecked.
        return None if ubuntu_release(text) else "is not an Ubuntu release"
    if name == "os" and not _OS_NAME.fullmatch(text):
        return "is not an operating system name"
    return None


def _option(label: str, value: str | None, name: str | None = None, usage: str | None = None) -> str | None:
    """`value` of option `label`, stripped; an empty or malformed one is refused naming the option and an example.

    Without this an empty value reads as "not given" and the check says OK for a stack it never looked at.
    """
    if value is None:
        return None
    name = name or label.lstrip("-")
    text = value.strip()
    if not text:
        raise _refuse(label, value, "is empty", name, usage)
    if not text.isprintable():
        raise _refuse(label, value, "contains control characters", name, usage)
    problem = _syntax_problem(name, text)
    if problem:
        raise _refuse(label, value, problem, name, usage)
    return text


def _profile_name(label: str, value: str, usage: str | None = None) -> str:
    text = _option(label, value, "profile", usage) or ""
    if text.lower() not in profile_names():
        raise _refuse(label, value, f"is not a known stack (known: {', '.join(profile_names())})", "profile", usage)
    return text


def _stack_line(stack: Stack) -> str:
    return ", ".join(f"{k}={v}" for k, v in stack.to_dict().items() if v)


def _provisioning(name: str | None) -> tuple[list[str] | None, str | None]:
    """For a named stack: the OSes gpulab's roles can install it on, and one line saying so."""
    if name is None:
        return None, None
    where = [o.name for o in profile_installable_on(name)]
    if where:
        return [o.os for o in profile_installable_on(name)], f"gpulab provisions it on: {', '.join(where)}"
    line = (
        f"gpulab cannot provision it: no OS its roles provision ({provisioned_names()}) carries its driver and "
        "toolkits from any source, so the pre-flight refuses it (see the description for what to use instead)"
    )
    return [], line


def _report(stack: Stack, problems: list[Incompatibility], as_json: bool, name: str | None = None) -> int:
    build = selected_torch_build(stack) if not problems else None
    provisioned_on, note = _provisioning(name)
    if as_json:
        payload: dict[str, Any] = {
            "ok": not problems,
            "stack": stack.to_dict(),
            "torch_index_url": build.index_url if build else None,
            "incompatibilities": [p.__dict__ for p in problems],
        }
        if provisioned_on is not None:
            payload["provisioned_on"] = provisioned_on
        print(json.dumps(payload, indent=2))
        return 1 if problems else 0
    if not problems:
        print(f"OK: {_stack_line(stack)}")
        if build:
            print(f"  torch wheels: pip install torch --index-url {build.index_url}")
    else:
        print(f"INCOMPATIBLE: {_stack_line(stack)}")
        for problem in problems:
            print(f"- [{problem.component}] {problem.reason}")
            print(f"  fix: {problem.fix}")
    if note:
        print(f"note: {note}")
    return 1 if problems else 0


def cmd_check(args: argparse.Namespace) -> int:
    name = _profile_name("--profile", args.profile).lower() if args.profile is not None else None
    base = profile(name) if name is not None else Stack()
    stack = base.override(**{flag: _option(f"--{flag}", getattr(args, flag)) for flag in _STACK_FLAGS})
    if stack == Stack():
        raise GpulabError(
            "nothing to check: pass --profile or at least one of --gpu/--driver/--cuda/..., "
            "e.g. gpulab matrix check --gpu P100 --cuda 12.9"
        )
    return _report(stack, check_stack(stack), args.json, name)


def cmd_plan(args: argparse.Namespace) -> int:
    stack = plan_stack(_option("--gpu", args.gpu) or "", _option("--os", args.os))
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
        bandwidth = "-" if g.memory_bandwidth_gbs is None else f"{g.memory_bandwidth_gbs:g}"
        table.add_row(
            g.name, ", ".join(g.aliases[:2]), ", ".join(g.pci_ids), g.architecture, g.compute_capability,
            f"{g.memory_gib:g}", g.form_factor, bf16, bandwidth,
        )  # fmt: skip
    Console(width=200).print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    name = _profile_name("PROFILE", args.profile, usage="gpulab matrix show")
    stack = profile(name)
    if not args.json:
        print(f"{name}: {profile_description(name)}")
    return _report(stack, check_stack(stack), args.json, name.lower())


# -- gpulab matrix resolve: the pre-flight's decision (gpulab.compat.resolve) for a host described on the command line
_SOURCE_FLAGS = {"driver": "--driver-source", "cuda": "--cuda-source", "cudnn": "--cudnn-source"}
# What --vars reads: the inventory variables the gpulab_preflight role passes to the stack check.
_VARS = (
    "gpulab_profile",
    "gpulab_stack",
    "gpulab_secure_boot_signing",
    "nvidia_driver_precompiled_modules",
    "cudnn_wheels",
    "cudnn_archives",
)


def _add_resolve(msub: Any) -> None:
    res = msub.add_parser(
        "resolve",
        help="the stack gpulab's pre-flight resolves for a host (its GPUs, OS and install sources); exit 1 refused",
        description="What the pre-flight (gpulab.provision.stack_check) decides for a host: the newest stack the "
        "install sources deliver for its GPUs on its OS (profile auto), or a named profile, with the overrides "
        "applied; exit 1 listing every reason it refuses, each with its fix.",
    )
    res.add_argument(
        "--gpu",
        action="append",
        required=True,
        help=f"{_FLAG_HELP['gpu']}; repeat it for each GPU of the host",
    )
    res.add_argument("--os", required=True, help=f"the host's OS: one gpulab provisions ({_os_choices()})")
    res.add_argument("--profile", help="auto (the default: newest stack the sources deliver), none, or a named stack")
    for flag in ("driver", "cuda", "cudnn", "torch", "tensorflow", "python"):
        res.add_argument(f"--{flag}", help=f"override (gpulab_stack.{flag}): {_FLAG_HELP[flag]}")
    res.add_argument(
        "--kernel-modules", choices=kernel_modules.KERNEL_MODULES, help="override: open or proprietary modules"
    )
    res.add_argument("--host-python", help="the host's python3 (major.minor); the frameworks' unless --python")
    for component, flag in _SOURCE_FLAGS.items():
        res.add_argument(
            flag,
            choices=(resolve.AUTO, *delivery.CHOICES[component])
            if component == "driver"
            else delivery.CHOICES[component],
            help=f"{resolve.SOURCE_VARS[component]} (default {resolve.DEFAULT_SOURCES[component]})",
        )
    res.add_argument(
        "--cudnn-wheel",
        action="append",
        metavar="KEY",
        help="a key of cudnn_wheels (the pinned cuDNN wheels), e.g. 9.10-cu12; repeat for each",
    )
    res.add_argument(
        "--cudnn-archive",
        action="append",
        metavar="KEY",
        help="a key of cudnn_archives, e.g. 8.9-cu12.2; repeat for each",
    )
    res.add_argument("--secure-boot", choices=resolve.SECURE_BOOT, default="unsupported", help="the host's state")
    res.add_argument("--secure-boot-signing", action="store_true", help="DKMS signs the modules with an enrolled key")
    res.add_argument(
        "--precompiled-modules",
        action="store_true",
        help="Ubuntu's archive driver with Canonical's signed prebuilt modules (nvidia_driver_precompiled_modules)",
    )
    res.add_argument(
        "--vars",
        metavar="FILE",
        help="an inventory vars file (inventory/group_vars/all.yml) to read "
        + ", ".join(_VARS)
        + " and the *_source variables from; options override it",
    )
    res.add_argument(
        "--fleet",
        metavar="FILE",
        help="the fleet record a play over several nodes wrote (inventory/gpulab-fleet.txt): its driver branch, "
        "as the pre-flight takes it, unless --driver",
    )
    res.add_argument("--json", action="store_true", help="machine-readable output")
    res.set_defaults(func=cmd_resolve)


def _os_choices() -> str:
    return ", ".join(o.os for o in platforms.provisioned())


VARS_LIMIT = 4 << 20  # an inventory vars file is a few KiB


def _read_vars(path: str) -> dict[str, Any]:
    """The inventory variables of --vars that the pre-flight reads; a value still holding Jinja is refused."""
    from gpulab.paths import load_yaml, read_input_text

    # A regular file of bounded size: a device (/dev/zero) or a FIFO is refused, not read without end.
    text = read_input_text(
        path, "--vars", "pass an inventory vars file (inventory/group_vars/all.yml)", limit=VARS_LIMIT
    )
    try:
        data = load_yaml(text)
    except yaml.YAMLError as err:
        raise GpulabError(f"--vars {path}: not valid YAML ({yaml_problem(err)}); pass an inventory vars file") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise GpulabError(f"--vars {path}: not a mapping of variables; pass an inventory vars file")
    wanted = (*_VARS, *resolve.SOURCE_VARS.values())
    out = {k: data[k] for k in wanted if k in data}
    for key, value in out.items():
        if "{{" in json.dumps(value, default=str):
            raise GpulabError(f"--vars {path}: {key} is a template; give its value with an option instead")
    for key in ("gpulab_stack", "cudnn_wheels", "cudnn_archives"):
        if not isinstance(out.get(key, {}), dict):
            raise GpulabError(f"--vars {path}: {key} is not a mapping; write it as in inventory/group_vars/all.yml")
    return out


def _resolve_request(args: argparse.Namespace) -> resolve.Request:
    given = _read_vars(args.vars) if args.vars else {}
    osr = platforms.operating_system(_option("--os", args.os))
    if osr is None:
        raise GpulabError(
            f"--os {args.os!r} is not an OS gpulab provisions; pass one of {_os_choices()}, e.g. --os debian12"
        )
    gpus = []
    for text in args.gpu:
        spec = resolve_gpu(_option("--gpu", text) or "")
        pci_id = normalize_pci_id(text) or spec.pci_ids[0]
        gpus.append({"address": None, "pci_id": pci_id})
    name = str(args.profile if args.profile is not None else given.get("gpulab_profile", "auto"))
    if name.strip().lower() not in ("auto", "none", *profile_names()):
        known = ", ".join(("auto", "none", *profile_names()))
        raise GpulabError(f"--profile {name!r} is not a profile; pass one of {known}, e.g. --profile auto")
    stack = dict(given.get("gpulab_stack") or {})
    if args.fleet and "driver" not in stack:
        from gpulab.compat import fleet_record

        record = fleet_record.read(args.fleet)
        if record is None:
            raise GpulabError(f"--fleet {args.fleet}: no such file; pass the gpulab-fleet.txt a play wrote")
        stack["driver"] = record.driver_branch
    for flag in ("driver", "cuda", "cudnn", "torch", "tensorflow", "python"):
        value = _option(f"--{flag}", getattr(args, flag))
        if value is not None:
            stack[flag] = value
    if args.kernel_modules:
        stack["kernel_modules"] = args.kernel_modules
    host_python = _option("--host-python", args.host_python, "python")
    sources = {c: str(given.get(var, resolve.DEFAULT_SOURCES[c])) for c, var in resolve.SOURCE_VARS.items()}
    for component, flag in _SOURCE_FLAGS.items():
        chosen = getattr(args, flag.lstrip("-").replace("-", "_"))
        if chosen:
            sources[component] = chosen
    # The roles' default pins (the matrix's) unless --vars or --cudnn-wheel name the inventory's own.
    pinned = given.get("cudnn_wheels") if ("cudnn_wheels" in given or args.cudnn_wheel) else cudnn_wheel_pins()
    wheels = dict(pinned or {}) | {key: {} for key in args.cudnn_wheel or []}
    archives = dict(given.get("cudnn_archives") or {}) | {key: {} for key in args.cudnn_archive or []}
    return resolve.Request(
        gpus=gpus,
        profile=name,
        stack=stack,
        host_python=host_python,
        distribution=osr.family.capitalize(),
        distribution_version=osr.release,
        secure_boot=args.secure_boot,
        secure_boot_signing=bool(args.secure_boot_signing or given.get("gpulab_secure_boot_signing")),
        precompiled_modules=bool(args.precompiled_modules or given.get("nvidia_driver_precompiled_modules")),
        sources=sources,
        cudnn_wheels=wheels,
        cudnn_archives=archives,
    )


def _target_lines(target: resolve.TargetStack) -> list[str]:
    gpus = ", ".join(
        f"{g['name']} ({g['architecture']}, compute capability {g['compute_capability']})" for g in target["gpus"]
    )
    modules = f" ({target['kernel_modules']} kernel modules)" if target["kernel_modules"] else ""
    cudnn = ", ".join(f"{v} for CUDA {c}" for c, v in target["cudnn_by_cuda"].items() if v)
    torch = target["torch"] or "-"
    if target["torch"] and target["torch_index_url"]:
        torch += f" (wheels: {target['torch_index_url']})"
    rows = [
        ("gpus", gpus or "-"),
        ("os", target["os"] or "-"),
        ("driver", f"{target['driver']}{modules}" if target["driver"] else "-"),
        ("cuda", ", ".join(target["cuda"]) or "-"),
        ("cudnn", cudnn or "-"),
        ("torch", torch),
        ("tensorflow", target["tensorflow"] or "-"),
        ("python", target["python"] or "-"),
        ("sources", ", ".join(f"{c} {s}" for c, s in target["sources"].items())),
    ]
    if target.get("driver_source_note"):
        rows.append(("note", str(target["driver_source_note"])))
    return [f"  {key:<11} {value}" for key, value in rows]


def cmd_resolve(args: argparse.Namespace) -> int:
    target, problems = resolve.resolve(_resolve_request(args))
    line = resolve.summary(target) if not problems else None
    if args.json:
        print(json.dumps({"ok": not problems, "summary": line, "target": target, "problems": problems}, indent=2))
        return 1 if problems else 0
    if not problems:
        print(f"OK: {line}")
        print("\n".join(_target_lines(target)))
        return 0
    print(f"REFUSED: {len(problems)} problem(s); the pre-flight would stop before any change")
    for problem in problems:
        reason, _, fix = problem.partition(" Fix: ")
        print(f"- {reason}")
        if fix:
            print(f"  fix: {fix}")
    print(
        "note: the fixes name the inventory's variables; here --driver-source, --cuda-source, --cudnn-source, "
        "--cudnn-wheel KEY, the stack options and --vars FILE set them"
    )
    return 1
