"""Compare reports: rows matched by key (keys), judged with their intervals (rows), the host's contention told apart
(host), the machines' differences explained (fingerprint); shown as text and Markdown (render), a page (page) with
its charts (plots). `compare()` is the entry point; the views are imported where they are shown."""

from gpulab.report.compare.comparison import (
    MEDIAN_NOTE,
    MODES,
    Comparison,
    choose_mode,
    compare,
    parse_threshold,
    short_labels,
)

__all__ = ["MEDIAN_NOTE", "MODES", "Comparison", "choose_mode", "compare", "parse_threshold", "short_labels"]
