"""`gpulab report` (render a saved report) and `gpulab compare` (find regressions between reports)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.report.compare import compare, parse_threshold
from gpulab.report.io import atomic_write_text, load_report
from gpulab.report.render import to_html, to_markdown, write_rendered


def add_commands(sub: Any) -> None:
    """Register `report` and `compare` on the `gpulab` subparsers."""
    rep = sub.add_parser(
        "report",
        help="render a saved report as Markdown and HTML",
        description=(
            "Render a report JSON. With no option, writes <stem>.md and <stem>.html beside FILE. "
            "Exit 2 when FILE is not a readable gpulab report."
        ),
    )
    rep.add_argument("file", metavar="FILE", type=Path, help="a report-*.json written by a validation run")
    rep.add_argument("--html", metavar="OUT", type=Path, help="write the self-contained HTML page to OUT")
    rep.add_argument("--md", metavar="OUT", type=Path, help="write the Markdown to OUT")
    rep.add_argument("--print", dest="print_format", choices=("md", "html"), help="print it to stdout")
    rep.set_defaults(func=cmd_report)

    cmp_ = sub.add_parser(
        "compare",
        help="compare reports against a baseline and flag regressions",
        description=(
            "Compare reports: the first is the baseline. A measurement regresses when it is more than "
            "--threshold percent below the baseline; a check that passed in the baseline and fails now "
            "regresses too. Exit 0: no regression, 1: regression, 2: bad input."
        ),
    )
    cmp_.add_argument("files", metavar="REPORT", nargs="+", type=Path, help="baseline, then others")
    cmp_.add_argument(
        "--threshold",
        default="5%",
        metavar="PCT",
        help="allowed drop in percent: '5%%' or '5' (default 5%%); write '0.5%%' for half a percent",
    )
    cmp_.add_argument("--json", action="store_true", help="print the comparison as JSON")
    cmp_.set_defaults(func=cmd_compare)


def cmd_report(args: argparse.Namespace) -> int:
    report = load_report(args.file)
    written: list[Path] = []
    if args.md:
        written.append(atomic_write_text(args.md, to_markdown(report)))
    if args.html:
        written.append(atomic_write_text(args.html, to_html(report)))
    if not (args.md or args.html or args.print_format):
        written += write_rendered(report, args.file)
    if args.print_format:
        sys.stdout.write(to_markdown(report) if args.print_format == "md" else to_html(report))
    for path in written:
        print(f"wrote {path}", file=sys.stderr if args.print_format else sys.stdout)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    threshold = parse_threshold(args.threshold)
    if len(args.files) < 2:
        raise GpulabError("compare needs at least two reports: the baseline first, then the runs to compare")
    reports = [(str(path), load_report(path)) for path in args.files]
    result = compare(reports, threshold_pct=threshold)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        sys.stdout.write(result.to_text())
    return 1 if result.regressions else 0
