"""Health verdicts over a host fingerprint: each function returns one Check whose message names cause and fix.

Pure functions of the Fingerprint (plus what the caller expects), so they run on captured fixtures in CI and
on live NVML data in validate/. A check passes only on positive evidence: a value its source did not report
(N/A, absent, unknown) makes it skip with "... not reported by <source>", and what a capture cannot hold
(toolkits, frameworks) with "... not captured".

One module per family of checks; this package names them all, as validate/ calls them (`health.ecc`).
"""

from __future__ import annotations

from gpulab.checks.health.board import BENIGN_IDLE_REASONS, idle_throttle, persistence, thermal
from gpulab.checks.health.links import REPLAY_BOUND, REPLAY_SATURATED, mobile, pcie_link, pcie_replays
from gpulab.checks.health.memory import ecc, memory_retirement
from gpulab.checks.health.modes import mig_enabled, mode, vgpu_host, vgpu_slice, whole_gpu, whole_gpu_notice
from gpulab.checks.health.stack import driver_for_cuda, stack_supports_arch
from gpulab.checks.health.verdict import LIVE_SOURCE, gpu_label, product_class, reporter
from gpulab.checks.health.visibility import framework_sees_gpus, gpu_count

__all__ = [
    "BENIGN_IDLE_REASONS",
    "LIVE_SOURCE",
    "REPLAY_BOUND",
    "REPLAY_SATURATED",
    "driver_for_cuda",
    "ecc",
    "framework_sees_gpus",
    "gpu_count",
    "gpu_label",
    "idle_throttle",
    "memory_retirement",
    "mig_enabled",
    "mobile",
    "mode",
    "pcie_link",
    "pcie_replays",
    "persistence",
    "product_class",
    "reporter",
    "stack_supports_arch",
    "thermal",
    "vgpu_host",
    "vgpu_slice",
    "whole_gpu",
    "whole_gpu_notice",
]
