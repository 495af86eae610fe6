#!/usr/bin/env bash
# Several study runs per GPU, measured in one call of under 9 minutes on one GPU (an H100): the plain reference at
# 1 and K processes at once, `gpulab run style_transfer --size full` per loop setting, and a RUNS-run full-size
# neural-style study with --per-gpu 1 and auto; NVML utilisation sampled throughout. Results: $OUT/summary.md,
# $OUT/summary.json, $OUT/logs/, $OUT/study-{1,auto}/ (sessions.json, database.json, report.md).
#
#   OUT=/tmp/out bash tests/device/study_packing.sh
#
# Needs torch + torchvision with CUDA, nvidia-ml-py, dask distributed, psweep, pandas, PyYAML (a carried venv: set
# PY=venv/bin/python). The reference script is REF, else shared/reference/style_transfer_ref.py. Knobs: RUNS
# (default 24), K (4), LOOPS ("eager compile-graphs"), PHASES ("reference run study compiled"), BUDGET_S (510: later phases are skipped, and said so, once
# it is spent). Changes no clock, power or mode setting; reads the GPU through NVML only.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder for the results}"
PY=${PY:-python3}
export OUT PY
"$PY" -c 'import torch, torchvision, pynvml, distributed, psweep, yaml; assert torch.cuda.is_available()' \
  || { echo "study_packing: this python lacks a package above (or CUDA); set PY to a venv's python" >&2; exit 2; }
exec "$PY" tests/device/study_packing.py
