"""The validation report: JSON Schema, validated atomic I/O, renderers and compare. Its records (`Result`, `Report`,
...) live in `gpulab.records`."""

from gpulab.report.io import ReportError, default_report_path, load_report, write_report

__all__ = ["ReportError", "default_report_path", "load_report", "write_report"]
