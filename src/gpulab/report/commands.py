"""`gpulab report` (render a saved report) and `gpulab compare` (find regressions between reports)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.paths import Output, check_outputs
from gpulab.records import Report
from gpulab.report.compare import MEDIAN_NOTE, MODES, compare, parse_threshold
from gpulab.report.io import atomic_write_text, load_report
from gpulab.report.render import rendered_paths, to_html, to_markdown


@dataclass(frozen=True)
class Baselines:
    """The named baselines `gpulab compare` accepts. The CLI passes them in: the studies' published figures and
    the validation's known-good rows live in packages above this one."""

    prefix: str  # a REPORT argument starting with it names a shipped baseline
    resolve: Callable[[str], str]  # such an argument -> the path of its report (others unchanged)
    known_good: Callable[[str], Report]  # GPU model -> its known-good rows as a report


def add_commands(sub: Any, baselines: Baselines) -> None:
    """Register `report` and `compare` on the `gpulab` subparsers."""
    rep = sub.add_parser(
        "report",
        help="render a saved report as Markdown and HTML",
        description=(
            "Render a report JSON. With no option, writes <stem>.md and <stem>.html beside FILE. "
            "Exit 2 when FILE is not a readable gpulab report or an output cannot be written (FILE itself is "
            "never overwritten); nothing is written then."
        ),
    )
    rep.add_argument("file", metavar="FILE", type=Path, help="a report-*.json written by a validation run")
    rep.add_argument("--html", metavar="OUT", type=Path, help="write the self-contained HTML page to OUT")
    rep.add_argument("--md", metavar="OUT", type=Path, help="write the Markdown to OUT")
    rep.add_argument("--print", dest="print_format", choices=("md", "html"), help="print it to stdout")
    rep.set_defaults(func=cmd_report)

    cmp_ = sub.add_parser(
        "compare",
        help="compare reports: a regression check on the same machine kind, side by side otherwise",
        description=(
            "Compare reports; the first is the baseline. The mode is printed first with the reason: 'same' when "
            "every report has the same GPU models and counts (a regression check: a measurement regresses when "
            "it is more than --threshold percent below the baseline, a check that passed and fails now regresses "
            "too; a VM against its bare-metal host also shows the VM/host ratio per row), 'different' otherwise "
            "(no verdict: speedups and scaling first, then throughputs with ratios, per GPU, per W where "
            "telemetry has power, per $ with --price). Every measurement is kept: " + MEDIAN_NOTE + ". Checks "
            "not run under the same name in every report are listed as not comparable. The verdict gives the GPUs' and "
            "the host's apart: host and host-bound rows that fell on a host a report measured as contended (CPU "
            "pressure, steal, a slower CPU calibration) are shown as host contended, not regressions. Exit 0: a "
            "comparison or no regression; 1: a regression (same mode only); 2: bad input or nothing in common."
        ),
    )
    cmp_.add_argument(
        "files",
        metavar="REPORT",
        nargs="+",
        help="baseline, then others; baseline:NAME is a study's published figures (gpulab study list)",
    )
    cmp_.add_argument(
        "--known-good",
        metavar="GPU_MODEL",
        help="compare against the known-good rows of this GPU model (e.g. 'NVIDIA H200') as the baseline",
    )
    cmp_.add_argument(
        "--threshold",
        default="5%",
        metavar="PCT",
        help="allowed drop in percent: '5%%' or '5' (default 5%%); write '0.5%%' for half a percent",
    )
    cmp_.add_argument(
        "--mode",
        choices=MODES,
        help="force the mode instead of reading it from the fingerprints (GPU models and counts)",
    )
    cmp_.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="LABEL=USD_PER_HOUR",
        help="the hourly price of a report's machine, for per-dollar figures; LABEL is the report's file name "
        "or its position (1 = first); repeatable",
    )
    cmp_.add_argument(
        "--html", metavar="OUT", type=Path, help="also write the comparison as a self-contained HTML page"
    )
    cmp_.add_argument("--md", metavar="OUT", type=Path, help="also write the comparison as Markdown")
    cmp_.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp_.set_defaults(func=cmd_compare, baselines=baselines)


def _outputs(args: argparse.Namespace) -> list[tuple[Output, str]]:
    """(output, format) for every file this `gpulab report` call writes."""
    source = Path(args.file)
    if args.md or args.html:
        outputs = []
        for path, fmt in ((args.md, "md"), (args.html, "html")):
            if path is None:
                continue
            beside = source.with_suffix(f".{fmt}")
            fix = f"choose another path, e.g. {beside}" if beside != source else "choose another path"
            outputs.append((Output(path, f"--{fmt}", f"{source.stem}.{fmt}", fix), fmt))
        return outputs
    if args.print_format:
        return []
    md, page = rendered_paths(args.file)
    fix = "rename the report to .json or pass --md OUT and --html OUT"
    return [
        (Output(md, "the Markdown view", md.name, fix), "md"),
        (Output(page, "the HTML view", page.name, fix), "html"),
    ]


