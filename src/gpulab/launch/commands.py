"""`gpulab run` (one workload, one launcher) and `gpulab sweep` (independent runs, one per GPU).

Both print one result line and, with --report FILE, append the Result to that report (created with this
machine's fingerprint when it does not exist) and recompute its speedups and scaling.

GPU counts on a machine without GPUs: `--launcher ddp --gpus N` and `gpulab sweep --gpus N` run N CPU
processes instead (gloo for DDP), a functional test of those paths; the result records devices "cpu" and, for
DDP, comm_backend "gloo". `--launcher gpu` and `--launcher dataparallel --gpus N>1` need GPUs and say so.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from gpulab import names
from gpulab.errors import GpulabError
from gpulab.launch import backends, progress
from gpulab.launch.advice import gpu_busy_advice
from gpulab.launch.dispatch import check_launch, start
from gpulab.launch.spec import Launch
from gpulab.names import BATCH_POLICIES, COMM_BACKENDS, SIZES, CommBackend, Framework, Launcher, Precision
from gpulab.progress_line import ProgressLine
from gpulab.records import Result, RunConfig
from gpulab.report.append import append_results
from gpulab.report.hostload import LoadWatch
from gpulab.workloads.registry import REGISTRY


def parse_params(items: list[str] | None) -> dict[str, Any]:
    """["key=value", ...] -> {key: value}; values are read as JSON when they parse (3, 0.1, true), else text."""
    params: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or not key.replace("_", "a").replace("-", "a").isalnum():
            raise GpulabError(f"--param {item!r} is not KEY=VALUE; write e.g. --param learning_rate=0.1")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        params[key] = value
    return params


def _option_number(args: argparse.Namespace, name: str, kind: type) -> Any:
    """An option given as text, as a number: a bad one is a one-line GpulabError naming the option."""
    raw = getattr(args, name, None)
    if raw is None:
        return None
    flag = "--" + name.replace("_", "-")
    try:
        value = kind(raw)
    except ValueError:
        raise GpulabError(f"{flag} {raw!r} is not a {'whole number' if kind is int else 'number'}") from None
    if kind is float and not math.isfinite(value):
        raise GpulabError(f"{flag} {raw!r} is not a finite number")
    return value


def epochs_from_args(args: argparse.Namespace) -> Any:
    """The EpochSpec of `gpulab run --epochs N ...`, or None without --epochs (then the epoch options are refused)."""
    from gpulab.training.epochs import EpochSpec

    epochs = _option_number(args, "epochs", int)
    if epochs is None:
        given = [
            f
            for f, v in (
                ("--val-fraction", args.val_fraction),
                ("--target-accuracy", args.target_accuracy),
                ("--weights", args.weights),
                ("--save-weights", args.save_weights),
            )
            if v is not None
        ]
        if given:
            raise GpulabError(f"{given[0]} applies to epoch training: add --epochs N")
        return None
    fraction = _option_number(args, "val_fraction", float)
    return EpochSpec(
        epochs=epochs,
        val_fraction=0.1 if fraction is None else fraction,
        optimizer=args.optimizer,
        learning_rate=_option_number(args, "lr", float),
        target_accuracy=_option_number(args, "target_accuracy", float),
        weights=args.weights,
        save_weights=args.save_weights,
    )


def config_from_args(args: argparse.Namespace) -> RunConfig:
    optimizer = getattr(args, "optimizer", None)
    if optimizer is not None:
        optimizer = names.optimizer(optimizer, who="--optimizer")
    lr = _option_number(args, "lr", float)
    if lr is not None and lr <= 0:
        raise GpulabError(f"--lr must be a positive number, not {lr!r}")
    return RunConfig(
        workload=args.workload,
        precision=args.precision,
        channels_last=args.channels_last,
        batch=args.batch,
        steps=args.steps,
        warmup=args.warmup,
        size=args.size,
        data=args.data,
        num_workers=args.num_workers,
        seed=args.seed,
        params=parse_params(args.param),
        optimizer=optimizer,
        learning_rate=lr,
    )


INPUT_PARAMS = ("content", "style", "initial", "vgg_weights")  # workload parameters that name files read
OUTPUT_PARAMS = ("output",)  # workload parameters that name files written


def _param_paths(params: dict[str, Any], keys: tuple[str, ...]) -> list[Path]:
    paths: list[Path] = []
    for key in keys:
        value = params.get(key)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and item and item not in ("noise", "content", "style"):
                paths.append(Path(item).expanduser())
    return paths


def check_outputs(args: argparse.Namespace) -> None:
    """Before the first step: every output can be written, none is an input or another output, and an existing
    --report is a report to append to."""
    from gpulab.paths import Output, check_outputs, output_dir

    params = parse_params(getattr(args, "param", None))
    inputs: list[Path] = _param_paths(params, INPUT_PARAMS)
    if getattr(args, "weights", None) is not None:
        inputs.append(args.weights)
    outputs = [Output(p, f"--param {k}", "output.png") for k in OUTPUT_PARAMS for p in _param_paths(params, (k,))]
    if args.report is not None:
        outputs.append(Output(args.report, "--report", "report.json", follow_link=True))
    if getattr(args, "save_weights", None) is not None:
        outputs.append(Output(args.save_weights, "--save-weights", "weights.pt"))
    check_outputs(outputs, inputs)
    if args.report is not None and args.report.exists():
        from gpulab.report.io import load_report

        load_report(args.report)  # a file that is not a report is refused now, not after the training
    if getattr(args, "sweep_dir", None) is not None:
        output_dir(args.sweep_dir, "--sweep-dir")


def describe(result: Result) -> str:
    where = f"{result.launcher}×{result.n}" if result.launcher != Launcher.CPU else f"cpu ({result.n} threads)"
    if result.comm_backend is CommBackend.GLOO or (result.launcher == Launcher.SWEEP and result.devices[:1] == ["cpu"]):
        where += " on CPU processes"
    batch = f"batch {result.batch}/device, " if result.batch else ""
    return (
        f"{result.workload} {where} {result.precision}: {result.value:,.1f} {result.unit} "
        f"({batch}{result.iterations} steps in {result.seconds or 0:.2f} s)"
    )


def _finish(args: argparse.Namespace, result: Result, load: LoadWatch | None = None) -> int:
    if args.json:
        from gpulab.launch.measuring import result_to_dict

        json.dump(result_to_dict(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(describe(result))
    advice = gpu_busy_advice(result)
    if advice:
        print(f"note: {advice}", file=sys.stderr)
    if args.report is not None:
        append_results(args.report, [result], _command_line(), host_load=load.finish() if load else None)
        print(f"appended to {args.report}", file=sys.stderr)
    return 0


def _command_line() -> str | None:
    """How gpulab was started, for a new report's `command` (None when called from elsewhere)."""
    prog = Path(sys.argv[0]).name if sys.argv else ""
    if prog == "gpulab" or sys.argv[0].endswith(("gpulab/__main__.py", "gpulab/cli.py")):
        return shlex.join(["gpulab", *sys.argv[1:]])
    return None


