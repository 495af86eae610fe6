"""Micro-benchmarks that show what the hardware delivers: matmul TFLOP/s, memory and PCIe bandwidth, all-reduce.

Each probe returns a `gpulab.records.Result`; judging it against the SKU's spec is the caller's job.
"""
