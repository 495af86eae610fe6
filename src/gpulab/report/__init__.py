"""The validation report: JSON Schema, validated atomic I/O, renderers and compare. Its records (`Result`, `Report`,
...) live in `gpulab.records`."""

from gpulab.report.io import ReportError, default_report_path, load_report, write_report

__all__ = ["ReportError", "default_report_path", "load_report", "write_report"]

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = (
    "append",
    "commands",
    "compare",
    "compare.render",
    "database",
    "formatting",
    "hostload",
    "io",
    "markdown",
    "plots",
    "render",
    "scaling",
    "spread",
    "templating",
    "timeline",
    "views",
)