def _show(status: Any, launch: Launch, stream: Any = None) -> progress.Listener:
    """Steps done, rate and time left (in-process launchers report them): on a terminal in the live status line;
    elsewhere (CI, a pipe) as a plain line per tenth of each phase or per minute."""
    stream = stream if stream is not None else sys.stderr
    if stream.isatty():

        def show(p: progress.Progress) -> None:
            status.update(f"running {launch.describe()}: {p.text()}")

        return show
    lines: dict[str, ProgressLine] = {}

    def plain(p: progress.Progress) -> None:
        line = lines.get(p.phase)
        if line is None:
            line = lines[p.phase] = ProgressLine(
                f"{launch.describe()}, {p.phase}", p.total, unit="steps", stream=stream
            )
        line.update(p.done)
        if p.done >= p.total:
            line.close()

    return plain


def _status(text: str) -> Any:
    from rich.console import Console

    return Console(stderr=True).status(text, spinner="dots")


def launch_from_args(args: argparse.Namespace, launcher: Launcher) -> Launch:
    """The Launch the command line describes (`launcher` "sweep" for `gpulab sweep`)."""
    return Launch(
        cfg=config_from_args(args),
        framework=args.framework,
        launcher=launcher,
        gpus=args.gpus,
        index=getattr(args, "index", 0),
        threads=args.threads,
        batch_policy=args.batch_policy,
        scale_lr=args.scale_lr,
        comm_backend=getattr(args, "comm_backend", None),
        builder=args.builder,
        timeout_s=args.timeout,
        telemetry=not args.no_telemetry,
        sweep_dir=getattr(args, "sweep_dir", None),
        runs=getattr(args, "runs", None),
        epochs=epochs_from_args(args) if launcher != Launcher.SWEEP else None,
    )


def epoch_line(record: dict[str, Any], total: int, metric: str) -> str:
    """One finished epoch as `gpulab run --epochs` prints it."""

    def num(key: str, fmt: str) -> str:
        value = record.get(key)
        return format(value, fmt) if isinstance(value, (int, float)) else "n/a"

    return (
        f"epoch {record['epoch']}/{total}: {num('seconds', '.2f')} s, {num('samples_per_s', ',.1f')} samples/s, "
        f"train loss {num('train_loss', '.4f')}, val loss {num('val_loss', '.4f')}, "
        f"val {metric} {num('val_metric', '.4f')}"
    )


