"""NVIDIA nccl-tests' `all_reduce_perf`, when installed: run it with `-J FILE` and read its JSON.

nccl-tests writes one record per message size under `results`, each with `out_of_place` and `in_place`
timings (`time` in µs, `alg_bw`, `bus_bw` in GB/s, `nwrong`), and the run's shape under `config`
(`nthreads` × `ngpus` GPUs per process, one `devices` entry per process). Its bus bandwidth is the same
figure gpulab's own all-reduce probe reports, so the two rows sit side by side in a report.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from gpulab.errors import GpulabError
from gpulab.names import CommBackend, Framework, Launcher, Precision
from gpulab.records import Result

BINARY = "all_reduce_perf"
NCCL_TYPES = {"float": Precision.FP32, "half": Precision.FP16, "bfloat16": Precision.BF16}  # all_reduce_perf -d


def find_binary() -> str | None:
    """`$NCCL_TESTS_BIN/all_reduce_perf` when that is set, else `all_reduce_perf` on the PATH."""
    folder = os.environ.get("NCCL_TESTS_BIN")
    if folder:
        path = Path(folder) / BINARY
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(BINARY)


def parse_all_reduce_json(data: dict[str, Any], source: str = "<json>") -> Result:
    """The largest message size's best (out-of-place or in-place) bus bandwidth as a Result."""
    try:
        config = data["config"]
        records = [r for r in data["results"] if isinstance(r, dict) and "size" in r]
        # `config.devices` has one entry per process (several under MPI), each driving nthreads × ngpus GPUs.
        n = int(config.get("nthreads", 1)) * int(config["ngpus"]) * max(1, len(config.get("devices", [])))
    except (KeyError, TypeError, ValueError) as err:
        raise GpulabError(
            f"{source}: not an nccl-tests JSON report (missing {err}); "
            "write one with `all_reduce_perf ... -J FILE.json`"
        ) from None
    if not records:
        raise GpulabError(f"{source}: nccl-tests report has no results: did the run fail? Rerun with NCCL_DEBUG=WARN")
    largest = max(records, key=lambda r: int(r["size"]))
    timings: list[dict[str, Any]] = [
        t
        for t in (largest.get(k) for k in ("out_of_place", "in_place"))
        if isinstance(t, dict) and t.get("bus_bw") is not None
    ]
    if not timings:
        raise GpulabError(f"{source}: nccl-tests record for {largest['size']} bytes carries no bus bandwidth")
    best = max(timings, key=lambda t: float(t["bus_bw"]))
    wrong = sum(float(t.get("nwrong") or 0) for t in timings)
    return Result(
        workload="allreduce",
        framework=Framework.NCCL_TESTS,
        launcher=Launcher.DDP,  # one NCCL rank per device, as the all-reduce probe's process group
        n=n,
        precision=NCCL_TYPES.get(str(largest.get("type")), Precision.FP32),
        value=float(best["bus_bw"]),
        unit="GB/s",
        devices=[f"cuda:{i}" for i in range(n)],
        seconds=float(best.get("time", 0.0)) / 1e6 * int(config.get("iterations", 1)),
        iterations=int(config.get("iterations", 0)) or None,
        params={
            "bytes": int(largest["size"]),
            "algbw_gbs": float(best["alg_bw"]),
            "metric": "bus bandwidth",
            "correct": wrong == 0,
            "nccl_version": data.get("nccl_version"),
        },
        comm_backend=CommBackend.NCCL,  # the transport it measures
    )


def run_all_reduce_perf(binary: str, ngpus: int, size: str = "256M", timeout_s: float = 180.0) -> Result:
    """Run `all_reduce_perf -b SIZE -e SIZE -g NGPUS -J out.json` in one process and parse its JSON."""
    with tempfile.TemporaryDirectory(prefix="gpulab-nccl-tests-") as tmp:
        out = Path(tmp) / "all_reduce.json"
        cmd = [binary, "-b", size, "-e", size, "-g", str(ngpus), "-w", "5", "-n", "20", "-J", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            raise GpulabError(
                f"{' '.join(cmd)} did not finish in {timeout_s:.0f} s: rerun with NCCL_DEBUG=INFO"
            ) from err
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stderr or proc.stdout)[-1500:]
            raise GpulabError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{tail}")
        try:
            data = json.loads(out.read_text())
        except json.JSONDecodeError as err:
            raise GpulabError(f"{out}: nccl-tests wrote invalid JSON ({err})") from err
    return parse_all_reduce_json(data, source=str(out))
