"""Several study runs per GPU, measured on one GPU machine in one call (run by study_packing.sh; see its header).

Phases, each under its own time limit and skipped (said so in the summary) when the budget is spent:
  1. the plain reference (style_transfer_ref.py, TF32 + channels_last, 1000 iterations at 532×512): one process, then
     K at once; NVML utilisation sampled through each;
  2. `gpulab run style_transfer --size full` as a study's run trains (the precision plan's TF32 + channels_last)
     with the eager loop;
  3. a shortened neural-style study (RUNS runs at full size, learning_rate varied) with --per-gpu 1, then auto;
  4. the same `gpulab run` with the compiled loops (LOOPS, default compile-graphs: torch.compile + CUDA graphs),
     last because compiling takes about a minute; its loss beside the eager run's is the trajectory check.
Writes $OUT/summary.json and $OUT/summary.md (minutes per run, GPU busy %), the logs, and each study's
sessions.json and database.json.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpulab.telemetry import Sampler  # noqa: E402  (NVML only: this driver never opens a CUDA context)

OUT = Path(os.environ.get("OUT") or "device-out")
PY = os.environ.get("PY") or sys.executable
RUNS = int(os.environ.get("RUNS", "24"))
K = int(os.environ.get("K", "4"))
BUDGET_S = float(os.environ.get("BUDGET_S", "510"))
STARTED = time.monotonic()
ENV = {
    **os.environ,
    "PYTHONPATH": f"{ROOT / 'src'}" + (f":{os.environ['PYTHONPATH']}" if "PYTHONPATH" in os.environ else ""),
}
summary: dict[str, Any] = {"runs": RUNS, "k": K, "budget_s": BUDGET_S, "phases": {}, "skipped": []}


def left() -> float:
    return BUDGET_S - (time.monotonic() - STARTED)


def log(text: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {text}", flush=True)


def busy(sampler: Sampler, start: float, end: float) -> dict[str, Any] | None:
    stats = sampler.summary(start=start, end=end)
    if stats is None or not stats.per_gpu:
        return None
    g = stats.per_gpu[0]
    return {k: getattr(g, k) for k in ("util_mean", "mem_max_mib", "power_mean_w", "sm_mhz_mean", "samples")}


def reference_script() -> Path | None:
    for candidate in (
        os.environ.get("REF"),
        "shared/reference/style_transfer_ref.py",
        "/work/shared/reference/style_transfer_ref.py",
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    return None


def phase_reference(sampler: Sampler) -> None:
    ref = reference_script()
    if ref is None:
        summary["skipped"].append("reference: style_transfer_ref.py not found (set REF=PATH)")
        return
    result: dict[str, Any] = {"script": str(ref)}
    for count in (1, K):
        if left() < 60 + 15 * count:
            summary["skipped"].append(f"reference ×{count}: budget spent")
            break
        t0 = time.time()
        procs = [
            subprocess.Popen(
                [PY, str(ref), "style", "1000", "cuda", "tf32"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=ENV,
            )
            for _ in range(count)
        ]
        lines = []
        for proc in procs:
            try:
                out, _ = proc.communicate(timeout=max(30.0, left() - 30))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            lines.append(out)
        t1 = time.time()
        (OUT / "logs" / f"reference_x{count}.log").write_text("\n".join(lines))
        loops = []
        for out in lines:
            for line in out.splitlines():
                if line.startswith("{") and '"per_1000"' in line:
                    loops.append(json.loads(line)["seconds"])
        mean = sum(loops) / len(loops) if len(loops) == count else None
        result[f"x{count}"] = {
            "loop_s_each": loops,
            "s_per_run": mean / count if mean else None,  # the processes overlap: each run's share of the GPU
            "wall_s": round(t1 - t0, 2),
            "gpu": busy(sampler, t0, t1),
        }
        log(f"reference ×{count}: loops {loops}")
    summary["phases"]["reference"] = result


def loop_settings() -> list[str | None]:
    """The style-transfer loop settings to time (LOOPS, default eager and compile-graphs) among those this checkout
    offers (its `loop` parameter); [None] without one."""
    from gpulab.workloads.style_transfer import loops

    offered = list(getattr(loops, "LOOPS", ()))
    wanted = os.environ.get("LOOPS", "eager compile-graphs").split()
    return [loop for loop in wanted if loop in offered] or [None]


def phase_gpulab_run(sampler: Sampler, loops: list[str | None]) -> None:
    result: dict[str, Any] = summary["phases"].setdefault("gpulab_run", {})
    for loop in loops:
        name = loop or "default"
        if left() < 90:
            summary["skipped"].append(f"gpulab run ({name}): budget spent")
            break
        cmd = [PY, "-m", "gpulab", "run", "style_transfer", "--launcher", "gpu", "--size", "full", "--precision",
               "tf32", "--channels-last", "--warmup", "3", "--json", "--no-telemetry"]  # fmt: skip
        if loop:
            cmd += ["--param", f"loop={json.dumps(loop)}"]
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=max(30.0, min(240.0, left() - 20)))
        t1 = time.time()
        (OUT / "logs" / f"gpulab_run_{name}.log").write_text(proc.stderr + "\n" + proc.stdout)
        entry: dict[str, Any] = {"rc": proc.returncode, "wall_s": round(t1 - t0, 2), "gpu": busy(sampler, t0, t1)}
        if proc.returncode == 0:
            doc = json.loads(proc.stdout)
            params = doc.get("params") or {}
            entry.update(seconds=doc.get("seconds"), final_loss=params.get("final_loss"), steps=doc.get("steps"))
        result[name] = entry
        log(f"gpulab run ({name}): {entry.get('seconds')} s, rc {proc.returncode}")


def run_group(cmd: list[str], timeout: float) -> tuple[int, str]:
    """Run `cmd` in its own process group; past `timeout`, Ctrl-C it (a study keeps its finished runs and writes
    its session), then kill what is left of the group (its Dask workers). (exit status, stderr + stdout)"""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, err + "\n" + out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return 124, f"stopped after {timeout:.0f} s\n{err}\n{out}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


STUDY = """# neural-style, shortened for a timing: its fixed centre, learning_rate varied over {runs} values
study: neural-style-timing
workload: style_transfer
framework: torch
size: full
precision: plan
fixed: {{width: 512, iterations: 1000, initial: noise, pooling: max, content_weight: 1, learning_rate: 10,
  style_scales: 1, content_weight_blend: 0.2, style_weight: 10, tv_weight: 100, style_layer_weight_exp: 1}}
