"""Micro-benchmarks that show what the hardware delivers: matmul TFLOP/s, memory and PCIe bandwidth, all-reduce.

Each probe returns a `gpulab.records.Result`; judging it against the SKU's spec is the caller's job.
"""

# Besides this face, the modules other packages may import (tests/test_import_graph.py holds every import to them).
DOORS: tuple[str, ...] = ("judge",)
