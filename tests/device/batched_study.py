"""Batched neural-style studies on a GPU machine, in one call (see batched_study.sh for how to run it).

Phases (PHASES, default "loops check study"):
  loops  batches of LOOP_BATCHES full-size runs (1: one run) stepped LOOP_STEPS times in the eager loop and
         compiled with CUDA graphs: seconds per run of 1000 iterations, the compile's cost apart; a CUDA profile
         of the eager loop at the second batch size.
  check  tests/device/batch-check.yml (eight runs that differ in every shared number) one by one (--batch-runs 1)
         twice and as one batch (--batch-runs 8), one worker: each run's final loss batched against alone, and
         alone against alone (what the same run gives twice), per-run times.
  study  the whole 252-run neural-style study as shipped (batch_runs: auto) on WORKERS workers (default all GPUs),
         or its VARIANT.
Writes $OUT/summary.json, $OUT/log.txt, $OUT/logs.tar.gz (each phase's output) and the study's report.html,
report.md and sessions.json.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(os.environ["OUT"])
PY = os.environ.get("PY", sys.executable)
WORK = Path(os.environ.get("WORK", "/tmp/batched-study"))
PHASES = os.environ.get("PHASES", "loops check study").split()
WORKERS = os.environ.get("WORKERS", "all")
VARIANT = os.environ.get("VARIANT", "")  # of the neural-style study; default the whole study
STUDY_BUDGET_S = float(os.environ.get("STUDY_BUDGET_S", "3600"))  # then Ctrl-C: what finished is measured
LOOP_BATCHES = os.environ.get("LOOP_BATCHES", "1,8,32")
LOOP_STEPS = int(os.environ.get("LOOP_STEPS", "60"))
summary: dict[str, object] = {}


def log(text: str) -> None:
    print(f"[{time.strftime('%T')}] {text}", flush=True)
    with (OUT / "log.txt").open("a") as fh:
        fh.write(text + "\n")


def gpulab(*args: str, name: str) -> tuple[int, float]:
    started = time.perf_counter()
    with (WORK / f"{name}.log").open("w") as fh:
        proc = subprocess.Popen([PY, "-m", "gpulab", *args], stdout=fh, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=STUDY_BUDGET_S)
        except subprocess.TimeoutExpired:  # Ctrl-C: the study records what finished
            proc.send_signal(signal.SIGINT)
            code = proc.wait()
    seconds = time.perf_counter() - started
    log(f"gpulab {' '.join(args)}: exit {code} in {seconds:.1f} s")
    return code, seconds


def rows(study_dir: Path) -> list[dict[str, object]]:
    out = []
    for path in study_dir.glob("*/result.json"):
        row = json.loads((study_dir / path.parent.name / "row.json").read_text())
        out.append(row)
    return out


LOOPS_CODE = r"""
import json, sys, time, torch
from gpulab.records import RunConfig
from gpulab.launch.measuring import set_cuda_flags
from gpulab.names import Precision
from gpulab.workloads.style_transfer.batch import BatchedStyleSession
batches, steps = [int(b) for b in sys.argv[1].split(",")], int(sys.argv[2])
base = {"width": 512, "iterations": steps, "content_weight": 1, "style_weight": 10, "tv_weight": 100,
        "content_weight_blend": 0.2}
set_cuda_flags("cuda:0")
out = {}
def timed(session, label, runs):
    t0 = time.perf_counter()
    for _ in range(5):
        session.step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps - 5):
        session.step()
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / (steps - 5)
    out[label] = {"first5_s": round(first, 2), "s_per_step": per, "s_per_run_1000": 1000 * per / runs,
                  "peak_mib": torch.cuda.max_memory_allocated() / 2**20}
    print(label, out[label], flush=True)
for loop in ("eager", "compile-graphs"):
    for batch in batches:
        cfgs = [RunConfig(workload="style_transfer", precision=Precision.TF32, size="full", seed=k, channels_last=True,
                          params={**base, "loop": loop, "learning_rate": 2.0 + k}) for k in range(batch)]
        s = BatchedStyleSession(cfgs, "cuda:0")
        timed(s, f"batch{batch}-{loop}", batch)
        if loop == "eager" and batch == batches[1]:
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    s.step()
                torch.cuda.synchronize()
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14, max_name_column_width=60))
        s.finish_runs()
        del s
        torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
