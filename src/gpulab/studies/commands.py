"""`gpulab study list | run | resume | report | worker`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.interrupts import stopped
from gpulab.progress_line import ProgressLine

SHIPPED = Path(__file__).parent / "files"


def shipped() -> dict[str, Path]:
    """The studies shipped with gpulab, by name (the file's stem)."""
    return {p.stem: p for p in sorted(SHIPPED.glob("*.yml"))}


def study_path(given: str) -> Path:
    """A study file path, or the name of a shipped study."""
    path = Path(given).expanduser()
    if path.exists() or "/" in given or given.endswith((".yml", ".yaml")):
        return path
    known = shipped()
    if given in known:
        return known[given]
    raise GpulabError(
        f"{given!r} is neither a study file nor a shipped study; shipped: {', '.join(known)} (`gpulab study list`)"
    )


def cmd_list(args: argparse.Namespace) -> int:
    from gpulab.studies.spec import load_study

    for name, path in shipped().items():
        study = load_study(path)
        variants = ", ".join(study_variants(path)) or "none"
        print(f"{name:24} {study.title or study.workload}  (variants: {variants})")
    return 0


def study_variants(path: Path) -> list[str]:
    from gpulab.paths import load_yaml

    data = load_yaml(path.read_text())
    if not isinstance(data, dict):
        return []
    return [str(v) for v in (data.get("variants") or {})]


def cmd_run(args: argparse.Namespace) -> int:
    from gpulab.studies.runner import load_recorded
    from gpulab.studies.spec import load_study

    if args.command_name == "resume":
        study_dir = Path(args.study_dir)
        study = load_recorded(study_dir)
    else:
        from gpulab.launch.commands import parse_params
        from gpulab.studies.spec import with_overrides

        study = load_study(study_path(args.study), args.variant)
        study = with_overrides(study, parse_params(args.param), args.data)
        study_dir = Path(args.study_dir or f"study-{study.name}" + (f"-{study.variant}" if study.variant else ""))
    if args.workers is not None:
        import dataclasses

        study = dataclasses.replace(study, workers=args.workers)
    if args.runs_per_gpu is not None:
        import dataclasses

        study = dataclasses.replace(study, per_gpu=args.runs_per_gpu)
    if args.batch_runs is not None:
        import dataclasses

        study = dataclasses.replace(study, batch_runs=args.batch_runs)
    return _run(study, study_dir, resume=args.command_name == "resume", scheduler=args.scheduler, args=args)


def _run(study: Any, study_dir: Path, *, resume: bool, scheduler: str | None, args: argparse.Namespace) -> int:
    from gpulab.studies.page import write_report
    from gpulab.studies.psets import parameter_sets
    from gpulab.studies.runner import run_study

    total = len(parameter_sets(study))
    where = scheduler or "this machine"
    print(f"study {study.name}: {total} runs of {study.workload} on {where} → {study_dir}", file=sys.stderr)
    line = ProgressLine(f"study {study.name}", total, unit="runs finished")

    def progress(done: int, todo: int) -> None:  # this session's runs: `todo` of the study's `total`
        line.update(done, total=todo)

    try:
        with line:
            session = run_study(
                study,
                study_dir,
                resume=resume,
                scheduler=scheduler,
                progress=progress,
                command=_command_line(),
                trust_pickles=getattr(args, "trust_pickles", False),
            )
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the session was recorded on the way out
        word, code = stopped(stop)
        print(
            f"gpulab: {word}; finished runs are kept in {study_dir}, `gpulab study resume {study_dir}` runs the rest",
            file=sys.stderr,
        )
        return code
    for note in session.notes:
        print(f"study {study.name}: {note}", file=sys.stderr)
    html, md = write_report(study_dir)
    on = "the machine" if study.whole_machine else f"{len(session.workers)} worker(s)"
    print(
        f"study {study.name}: {session.ok} ok, {session.failed} failed of {session.runs} runs in "
        f"{session.wall_s:.1f} s on {on}; report {html} and {md}"
    )
    return 1 if session.failed else 0


def _command_line() -> str:
    import shlex

    return shlex.join(["gpulab", *sys.argv[1:]])


def cmd_report(args: argparse.Namespace) -> int:
    from gpulab.studies.page import write_report

    study_dir = Path(args.study_dir)
    _check_report_outputs(study_dir, args.html, args.md)
    if args.trust_pickles:
        _migrate(study_dir)
    html, md = write_report(study_dir, html=args.html, md=args.md)
    print(f"{html}\n{md}")
    return 0


def _check_report_outputs(study_dir: Path, html: Path | None, md: Path | None) -> None:
    """The pages are refused where they would replace one of the study's own files (its database, study file, a
    run's row or image): outputs go beside the study's files or elsewhere, never over them."""
    from gpulab.paths import Output, OutputPathError, check_outputs

    outputs = [Output(p, w, n) for p, w, n in ((html, "--html", "report.html"), (md, "--md", "report.md")) if p]
    check_outputs(outputs, kind="file")
    own = {study_dir.resolve() / name for name in ("report.html", "report.md")}
    for out in outputs:
        target = Path(out.path).resolve()
        inside = target.is_relative_to(study_dir.resolve())
        if inside and target not in own:
            raise OutputPathError(
                f"{out.what} {out.path} lies inside the study directory {study_dir}, among its data; write the page "
                f"as {study_dir / out.name} (the default) or outside the directory"
            )


def _migrate(study_dir: Path) -> None:
    """A directory an older gpulab left as pickles, read once on the user's word and written as database.json."""
    from gpulab.report.database import merge_database
    from gpulab.studies.runner import load_database

    df = load_database(study_dir, trust_pickles=True)
    if len(df):
        merge_database(study_dir, df)


def cmd_status(args: argparse.Namespace) -> int:
    import json

    from gpulab.studies import ledger
    from gpulab.studies.runner import load_database, load_recorded

    study_dir = Path(args.study_dir)
    study = load_recorded(study_dir)
    counts = ledger.counts(study, load_database(study_dir, trust_pickles=args.trust_pickles))
    if args.json:
        print(
            json.dumps({"study": study.name, "variant": study.variant, "study_dir": str(study_dir), **counts.to_dict()})
        )
    else:
        print(f"study {study.name}" + (f" ({study.variant})" if study.variant else "") + f": {counts.line()}")
        if counts.failed or counts.missing:
            print(f"`gpulab study resume {study_dir}` runs the {counts.failed + counts.missing} not done")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from gpulab.studies import cluster
    from gpulab.studies.packing import gpu_totals, packed

    # Nanny would wait without end for an address where no Dask scheduler answers: checked first, as --scheduler is.
    cluster.reachable(args.scheduler, "study worker")
    slots = cluster.slots(args.workers, args.threads, host=cluster.this_host())
    chosen = packed(slots, args.runs_per_gpu, gpu_totals())
    names = ", ".join(s.label for s in chosen)
    print(f"study workers for {args.scheduler}: {names} (Ctrl-C stops them)", file=sys.stderr)
    try:
        cluster.serve(args.scheduler, chosen)
    except KeyboardInterrupt as stop:  # the workers are stopped; Ctrl-C at the terminal needs no line
        word, code = stopped(stop)
        if code != 130:
            print(f"gpulab: {word}", file=sys.stderr)
        return code
    return 0


def _count(text: str) -> int | str:
    if text == "all":
        return "all"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not all or a whole number ≥ 1")
    return value


def _auto_or_count(text: str) -> int | str:
    """--per-gpu and --batch-runs: auto or a whole number ≥ 1."""
    from gpulab.studies.packing import auto_or_count

    try:
        return auto_or_count(text, "", "")
    except GpulabError:
        raise argparse.ArgumentTypeError(f"{text!r} is not auto or a whole number ≥ 1") from None


def _worker_runs_per_gpu(text: str) -> int:
    """--per-gpu of `study worker`: the grammar of `study run`'s, where auto is refused (a worker has no study to
    size from: the study's own `run` sizes its packing; give the number it chose, in its sessions.json)."""
    value = _auto_or_count(text)
    if value == "auto":
        raise argparse.ArgumentTypeError(
            "auto is sized by `gpulab study run` from the study's first runs; a worker takes a number (the study's "
            "sessions.json records the one auto chose)"
        )
    return int(value)


def _positive(text: str) -> int:
    value = _count(text)
    if value == "all":
        raise argparse.ArgumentTypeError("give a whole number ≥ 1")
    return int(value)


def add_commands(sub: Any) -> None:
    study = sub.add_parser(
        "study",
        help="parameter studies and the original experiments: runs on long-lived workers, one per GPU",
        description="Run a study file (or a shipped study) on Dask workers pinned one per GPU, here or across hosts; "
        "every run is a row of a psweep database with its parameters, seed, loss curve, timings and status.",
    )
    verbs = study.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="the studies shipped with gpulab")
    listing.set_defaults(func=cmd_list)

    run = verbs.add_parser("run", help="run a study file or a shipped study")
    run.add_argument("study", help="study file (YAML) or the name of a shipped study (gpulab study list)")
    run.add_argument("--variant", help="a variant the file defines (e.g. tiny)")
    run.add_argument("--study-dir", type=Path, help="where the database and runs go (default study-NAME[-VARIANT])")
    run.add_argument(
        "--param", action="append", metavar="KEY=VALUE", help="set a fixed parameter (e.g. vgg_weights=FILE)"
    )
    run.add_argument("--data", type=Path, help="the training data (a folder, or digits), replacing the file's")
    run.set_defaults(func=cmd_run, command_name="run")

    resume = verbs.add_parser("resume", help="run what a study directory is missing (failed or never run)")
    resume.add_argument("study_dir", type=Path, help="the directory `gpulab study run` wrote")
    resume.set_defaults(func=cmd_run, command_name="resume")
    for verb in (run, resume):
        verb.add_argument("--scheduler", help="a Dask scheduler (tcp://HOST:8786) whose workers run the study")
        verb.add_argument("--workers", type=_count, help="workers to start here: all GPUs (default) or N")
        verb.add_argument(
            "--per-gpu",
            dest="runs_per_gpu",
            type=_auto_or_count,
            help="runs at once on each GPU: auto (the study file's default: sized from the first runs' memory and "
            "GPU use) or N (1: one at a time)",
        )
        verb.add_argument(
            "--batch-runs",
            type=_auto_or_count,
            help="runs that differ only in numbers optimised together as one batch: N, auto (sized from the first "
            "batch's memory) or 1 (one at a time); default: the study file's batch_runs, else 1",
        )

    report = verbs.add_parser("report", help="render a study directory's report (HTML and Markdown)")
    report.add_argument("study_dir", type=Path)
    report.add_argument("--html", type=Path, help="default STUDY_DIR/report.html")
    report.add_argument("--md", type=Path, help="default STUDY_DIR/report.md")
    report.set_defaults(func=cmd_report)

    status = verbs.add_parser("status", help="a study directory's runs: planned, done, failed, missing, repeated")
    status.add_argument("study_dir", type=Path)
    status.add_argument("--json", action="store_true", help="the counts as one JSON object")
    status.set_defaults(func=cmd_status)
    for verb in (resume, report, status):
        verb.add_argument(
            "--trust-pickles",
            action="store_true",
            help="read the pickles an older gpulab left in the directory (a pickle can run code: only your own)",
        )

    worker = verbs.add_parser("worker", help="serve a Dask scheduler with workers pinned one per GPU of this host")
    worker.add_argument("scheduler", help="the scheduler's address, tcp://HOST:8786")
    worker.add_argument("--workers", type=_count, default="all", help="all GPUs (default) or the first N")
    worker.add_argument("--threads", type=_positive, default=1, help="threads per CPU worker (hosts without GPUs)")
    worker.add_argument(
        "--per-gpu",
        dest="runs_per_gpu",
        type=_worker_runs_per_gpu,
        default=1,
        help="runs at once on each GPU: workers pinned to it (default 1)",
    )
    worker.set_defaults(func=cmd_worker)
