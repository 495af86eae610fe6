"""`gpulab info`: what this machine is (host, GPUs, topology, software)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def run_info(args: argparse.Namespace) -> int:
    from gpulab.hw.discover import fingerprint  # deferred so `gpulab --help` stays fast

    # The captures are checked (regular file, size) and read by their parsers, --from first.
    fp = fingerprint(
        smi_xml=args.from_xml,
        topo_file=args.topo,
        nvlink_file=args.nvlink,
        probe_frameworks=not args.no_frameworks,
    )
    if args.json:
        json.dump(fp.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from gpulab.hw.render import render

        render(fp)
    return 0  # no GPU is a finding, not a failure


def add_commands(sub: Any) -> None:
    """Register `info` on the top-level subparsers object."""
    p = sub.add_parser(
        "info",
        help="describe this machine: host, GPUs, topology, software",
        description="Describe this machine: CPU/NUMA/hypervisor/IOMMU, GPUs (live NVML, or a captured "
        "`nvidia-smi -q -x` with --from), GPU topology and the CUDA software stack.",
    )
    p.add_argument("--json", action="store_true", help="print the fingerprint as JSON")
    p.add_argument(
        "--from",
        dest="from_xml",
        type=Path,
        metavar="NVIDIA_SMI_XML",
        help="describe the host a saved `nvidia-smi -q -x` was taken on: its driver, CUDA version and GPUs "
        "only; nothing is read from this machine (host, toolkits, frameworks show as not captured)",
    )
    p.add_argument("--topo", type=Path, metavar="TOPO_FILE", help="a saved `nvidia-smi topo -m` for the matrix")
    p.add_argument("--nvlink", type=Path, metavar="NVLINK_FILE", help="a saved `nvidia-smi nvlink -s`")
    p.add_argument("--no-frameworks", action="store_true", help="skip importing torch / probing tensorflow")
    p.set_defaults(func=run_info)
