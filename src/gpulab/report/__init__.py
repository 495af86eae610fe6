"""The validation report: typed records, JSON Schema, validated atomic I/O, renderers and compare."""

from gpulab.report.io import ReportError, default_report_path, load_report, write_report
from gpulab.report.model import (
    SCHEMA_ID,
    Check,
    Report,
    Result,
    Scaling,
    Speedup,
    TelemetrySummary,
    Threshold,
)

__all__ = [
    "SCHEMA_ID",
    "Check",
    "Report",
    "ReportError",
    "Result",
    "Scaling",
    "Speedup",
    "TelemetrySummary",
    "Threshold",
    "default_report_path",
    "load_report",
    "write_report",
]