def epochs_summary(record: dict[str, Any]) -> str:
    count = len(record["epochs"])
    plural = "s" if count != 1 else ""
    text = f"{count} epoch{plural} in {record['total_s']:.2f} s (training {record['train_s']:.2f} s)"
    final = record.get("final_metric")
    text += f", final {record['metric']} {final:.4f}" if isinstance(final, (int, float)) else ""
    target = record.get("target")
    if target is not None:
        reached = record.get("time_to_target_s")
        text += (
            f"; time to {record['metric']} {target:g}: {reached:.2f} s"
            if reached is not None
            else f"; {record['metric']} {target:g} not reached"
        )
    return text


def cmd_run(args: argparse.Namespace) -> int:
    from gpulab.training.epochs import listening

    check_outputs(args)
    launch = launch_from_args(args, args.launcher)
    backend = check_launch(launch)
    backend.prepare()
    spec = launch.epochs
    lines = sys.stderr if args.json else sys.stdout  # with --json, stdout holds the JSON alone
    load = LoadWatch(f"gpulab run {launch.cfg.workload}", calibrate_cpu=args.report is not None)

    def show_epoch(record: dict[str, Any]) -> None:
        metric = REGISTRY[launch.cfg.workload].metric if launch.cfg.workload in REGISTRY else "accuracy"
        print(epoch_line(record, spec.epochs if spec else 0, metric), file=lines, flush=True)

    with (
        _status(f"running {launch.describe()}") as status,
        progress.listening(_show(status, launch)),
        listening(show_epoch if spec is not None else None),
    ):
        result = start(launch)
    if spec is not None:
        record = result.params["epochs"]
        for note in record.get("notes") or []:
            print(f"note: {note}", file=sys.stderr)
        print(epochs_summary(record), file=lines)
    return _finish(args, result, load)


def cmd_sweep(args: argparse.Namespace) -> int:
    import contextlib

    check_outputs(args)
    launch = launch_from_args(args, Launcher.SWEEP)
    check_launch(launch).prepare()
    # With --json, stdout carries the JSON document alone: anything printed on the way (psweep, a library) goes to
    # stderr instead.
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    load = LoadWatch(f"gpulab sweep {launch.cfg.workload}", calibrate_cpu=args.report is not None)
    with quiet, _status(f"sweep: {args.runs or args.gpus} runs of {launch.cfg.workload} over {args.gpus} devices"):
        result = start(launch)
    where = f"psweep database: {result.params.get('psweep_db')} (run id {result.params.get('psweep_run_id')})"
    # A message beside the JSON (which records both as params.psweep_db and params.psweep_run_id).
    print(where, file=sys.stderr if args.json else sys.stdout)
    return _finish(args, result, load)


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
    return value


def _non_negative(text: str) -> int:
    return _whole_number(text, 0)


def _positive(text: str) -> int:
    return _whole_number(text, 1)


def _comm_backend(text: str) -> CommBackend:
    """--backend: DDP's process-group backend, read by its one parser (argparse shows the message on a bad one)."""
    try:
        return CommBackend.parse(text)
    except GpulabError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _framework(text: str) -> Framework:
    """--framework: a framework's name, read by its one parser (argparse then checks it is one a backend runs)."""
    try:
        return Framework.parse(text)
    except GpulabError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _launcher(text: str) -> Launcher:
    """--launcher: one `gpulab run` takes, read by the vocabulary's one parser (argparse shows the message)."""
    try:
        return Launcher.parse(text, run=True)
    except GpulabError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _precision(text: str) -> Precision:
    """--precision: read by the vocabulary's one parser (argparse shows the message on a bad one)."""
    try:
        return Precision.parse(text, training=True)
    except GpulabError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "workload",
        metavar="WORKLOAD",
        help="a workload name (gpulab.workloads.REGISTRY: the built-in ones and those packages declare)",
    )
    p.add_argument(
        "--framework",
        type=_framework,
        choices=backends.available(),
        default=names.DEFAULT_FRAMEWORK,
        help="torch (default), tensorflow (tf.keras; each run in a fresh process, GPU memory growth on), or a "
        "framework a package adds (entry points, group gpulab.backends)",
    )
    p.add_argument(
        "--precision",
        type=_precision,
        choices=tuple(Precision),
        default=Precision.FP32,
        help="fp32 (TF32 off), tf32 or bf16 autocast",
    )
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format for image models")
    p.add_argument("--batch", type=_positive, help="batch per device (global with --batch-policy global)")
    p.add_argument("--steps", type=_positive, help="timed steps (default: the workload's for --size)")
    p.add_argument("--warmup", type=_non_negative, default=3, help="untimed warm-up steps (default 3)")
    p.add_argument("--size", choices=SIZES, default="standard", help="problem size (default standard)")
    p.add_argument("--data", type=Path, metavar="PATH", help="real data (default: synthetic tensors)")
    p.add_argument(
        "--num-workers",
        type=_non_negative,
        help="DataLoader workers for --data (default: the CPU cores per training process less one, 2 to 8)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--param", action="append", metavar="KEY=VALUE", help="a workload knob, repeatable (--param learning_rate=0.1)"
    )
    p.add_argument(
        "--batch-policy",
        choices=BATCH_POLICIES,
        default="per_device",
        help="per_device: --batch per device, global batch grows with N (default); global: --batch split over N",
    )
    p.add_argument(
        "--scale-lr",
        action="store_true",
        help="linear scaling rule: learning rate × N (needs --param learning_rate=...)",
    )
    p.add_argument("--threads", type=_positive, help="CPU threads (cpu launcher: default all; per process: 1)")
    p.add_argument("--timeout", type=_seconds, default=3600.0, help="seconds before a multi-process run is stopped")
    p.add_argument("--no-telemetry", action="store_true", help="do not sample GPU telemetry through NVML")
    p.add_argument("--report", type=Path, metavar="FILE", help="append the result to this report JSON")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--builder",
        metavar="MODULE:FUNCTION",
        help="build the workload with this function instead of gpulab.workloads:build (your own workloads)",
    )