print("JSON" + json.dumps(out))
"""


def phase_loops() -> None:
    proc = subprocess.run(
        [PY, "-c", LOOPS_CODE, LOOP_BATCHES, str(LOOP_STEPS)], capture_output=True, text=True, timeout=400
    )
    (WORK / "loops.log").write_text(proc.stdout + proc.stderr)
    print(proc.stdout[-6000:], proc.stderr[-1500:], flush=True)
    found = [line[4:] for line in proc.stdout.splitlines() if line.startswith("JSON")]
    summary["loops"] = json.loads(found[-1]) if found else {"failed": proc.returncode, "tail": proc.stderr[-800:]}
    log(f"loops: {summary['loops']}")


def phase_check() -> None:
    study = Path(__file__).with_name("batch-check.yml")
    result: dict[str, object] = {}
    by_mode: dict[str, dict[str, dict[str, object]]] = {}
    for mode, size in (("alone", "1"), ("again", "1"), ("batched", "8")):
        target = WORK / f"check-{mode}"
        code, seconds = gpulab(
            "study", "run", str(study), "--study-dir", str(target), "--batch-runs", size, "--workers", "1",
            *os.environ.get("CHECK_EXTRA", "").split(), name=f"check-{mode}",
        )  # fmt: skip
        found = rows(target)
        by_mode[mode] = {str(r["_pset_hash"]): r for r in found}
        times = sorted(float(r["timed_s_"]) for r in found if r.get("status_") == "ok")
        result[mode] = {"exit": code, "wall_s": round(seconds, 1), "runs": len(found),
                        "timed_s_per_run": times, "median_s": times[len(times) // 2] if times else None}  # fmt: skip
    diffs = []
    for key, alone in by_mode["alone"].items():
        other = {m: by_mode[m].get(key) or {} for m in ("again", "batched")}
        losses = [alone.get("final_loss_"), other["again"].get("final_loss_"), other["batched"].get("final_loss_")]
        if any(v is None for v in losses):
            diffs.append({"pset": key, "missing": True})
            continue
        a, again, b = (float(v) for v in losses)  # type: ignore[arg-type]
        diffs.append({k: alone.get(k) for k in ("learning_rate", "style_weight", "tv_weight", "style_scales",
                                                 "content_weight_blend", "style_layer_weight_exp")}
                     | {"alone": a, "again": again, "batched": b, "rel_diff": abs(a - b) / abs(a),
                        "rel_diff_again": abs(a - again) / abs(a)})  # fmt: skip
    result["losses"] = diffs
    rel = [d["rel_diff"] for d in diffs if "rel_diff" in d]
    result["max_rel_diff"] = max(rel) if rel else None
    rel = [d["rel_diff_again"] for d in diffs if "rel_diff_again" in d]
    result["max_rel_diff_again"] = max(rel) if rel else None
    summary["check"] = result
    log(
        f"check: largest relative loss difference, batched {result['max_rel_diff']}, alone again "
        f"{result['max_rel_diff_again']}"
    )


def phase_study() -> None:
    target = WORK / f"study-{WORKERS}"
    variant = ["--variant", VARIANT] if VARIANT else []
    code, seconds = gpulab("study", "run", "neural-style", *variant, "--study-dir", str(target), "--workers", WORKERS,
                           name=f"study-{WORKERS}")  # fmt: skip
    found = rows(target)
    ok = [r for r in found if r.get("status_") == "ok"]
    sessions = json.loads((target / "sessions.json").read_text()) if (target / "sessions.json").exists() else []
    times = sorted(float(r["timed_s_"]) for r in ok)
    summary[f"study-{WORKERS}"] = {
        "exit": code, "wall_s": round(seconds, 1), "session_wall_s": sessions[-1].get("wall_s") if sessions else None,
        "ok": len(ok), "runs": len(found), "batching": sessions[-1].get("batching") if sessions else None,
        "gpu_use": sessions[-1].get("gpu_use") if sessions else None,
        "median_timed_s_per_run": times[len(times) // 2] if times else None,
        "batch_sizes": sorted({int(r.get("batch_runs_") or 1) for r in ok}),
        "batches": sorted({(str(r.get("worker_")), int(r.get("batch_runs_") or 1), float(r.get("batch_timed_s_") or 0),
                            float(r["loop_started_"])) for r in ok if r.get("loop_started_")}, key=lambda b: b[3]),
    }  # fmt: skip
    (OUT / "study.log").write_text((WORK / f"study-{WORKERS}.log").read_text()[-20000:])
    for name in ("report.html", "report.md", "sessions.json"):
        if (target / name).exists():
            (OUT / f"study-{WORKERS}-{name}").write_bytes((target / name).read_bytes())
    log(f"study: {summary[f'study-{WORKERS}']}")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    for phase in PHASES:
        {"loops": phase_loops, "check": phase_check, "study": phase_study}[phase]()
        (OUT / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    subprocess.call(["tar", "czf", str(OUT / "logs.tar.gz"), "-C", str(WORK), *[p.name for p in WORK.glob("*.log")]])


if __name__ == "__main__":
    main()