vary:
  mode: star
  params:
    learning_rate: {{logspace: [0.5, 200, {runs}]}}
"""


def phase_study(sampler: Sampler) -> None:
    work = OUT / "work"
    study = work / "neural-style-timing.yml"
    study.write_text(STUDY.format(runs=RUNS))
    result: dict[str, Any] = {}
    for per_gpu in ("1", "auto"):
        if left() < 60:
            summary["skipped"].append(f"study --per-gpu {per_gpu}: budget spent")
            break
        where = work / f"study-{per_gpu}"
        cmd = [PY, "-m", "gpulab", "study", "run", str(study), "--study-dir", str(where), "--per-gpu", per_gpu]
        t0 = time.time()
        rc, text = run_group(cmd, max(30.0, left() - 10))
        t1 = time.time()
        (OUT / "logs" / f"study_{per_gpu}.log").write_text(text)
        entry: dict[str, Any] = {"rc": rc, "wall_s": round(t1 - t0, 2), "gpu": busy(sampler, t0, t1)}
        sessions = where / "sessions.json"
        if sessions.is_file():
            kept = OUT / f"study-{per_gpu}"
            kept.mkdir(exist_ok=True)
            for name in ("sessions.json", "database.json", "report.md"):
                if (where / name).is_file():
                    (kept / name).write_bytes((where / name).read_bytes())
            last = json.loads(sessions.read_text())[-1]
            runs = int(last.get("ok") or 0) + int(last.get("failed") or 0)
            entry.update(
                ok=last.get("ok"),
                failed=last.get("failed"),
                session_wall_s=last.get("wall_s"),
                s_per_run=last["wall_s"] / runs if runs else None,
                minutes_for_252=round(last["wall_s"] / runs * 252 / 60, 2) if runs else None,
                packing=last.get("packing"),
                workers=last.get("workers"),
                study_gpu_use=last.get("gpu_use"),
            )
        result[per_gpu] = entry
        log(
            f"study --per-gpu {per_gpu}: {entry.get('ok')} ok in {entry.get('session_wall_s')} s "
            f"({entry.get('s_per_run')} s/run)"
        )
    summary["phases"]["study"] = result


def markdown() -> str:
    lines = ["# Study packing on one GPU", "", f"GPU: {summary.get('gpu')}", ""]
    ref = summary["phases"].get("reference") or {}
    for key in ("x1", f"x{K}"):
        if key in ref:
            r = ref[key]
            util = (r.get("gpu") or {}).get("util_mean")
            lines.append(f"- reference {key}: {r.get('s_per_run')} s per run, GPU busy {util} %")
    for name, r in (summary["phases"].get("gpulab_run") or {}).items():
        util = (r.get("gpu") or {}).get("util_mean")
        lines.append(
            f"- gpulab run ({name}): {r.get('seconds')} s per 1000 iterations, final loss {r.get('final_loss')}, "
            f"GPU busy {util} % (whole process)"
        )
    for per_gpu, r in (summary["phases"].get("study") or {}).items():
        use = r.get("study_gpu_use") or [{}]
        lines.append(
            f"- study --per-gpu {per_gpu}: {r.get('ok')} ok / {r.get('failed')} failed, {r.get('s_per_run')} s per run "
            f"({r.get('minutes_for_252')} min for 252), GPU busy {use[0].get('util_mean')} % (packed phase), "
            f"per GPU {(r.get('packing') or {}).get('per_gpu')}: {(r.get('packing') or {}).get('why')}"
        )
    lines += [f"- skipped: {s}" for s in summary["skipped"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    (OUT / "logs").mkdir(parents=True, exist_ok=True)
    (OUT / "work").mkdir(exist_ok=True)
    try:
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
        summary["gpu"] = smi.stdout.strip()
    except OSError as err:
        summary["gpu"] = f"nvidia-smi: {err}"
    with Sampler([0], interval_s=0.1) as sampler:
        summary["nvml"] = sampler.problem or "sampled"
        loops = loop_settings()
        phases = {
            "reference": lambda: phase_reference(sampler),
            "run": lambda: phase_gpulab_run(sampler, loops[:1]),
            "study": lambda: phase_study(sampler),
            "compiled": lambda: phase_gpulab_run(sampler, loops[1:]),  # last: their compile takes a minute
        }
        wanted = os.environ.get("PHASES", " ".join(phases)).split()
        summary["skipped"] += [f"{name}: not in PHASES" for name in phases if name not in wanted]
        for phase in (phases[name] for name in phases if name in wanted):
            try:
                phase()
            except Exception as err:  # a phase's failure is a line of the summary; the others still run
                summary["skipped"].append(f"a phase failed: {type(err).__name__}: {err}")
            (OUT / "summary.json").write_text(json.dumps(summary, indent=1))
    summary["elapsed_s"] = round(time.monotonic() - STARTED, 1)
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1))
    (OUT / "summary.md").write_text(markdown())
    print(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
