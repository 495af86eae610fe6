"""Human-readable views of a report: Markdown, and one self-contained HTML page with plots.

Both open with a front page (the verdict, each failure with its cause and fix, the key figures against
the datasheet and baseline, speedups and scaling) and keep every detail below it. The HTML page has
inline CSS and inline SVG plots and charts (Jinja2 templates, matplotlib), and no external URL, so it
can be mailed or archived as one file. All text from the report is HTML-escaped.
"""

from __future__ import annotations

from pathlib import Path

from gpulab.records import Report
from gpulab.report.html_page import to_html
from gpulab.report.io import atomic_write_text
from gpulab.report.markdown import to_markdown

__all__ = ["rendered_paths", "to_html", "to_markdown", "write_rendered"]


def rendered_paths(json_path: Path) -> tuple[Path, Path]:
    """Where the Markdown and HTML views of `json_path` go: beside it, same stem."""
    json_path = Path(json_path)
    return json_path.with_suffix(".md"), json_path.with_suffix(".html")


def write_rendered(report: Report, json_path: Path) -> tuple[Path, Path]:
    """Write `<stem>.md` and `<stem>.html` beside the report JSON, atomically; returns both paths."""
    md_path, html_path = rendered_paths(json_path)
    atomic_write_text(md_path, to_markdown(report))
    atomic_write_text(html_path, to_html(report))
    return md_path, html_path
