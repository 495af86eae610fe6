"""Seed the faults one GPU machine can show, run the quick validation for each, and check that each fails
exactly its own check (compared with a clean run on the same machine). Nothing is changed on the GPU: no
clocks, power limits, modes or persistence settings are set; the power limit is only read.

Run on the GPU machine from the repository root (torch and nvidia-ml-py installed, no internet needed):

    OUT=${OUT:-/tmp/seed-faults} python tests/device/seed_faults.py

Results: $OUT/seed_faults.json (one entry per scenario: the command, exit status, failing checks, expected
ones, ok) and each run's report under $OUT/<scenario>/. Exit status 0 when every scenario failed exactly its
expected checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("OUT", "/tmp/seed-faults"))
QUICK = ["-k", "health or occupancy or gpus"]  # the checks these faults touch; probes time nothing here

# A process of another user's kind: holds 8 GiB and keeps the GPU busy until killed.
HOG = """
import time, torch
x = torch.empty(8 * 1024**3, dtype=torch.uint8, device="cuda")
a = torch.randn(4096, 4096, device="cuda")
print("ready", flush=True)
while True:
    a = a @ a
    a = a / a.norm()
    torch.cuda.synchronize()
"""


def run_suite(name: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    where = OUT / name
    where.mkdir(parents=True, exist_ok=True)
    record = where / "run.json"
    cmd = [sys.executable, "-m", "pytest", "validate/", "-p", "no:cacheprovider", "--tier", "quick", *QUICK]
    cmd += ["--report-dir", str(where), "--record", str(record), *args]
    full_env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}", **(env or {})}
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=900)
    (where / "stdout.txt").write_text(proc.stdout + proc.stderr)
    checks: dict[str, tuple[str, str]] = {}
    if record.exists():
        report = json.loads(Path(json.loads(record.read_text())["report"]["json"]).read_text())
        checks = {c["name"]: (c["status"], c["message"]) for c in report["checks"]}
    return {
        "command": " ".join(cmd[2:]),
        "env": env or {},
        "exit_status": proc.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "checks": checks,
    }


def failing(run: dict[str, Any]) -> set[str]:
    return {n for n, (status, _) in run["checks"].items() if status in ("fail", "error")}


def power_facts() -> dict[str, Any]:
    """The power limit, its default and minimum, read through NVML (never set)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
        return {
            "enforced_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
            "default_w": pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000,
            "min_max_w": [v / 1000 for v in pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)],
            "sw_power_cap_active": bool(reasons & 0x4),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(h, 0),
            "pcie_replays": pynvml.nvmlDeviceGetPcieReplayCounter(h),
        }
    finally:
        pynvml.nvmlShutdown()


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"power": power_facts()}
    clean = run_suite("clean")
    results["clean"] = {**clean, "failing": sorted(failing(clean))}
    base = failing(clean)
    scenarios: list[tuple[str, set[str], dict[str, Any]]] = []

    # 1. A busy GPU: another process holds memory and computes on it.
    hog = subprocess.Popen([sys.executable, "-c", HOG], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout is not None and hog.stdout.readline().strip() == "ready"
        time.sleep(2)
        scenarios.append(("busy_gpu", {"occupancy.gpus_free"}, run_suite("busy_gpu")))
    finally:
        hog.kill()
        hog.wait()

    # 2. A hidden GPU: CUDA_VISIBLE_DEVICES leaves none of the host's GPUs visible to CUDA. On a one-GPU machine
    # this is the only way to hide one; the suite must say the run does not test the GPUs the host has.
    scenarios.append(
        (
            "hidden_gpu",
            {"gpus.selected"},
            run_suite("hidden_gpu", "--expect-gpus", "1", env={"CUDA_VISIBLE_DEVICES": ""}),
        )
    )

    # 3. A missing GPU: the inventory promises two, the host has one.
    scenarios.append(("missing_gpu", {"health.gpu_count"}, run_suite("missing_gpu", "--expect-gpus", "2")))

    # 4. The power limit, read only: a limit below the default fails idle_throttle only where the SW power cap
    # holds the clocks at idle; at the default limit the check passes (a harmless idle flag passes with a note).
    power = results["power"]
    lowered = power["enforced_w"] < power["default_w"] - 0.5 and power["sw_power_cap_active"]
    results["power_expectation"] = (
        "health.idle_throttle[0] fails naming both numbers" if lowered else "health.idle_throttle[0] passes"
    )
    results["power_check"] = clean["checks"].get("health.idle_throttle[0]")

    ok = True
    for name, expected, run in scenarios:
        new = failing(run) - base
        run["failing_beyond_clean"] = sorted(new)
        run["expected"] = sorted(expected)
        # "Exactly its check": the seeded fault's checks fail, and nothing else beyond the clean run's failures.
        run["ok"] = expected <= failing(run) and new <= expected
        ok &= run["ok"]
        results[name] = run
    idle = results["power_check"]
    results["power_ok"] = idle is not None and (idle[0] == "fail") == lowered
    ok &= results["power_ok"]
    results["ok"] = ok
    (OUT / "seed_faults.json").write_text(json.dumps(results, indent=2, default=str))
    for name in ("clean", *(s[0] for s in scenarios)):
        r = results[name]
        print(f"{name:12} exit {r['exit_status']}  failing: {sorted(failing(r)) or '-'}  ok: {r.get('ok', '-')}")
    print(f"power: {power}  -> {results['power_expectation']}: {idle}")
    print("ALL OK" if ok else "SOME SCENARIO DID NOT FAIL EXACTLY ITS CHECK")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