def _study_page(source: Path, report: Report) -> bool:
    """Whether `source` is a study's report.json (`gpulab study` wrote it, or a study's record lies beside it), whose
    .html/.md beside it are the study's own pages (loss curves, images), not a validation view."""
    command = (report.command or "").split()
    written_by_study = command[1:2] == ["study"]
    return written_by_study or (source.parent / "study.json").is_file() or (source.parent / "study.yml").is_file()


def _refuse_study_pages(source: Path, report: Report, outputs: list[tuple[Output, str]]) -> None:
    if not _study_page(source, report):
        return
    own = {p.resolve() for p in rendered_paths(source)}
    for out, _ in outputs:
        if Path(out.path).resolve() in own:
            raise GpulabError(
                f"{source} is a study's report: {out.path} is the study's page, not this command's to replace; "
                f"`gpulab study report {source.parent}` renders it (or pass --html/--md naming other files for the "
                "validation view)"
            )


def cmd_report(args: argparse.Namespace) -> int:
    report = load_report(args.file)
    outputs = _outputs(args)
    _refuse_study_pages(Path(args.file), report, outputs)
    # before anything is rendered or written
    check_outputs([out for out, _ in outputs], inputs=[args.file], kind="report")
    render = {"md": to_markdown, "html": to_html}
    texts = [(out.path, render[fmt](report)) for out, fmt in outputs]  # all rendered before the first write
    written = [atomic_write_text(path, text) for path, text in texts]
    if args.print_format:
        sys.stdout.write(render[args.print_format](report))
    for path in written:
        print(f"wrote {path}", file=sys.stderr if args.print_format else sys.stdout)
    return 0


def _prices(texts: list[str], labels: list[str], paths: list[str]) -> dict[int, float]:
    out: dict[int, float] = {}
    for text in texts:
        label, sep, number = text.rpartition("=")
        try:
            price = float(number)
        except ValueError:
            price = float("nan")
        if not sep or not label or not math.isfinite(price) or price <= 0:
            raise GpulabError(f"bad --price {text!r}: expected LABEL=USD_PER_HOUR, e.g. 'h100x1.json=2.49'")
        if label.isdigit() and 1 <= int(label) <= len(labels):
            out[int(label) - 1] = price
            continue
        found = [
            i for i, (lab, path) in enumerate(zip(labels, paths, strict=True)) if label in (lab, path, Path(path).name)
        ]
        if not found:
            raise GpulabError(f"bad --price {text!r}: no report {label!r}; the reports are {', '.join(labels)}")
        out[found[0]] = price
    return out


def cmd_compare(args: argparse.Namespace) -> int:
    from gpulab.report.compare import page as compare_page
    from gpulab.report.compare import render as compare_render

    baselines: Baselines = args.baselines
    threshold = parse_threshold(args.threshold)
    paths = [Path(baselines.resolve(p)) for p in args.files]  # baseline:NAME is a study's published figures
    names = [p if p.startswith(baselines.prefix) else str(path) for p, path in zip(args.files, paths, strict=True)]
    outputs = [
        (Output(path, f"--{fmt}", f"compare.{fmt}", "choose another path"), fmt)
        for path, fmt in ((args.md, "md"), (args.html, "html"))
        if path is not None
    ]
    check_outputs([out for out, _ in outputs], inputs=paths, kind="report")  # before any work
    reports = [(name, load_report(path)) for name, path in zip(names, paths, strict=True)]
    sources = list(names)
    if args.known_good:
        reports.insert(0, (f"known-good {args.known_good}", baselines.known_good(args.known_good)))
        sources.insert(0, reports[0][0])
    if len(reports) < 2:
        raise GpulabError(
            "compare needs at least two reports: the baseline first (or --known-good GPU_MODEL), then the runs"
        )
    prices = _prices(args.price, [label for label, _ in reports], sources)
    result = compare(reports, threshold_pct=threshold, mode=args.mode, prices=prices)
    render = {"md": compare_render.to_markdown, "html": compare_page.to_html}
    texts = [(out.path, render[fmt](result)) for out, fmt in outputs]
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        sys.stdout.write(compare_render.to_text(result, compare_render.terminal_width()))
    for path, text in texts:
        print(f"wrote {atomic_write_text(path, text)}", file=sys.stderr if args.json else sys.stdout)
    return 1 if result.regressions else 0