def add_commands(sub: Any) -> None:
    """Register `run` and `sweep` on the `gpulab` subparsers."""
    run = sub.add_parser(
        "run",
        help="train a workload with one launcher and report samples/s",
        description=(
            "Train WORKLOAD for --steps timed steps after --warmup and print samples/s. Launchers: cpu (--threads), "
            "gpu (one GPU, --index), ddp (torchrun, one process per GPU over NCCL; CPU processes over gloo on a "
            "machine without GPUs), dataparallel (nn.DataParallel over --gpus in one process); with --framework "
            "tensorflow: cpu, gpu and mirrored (MirroredStrategy over --gpus; logical CPU devices without GPUs)."
        ),
    )
    _common(run)
    run.add_argument(
        "--launcher",
        type=_launcher,
        choices=tuple(launcher for launcher in Launcher if launcher.runs),
        default=Launcher.GPU,
        help="how to run it (default gpu)",
    )
    run.add_argument("--gpus", type=_positive, default=1, help="GPUs for ddp/dataparallel (CPU processes without GPUs)")
    run.add_argument("--index", type=_non_negative, default=0, help="which GPU for --launcher gpu (default 0)")
    run.add_argument(
        "--backend",
        dest="comm_backend",
        type=_comm_backend,
        metavar="{" + ",".join(COMM_BACKENDS) + "}",
        help="DDP's process-group backend (default: nccl with GPUs, else gloo)",
    )
    epochs = run.add_argument_group("epoch training (real data, validation after each epoch)")
    epochs.add_argument("--epochs", metavar="N", help="train N epochs over --data instead of timed steps")
    epochs.add_argument(
        "--val-fraction", metavar="F", help="held-out share when the data set has no test split (default 0.1)"
    )
    epochs.add_argument("--target-accuracy", metavar="A", help="report the time to reach this validation metric")
    epochs.add_argument("--weights", type=Path, metavar="FILE", help="a torch state_dict to start from")
    epochs.add_argument("--save-weights", type=Path, metavar="FILE", help="save the trained model's state_dict here")
    epochs.add_argument(
        "--optimizer", metavar="NAME", help="adam or sgd instead of the workload's own (also for timed runs)"
    )
    epochs.add_argument("--lr", metavar="RATE", help="learning rate (also for timed runs)")
    run.set_defaults(func=cmd_run)

    sweep = sub.add_parser(
        "sweep",
        help="independent runs of a workload, one process per GPU, in a psweep database",
        description=(
            "Start independent runs of WORKLOAD, one per GPU at a time and the first ones together, each pinned "
            "to its GPU with CUDA_VISIBLE_DEVICES; record them in a psweep database under --sweep-dir and report "
            "the samples/s of all GPUs together. Without GPUs, --gpus counts CPU processes."
        ),
    )
    _common(sweep)
    sweep.add_argument("--gpus", type=_positive, required=True, help="GPUs to use (CPU processes without GPUs)")
    sweep.add_argument(
        "--runs", type=_positive, help="independent runs (default one per GPU; a multiple runs in turn on each GPU)"
    )
    sweep.add_argument(
        "--sweep-dir", type=Path, default=Path("gpulab-sweep"), help="psweep database directory (default gpulab-sweep)"
    )
    sweep.set_defaults(func=cmd_sweep)
